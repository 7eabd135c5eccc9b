package driver

import (
	"container/heap"
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The provisioning window. Each claim family waiting for an address used to get a placeholder of
// its own at once: on a full pool every waiting claim held a LoadBalancer Service, with a cluster
// IP, outside any tenant's quota, nudged for ever. Now at most plan.ProvisioningSlots placeholders
// of a pool and family wait for MetalLB at a time (the window, and no more than MetalLB counts
// free addresses, but one); a claim beyond them waits its turn with no Service at all, queued
// here oldest first, and is woken when a slot frees: a placeholder of the pool is served, retired
// or gone, or MetalLB's count of the pool changes. The queue lives in memory: after a restart
// every claim's first pass asks again. A woken claim that finds no slot after all queues again.

// poolFamily keys the window: a pool, by name, and a family.
type poolFamily struct {
	pool string
	fam  ipamv1.IPFamily
}

type provisioningWindow struct {
	namespace string
	size      int
	expectFor time.Duration
	now       func() time.Time

	mu sync.Mutex
	// unserved are the provisioning placeholders of the driver's namespace that MetalLB has not
	// served, as the cache shows them: name → the "namespace/name" of their claim.
	unserved map[poolFamily]map[string]string
	// granted are the slots given to a create the cache does not show yet: name → when.
	granted map[poolFamily]map[string]time.Time
	// waiting are the claims that need a placeholder and have no slot, oldest first.
	waiting map[poolFamily]*waitQueue
	// pools is MetalLB's count of each pool, as last seen, and consumed the placeholders of the
	// pool served since: MetalLB's count follows its assignments a moment later, and a slot freed
	// by a serve must not be taken for room the pool still has.
	pools    map[poolFamily]plan.PoolState
	consumed map[poolFamily]int64
	// wakes are the claims to bring back to the claim reconciler (forward), each once
	// (woken). They are kept only while forward runs: a standby replica, whose informers see
	// everything but whose reconcilers do not run, would otherwise pile up wakes nobody takes.
	wakes      []types.NamespacedName
	woken      map[types.NamespacedName]bool
	forwarding bool
	signal     chan struct{}
}

func newProvisioningWindow(namespace string, size int, expectFor time.Duration, now func() time.Time) *provisioningWindow {
	return &provisioningWindow{namespace: namespace, size: size, expectFor: expectFor, now: now,
		unserved: map[poolFamily]map[string]string{}, granted: map[poolFamily]map[string]time.Time{},
		waiting: map[poolFamily]*waitQueue{}, pools: map[poolFamily]plan.PoolState{}, consumed: map[poolFamily]int64{},
		woken: map[types.NamespacedName]bool{}, signal: make(chan struct{}, 1)}
}

// serviceHandler follows the driver's provisioning placeholders in the Service informer.
func (w *provisioningWindow) serviceHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.seeService(o, false) },
		UpdateFunc: func(_, o any) { w.seeService(o, false) },
		DeleteFunc: func(o any) { w.seeService(o, true) },
	}
}

// poolHandler follows MetalLB's count of each pool in the pool informer.
func (w *provisioningWindow) poolHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.seePool(o, false) },
		UpdateFunc: func(_, o any) { w.seePool(o, false) },
		DeleteFunc: func(o any) { w.seePool(o, true) },
	}
}

func unwrapDeleted(o any) any {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func (w *provisioningWindow) seeService(o any, deleted bool) {
	s, ok := unwrapDeleted(o).(*corev1.Service)
	if !ok || s.Namespace != w.namespace {
		return
	}
	pf := poolFamily{pool: s.Annotations[metallb.AnnotationAddressPool], fam: ipamv1.IPFamily(s.Labels[plan.LabelFamily])}
	waits := !deleted && s.DeletionTimestamp == nil && s.Labels[plan.LabelRole] == plan.RoleProvisioning && len(plan.IngressIPs(s)) == 0
	w.mu.Lock()
	defer w.mu.Unlock()
	freed := false
	if _, ok := w.granted[pf][s.Name]; ok {
		delete(w.granted[pf], s.Name)
		freed = !waits
	}
	if waits {
		if w.unserved[pf] == nil {
			w.unserved[pf] = map[string]string{}
		}
		w.unserved[pf][s.Name] = s.Annotations[plan.AnnotationClaim]
		return
	}
	if _, ok := w.unserved[pf][s.Name]; ok {
		delete(w.unserved[pf], s.Name)
		freed = true
		if len(plan.IngressIPs(s)) > 0 {
			w.consumed[pf]++
		}
	}
	if freed {
		w.releaseLocked(pf)
	}
}

func (w *provisioningWindow) seePool(o any, deleted bool) {
	p, ok := unwrapDeleted(o).(*metallb.IPAddressPool)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		pf := poolFamily{pool: p.Name, fam: fam}
		st := plan.PoolStateOf(p, fam)
		if deleted {
			st = plan.PoolState{Free: -1}
		}
		prev, seen := w.pools[pf]
		w.pools[pf] = st
		if prev.Count != st.Count {
			delete(w.consumed, pf)
		}
		if !seen || prev.Stamp == st.Stamp || st.Full {
			continue
		}
		// The pool changed and has room: its placeholders MetalLB refused may be asked again
		// (their claims decide, plan.PlanProvision), and its slots may have grown.
		for _, key := range w.unserved[pf] {
			w.wakeLocked(key)
		}
		w.releaseLocked(pf)
	}
}

// grant gives the claim's next placeholder of the pool and family a slot, when the window has
// one for it (st: MetalLB's count of the pool as the claim's pass read it, used until the window
// has seen the pool itself). A placeholder of that name the window counts already keeps its slot.
func (w *provisioningWindow) grant(pf poolFamily, name string, st plan.PoolState) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.expireLocked(pf) {
		// Slots of creates that never showed are free again: the oldest waiting claims go first.
		defer w.releaseLocked(pf)
	}
	if _, ok := w.granted[pf][name]; ok {
		return true
	}
	if _, ok := w.unserved[pf][name]; ok {
		return true
	}
	if len(w.unserved[pf])+len(w.granted[pf]) >= w.slotsLocked(pf, st) {
		return false
	}
	if w.granted[pf] == nil {
		w.granted[pf] = map[string]time.Time{}
	}
	w.granted[pf][name] = w.now()
	return true
}

// cancel returns a slot granted to a create that was not made.
func (w *provisioningWindow) cancel(pf poolFamily, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.granted[pf][name]; ok {
		delete(w.granted[pf], name)
		w.releaseLocked(pf)
	}
}

// wait queues a claim for a slot of the pool and family.
func (w *provisioningWindow) wait(pf poolFamily, claim types.NamespacedName, created time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.waiting[pf]
	if q == nil {
		q = &waitQueue{at: map[types.NamespacedName]time.Time{}}
		w.waiting[pf] = q
	}
	q.add(claim, created)
	// A slot may have freed between the claim's read and now.
	w.releaseLocked(pf)
}

// stopWaiting takes a claim out of every queue: it has its placeholders, or needs none.
func (w *provisioningWindow) stopWaiting(claim types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.waiting {
		delete(q.at, claim)
	}
}

// releaseLocked wakes as many of the oldest waiting claims as the pool and family have free
// slots.
func (w *provisioningWindow) releaseLocked(pf poolFamily) {
	q := w.waiting[pf]
	if q == nil || len(q.at) == 0 {
		return
	}
	w.expireLocked(pf)
	for free := w.slotsLocked(pf, plan.PoolState{Free: -1}) - len(w.unserved[pf]) - len(w.granted[pf]); free > 0; free-- {
		claim, ok := q.pop()
		if !ok {
			break
		}
		w.addWakeLocked(claim)
	}
	w.notifyLocked()
}

// addWakeLocked records a claim to bring back, once, and only while forward runs.
func (w *provisioningWindow) addWakeLocked(claim types.NamespacedName) {
	if !w.forwarding || w.woken[claim] {
		return
	}
	w.woken[claim] = true
	w.wakes = append(w.wakes, claim)
}

// slotsLocked is how many placeholders of the pool and family may wait for MetalLB at once, by
// MetalLB's last count less what was served since (fallback: the count to use before the window
// has seen the pool).
func (w *provisioningWindow) slotsLocked(pf poolFamily, fallback plan.PoolState) int {
	st, ok := w.pools[pf]
	if !ok {
		st = fallback
	}
	if st.Free >= 0 {
		st.Free = max(st.Free-w.consumed[pf], 0)
	}
	return plan.ProvisioningSlots(st, w.size)
}

func (w *provisioningWindow) wakeLocked(key string) {
	ns, name, ok := splitKey(key)
	if !ok {
		return
	}
	w.addWakeLocked(types.NamespacedName{Namespace: ns, Name: name})
	w.notifyLocked()
}

func (w *provisioningWindow) notifyLocked() {
	if len(w.wakes) == 0 {
		return
	}
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// expireLocked forgets slots granted to creates the cache has not shown for expectFor, and says
// whether it forgot any.
func (w *provisioningWindow) expireLocked(pf poolFamily) bool {
	now := w.now()
	expired := false
	for name, at := range w.granted[pf] {
		if now.Sub(at) > w.expectFor {
			delete(w.granted[pf], name)
			expired = true
		}
	}
	return expired
}

// expire forgets the slots of every pool and family granted to creates the cache never showed,
// and wakes the claims waiting for them: without it, a slot lost that way would wake nobody, and
// the claims next in line would wait for their next re-check.
func (w *provisioningWindow) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pf := range w.granted {
		if w.expireLocked(pf) {
			w.releaseLocked(pf)
		}
	}
}

// forward brings the woken claims to the claim reconciler, until ctx ends (a manager runnable
// that runs on the leader only: the informers' handlers never block on the reconciler's queue),
// and expires lost slots now and then.
func (w *provisioningWindow) forward(ctx context.Context, to chan<- ctrlevent.TypedGenericEvent[client.Object]) error {
	w.mu.Lock()
	w.forwarding = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.forwarding, w.wakes, w.woken = false, nil, map[types.NamespacedName]bool{}
		w.mu.Unlock()
	}()
	tick := time.NewTicker(max(w.expectFor, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.expire()
			continue
		case <-w.signal:
		}
		w.mu.Lock()
		wakes := w.wakes
		w.wakes = nil
		for _, k := range wakes {
			delete(w.woken, k)
		}
		w.mu.Unlock()
		for _, k := range wakes {
			ev := ctrlevent.TypedGenericEvent[client.Object]{Object: &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
			select {
			case to <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// waitQueue is the claims waiting for a slot, oldest (by creation) first.
type waitQueue struct {
	at map[types.NamespacedName]time.Time
	h  waitHeap
}

type waitEntry struct {
	claim   types.NamespacedName
	created time.Time
}

func (q *waitQueue) add(claim types.NamespacedName, created time.Time) {
	if _, ok := q.at[claim]; ok {
		return
	}
	q.at[claim] = created
	if q.h.Len() > 2*len(q.at)+64 {
		// Mostly entries of claims that stopped waiting: rebuild from those that wait.
		q.h = q.h[:0]
		for c, at := range q.at {
			q.h = append(q.h, waitEntry{c, at})
		}
		heap.Init(&q.h)
		return
	}
	heap.Push(&q.h, waitEntry{claim, created})
}

// pop takes the oldest claim still waiting (entries of claims that stopped waiting are dropped
// on the way).
func (q *waitQueue) pop() (types.NamespacedName, bool) {
	for q.h.Len() > 0 {
		e := heap.Pop(&q.h).(waitEntry)
		if at, ok := q.at[e.claim]; ok && at.Equal(e.created) {
			delete(q.at, e.claim)
			return e.claim, true
		}
	}
	return types.NamespacedName{}, false
}

type waitHeap []waitEntry

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	if !h[i].created.Equal(h[j].created) {
		return h[i].created.Before(h[j].created)
	}
	return h[i].claim.String() < h[j].claim.String()
}
func (h waitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)   { *h = append(*h, x.(waitEntry)) }
func (h *waitHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
