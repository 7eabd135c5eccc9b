package controller

import (
	"sync"
	"time"
)

// classProgress remembers, per class, the last time this controller saw one of the class's
// claims become Bound. A claim that waits for its driver while the driver keeps binding other
// claims of the class is waiting its turn in a backlog, not stuck: its quiet wait (quietUntil)
// runs from that last bind rather than from its own creation, so a step of 10,000 claims does not
// cost a WaitingForAddress status write for every claim that queues for more than two minutes
// (DESIGN §5a's write budget). A driver that stops binding lets every quiet wait end a quiet wait
// after its last bind; quietCap bounds the wait however busy the driver is.
//
// The memory is fed by the claim passes themselves (a bind this controller writes, and a Bound
// claim's condition on any pass, so that after a restart the first passes over Bound claims
// bring it back); it holds one entry per class seen, forgotten when the class is.
type classProgress struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// saw records that a claim of class became Bound at at.
func (p *classProgress) saw(class string, at time.Time) {
	if class == "" || at.IsZero() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]time.Time{}
	}
	if at.After(p.last[class]) {
		p.last[class] = at
	}
}

// lastBind is when a claim of class last became Bound (zero when none was seen).
func (p *classProgress) lastBind(class string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[class]
}

// forget drops a class that is gone.
func (p *classProgress) forget(class string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, class)
}
