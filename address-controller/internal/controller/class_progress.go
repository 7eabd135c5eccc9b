package controller

import (
	"sync"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// classProgress remembers, per class and family, the last time a claim of the class became Bound
// with an address of that family. A claim that waits for its driver while the driver keeps binding
// other claims of its class and families is waiting its turn in a backlog, not stuck: its quiet
// wait (quietUntil) runs from that last bind rather than from its own creation, so a step of 10,000
// claims does not cost a WaitingForAddress status write for every claim that queues for more than
// two minutes (docs/design.md#the-write-budget). A driver that stops binding a family (its IPv6
// range exhausted while IPv4 claims still bind) lets the quiet of claims asking for that family end
// a quiet wait after its last bind; quietCap bounds the wait however busy the driver is.
//
// The memory is fed by the claim passes: a bind this controller writes, and a Bound claim's
// condition on any pass. After a restart or a leader change the first pass that asks about a
// class seeds it from every Bound claim of the class in the cache (seed), so that claims queued
// before the restart are not all written the moment it comes up. It holds one entry per class
// seen, dropped when the class is.
type classProgress struct {
	mu     sync.Mutex
	last   map[string]map[ipamv1.IPFamily]time.Time
	seeded map[string]bool
	// seeding is held while a class is seeded: the other workers deciding claims of the class
	// wait for the seed instead of deciding from an empty memory.
	seeding sync.Mutex
}

// saw records that a claim of class became Bound at at, with addresses of families.
func (p *classProgress) saw(class string, families []ipamv1.IPFamily, at time.Time) {
	if class == "" || at.IsZero() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]map[ipamv1.IPFamily]time.Time{}
	}
	m := p.last[class]
	if m == nil {
		m = map[ipamv1.IPFamily]time.Time{}
		p.last[class] = m
	}
	for _, f := range families {
		if at.After(m[f]) {
			m[f] = at
		}
	}
}

// lastBind is the last time a claim of class was Bound with each of families: the earliest of
// their last binds (zero when one of them was never seen).
func (p *classProgress) lastBind(class string, families []ipamv1.IPFamily) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out time.Time
	for i, f := range families {
		t := p.last[class][f]
		if i == 0 || t.Before(out) {
			out = t
		}
	}
	return out
}

// seed runs fill once per class (until the class is forgotten), the first time it is asked
// for; callers that come meanwhile wait for it. A fill that fails is tried again by the next.
func (p *classProgress) seed(class string, fill func() error) error {
	if class == "" || p.isSeeded(class) {
		return nil
	}
	p.seeding.Lock()
	defer p.seeding.Unlock()
	if p.isSeeded(class) {
		return nil
	}
	if err := fill(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seeded == nil {
		p.seeded = map[string]bool{}
	}
	p.seeded[class] = true
	return nil
}

func (p *classProgress) isSeeded(class string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seeded[class]
}

// forget drops a class that is gone.
func (p *classProgress) forget(class string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, class)
	delete(p.seeded, class)
}

// boundFamilies are the families of a claim's addresses as its status lists them.
func boundFamilies(claim *ipamv1.IPAddressClaim) []ipamv1.IPFamily {
	var out []ipamv1.IPFamily
	for _, a := range claim.Status.Addresses {
		out = append(out, a.Family)
	}
	return out
}
