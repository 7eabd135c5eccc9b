package driver

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// staleMemory remembers, per address, since when its IP has waited under names MetalLB may keep
// and when the driver last released them (plan_release.go). It only spaces the rounds out: what
// is released, and that a release Service never outlives ReleaseFor, rests on the apiserver's
// objects. An entry is forgotten when the wait ends or the address goes, so it stays bounded.
type staleMemory struct {
	mu sync.Mutex
	m  map[string]staleWait
	// deleted are the names of the placeholders this driver deleted while MetalLB served them
	// the address's IP, or as its hold for an attach, by address (the last few): the names
	// MetalLB may keep the IP under besides the usual ones.
	deleted map[string][]string
	// unserved is an address's attached Service's wait unserved (plan_notserved.go).
	unserved map[string]unservedWait
}

// maxDeletedNames bounds the names remembered per address (keys are addresses' names, one per
// IP of the pools: the memory is bounded by the pools' sizes even for an IP no address gets).
const maxDeletedNames = 4

func newStaleMemory() *staleMemory {
	return &staleMemory{m: map[string]staleWait{}, deleted: map[string][]string{}, unserved: map[string]unservedWait{}}
}

func (s *staleMemory) get(address string) (staleWait, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[address], slices.Clone(s.deleted[address])
}

// holdDeleted remembers that a placeholder named name, holding or served address's IP, was
// deleted.
func (s *staleMemory) holdDeleted(address, name string) {
	if address == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := slices.DeleteFunc(s.deleted[address], func(n string) bool { return n == name })
	d = append(d, name)
	if len(d) > maxDeletedNames {
		d = d[len(d)-maxDeletedNames:]
	}
	s.deleted[address] = d
}

func (s *staleMemory) set(address string, w staleWait) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[address] = w
}

func (s *staleMemory) forget(address string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, address)
	delete(s.deleted, address)
	delete(s.unserved, address)
}

// unservedOf is the memory of address's attached Service's wait unserved (zero: none).
func (s *staleMemory) unservedOf(address string) unservedWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unserved[address]
}

// setUnserved remembers w (a zero w forgets).
func (s *staleMemory) setUnserved(address string, w unservedWait) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.since.IsZero() {
		delete(s.unserved, address)
		return
	}
	s.unserved[address] = w
}

// staleSnapshot completes an address view with what it knows of MetalLB's kept allocations:
// the candidate names (from MetalLB's AllocationFailed messages on the holds, by uid), the
// address's release Services, the memory of the wait and, when a round is due, which names
// are free (read uncached: a name that exists, a placeholder just created included, is never
// released).
func (d *Driver) staleSnapshot(ctx context.Context, v *addressView, messages map[string]string) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexReleaseOf: v.addr.Name}); err != nil {
		return err
	}
	v.stale.releases = d.live(list.Items)
	w, deleted := d.stale.get(v.addr.Name)
	v.stale.since, v.stale.last, v.stale.remembered = w.since, w.last, len(deleted) > 0
	v.stale.names, v.stale.known = staleCandidates(v, messages, deleted...)
	if len(v.stale.names) == 0 {
		return nil
	}
	if due, _ := releaseDue(w.since, w.last, v.now, v.nudgeAfter, v.releaseAfter, v.stale.known); !due {
		return nil
	}
	v.stale.free = map[string]bool{}
	for _, n := range v.stale.names {
		var s corev1.Service
		err := d.reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: n}, &s)
		switch {
		case apierrors.IsNotFound(err):
			v.stale.free[n] = true
		case err != nil:
			return err
		}
	}
	return nil
}

// applyRelease makes the release writes of an address plan: expired release Services (and one
// in the way of the hold's name) go first, then the new ones; then the memory of the wait.
func (d *Driver) applyRelease(ctx context.Context, address string, rp releasePlan) error {
	for _, s := range rp.remove {
		if err := d.deleteService(ctx, s); err != nil {
			return err
		}
	}
	for _, s := range rp.create {
		// AlreadyExists: the name was taken since it was read (a placeholder, or a release of
		// an earlier pass): not released this round.
		if err := d.client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	switch {
	case rp.forget:
		d.stale.forget(address)
	case rp.wait != nil:
		d.stale.set(address, *rp.wait)
	}
	return nil
}

// sweepReleases deletes the release Services older than ReleaseFor: those of an address whose
// pass no longer looks at them (gone, or torn down) and those a restarted driver left.
func (d *Driver) sweepReleases(ctx context.Context) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels{LabelRole: RoleRelease}); err != nil {
		return err
	}
	now := d.now()
	for _, s := range d.live(list.Items) {
		if now.Sub(s.CreationTimestamp.Time) >= d.ReleaseFor {
			if err := d.deleteService(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// clearMemory remembers when this driver cleared a Service's stale ingress of an address
// (planAddress, staleHolder): the last clearLimit times within clearMemoryFor, by Service uid
// and address. Entries older than that are dropped whenever one is noted, so it stays bounded by
// the stale holders of the last few minutes.
type clearMemory struct {
	mu sync.Mutex
	m  map[string][]time.Time
}

func newClearMemory() *clearMemory { return &clearMemory{m: map[string][]time.Time{}} }

func clearMemoryKey(uid types.UID, address string) string { return string(uid) + "/" + address }

// get returns the clears of the Service's ingress of the address within clearMemoryFor of now.
func (c *clearMemory) get(uid types.UID, address string, now time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return recentClears(c.m[clearMemoryKey(uid, address)], now)
}

func (c *clearMemory) note(uid types.UID, address string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, ts := range c.m {
		if len(recentClears(ts, now)) == 0 {
			delete(c.m, k)
		}
	}
	k := clearMemoryKey(uid, address)
	ts := append(recentClears(c.m[k], now), now)
	if len(ts) > clearLimit {
		ts = ts[len(ts)-clearLimit:]
	}
	c.m[k] = ts
}

func recentClears(ts []time.Time, now time.Time) []time.Time {
	return slices.DeleteFunc(slices.Clone(ts), func(t time.Time) bool { return now.Sub(t) >= clearMemoryFor })
}
