package driver

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// lostEvents makes the test driver's work queues (its NewQueue setting) lose the requests of
// chosen objects of one controller, as if their watch events had been lost: a test of what
// brings an object back without its events (the periodic sweep) loses them for a while (lose).
var lostEvents = &lossyQueues{lost: map[lostKey]bool{}}

type lostKey struct {
	controller string
	req        reconcile.Request
}

type lossyQueues struct {
	mu   sync.Mutex
	lost map[lostKey]bool
	// queued counts the requests added to each controller's queue (those not lost), by request.
	queued sync.Map
}

// queuedFor is how many times req has been added to the queue of the controller named
// controller (immediately, after a delay or rate limited).
func (q *lossyQueues) queuedFor(controller string, req reconcile.Request) int64 {
	if n, ok := q.queued.Load(lostKey{controller, req}); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func (q *lossyQueues) count(controller string, reqs ...reconcile.Request) {
	for _, r := range reqs {
		n, _ := q.queued.LoadOrStore(lostKey{controller, r}, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
}

// lose drops every request for req to the controller named controller until the returned
// function (also run at the test's end) brings them back.
func (q *lossyQueues) lose(t *testing.T, controller string, req reconcile.Request) (found func()) {
	k := lostKey{controller, req}
	q.mu.Lock()
	q.lost[k] = true
	q.mu.Unlock()
	found = func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.lost, k)
	}
	t.Cleanup(found)
	return found
}

func (q *lossyQueues) isLost(controller string, req reconcile.Request) bool {
	q.mu.Lock()
	lost := q.lost[lostKey{controller, req}]
	q.mu.Unlock()
	if !lost {
		q.count(controller, req)
	}
	return lost
}

// newQueue is controller-runtime's default queue (its priority queue) with the lost requests
// dropped on the way in.
func (q *lossyQueues) newQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return &lossyQueue{
		PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl }),
		name:          name, of: q,
	}
}

type lossyQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	name string
	of   *lossyQueues
}

func (l *lossyQueue) kept(items []reconcile.Request) []reconcile.Request {
	out := items[:0:0]
	for _, r := range items {
		if !l.of.isLost(l.name, r) {
			out = append(out, r)
		}
	}
	return out
}

func (l *lossyQueue) Add(r reconcile.Request) {
	if !l.of.isLost(l.name, r) {
		l.PriorityQueue.Add(r)
	}
}

func (l *lossyQueue) AddRateLimited(r reconcile.Request) {
	if !l.of.isLost(l.name, r) {
		l.PriorityQueue.AddRateLimited(r)
	}
}

func (l *lossyQueue) AddAfter(r reconcile.Request, after time.Duration) {
	if !l.of.isLost(l.name, r) {
		l.PriorityQueue.AddAfter(r, after)
	}
}

func (l *lossyQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if kept := l.kept(items); len(kept) > 0 {
		l.PriorityQueue.AddWithOpts(o, kept...)
	}
}
