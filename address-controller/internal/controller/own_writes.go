package controller

import (
	"slices"
	"sync"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// ownWrites remembers the resourceVersion of this controller's last write of each claim and
// address until the cache shows it (docs/design.md#a-view-that-includes-your-own-writes).
// A claim pass whose cached claim and addresses already show every write this controller made to
// them decides from the cache; one that lags reads them from the apiserver first (refresh).
// Reading always, before every write, cost the apiserver a read per write (at 10,000 claims,
// more reads than writes, on a control plane already out of CPU).
//
// The memory is this process's alone: after a restart or a leader change it is empty, and a
// cache can still lag behind writes made before (by the previous leader, whose standby's caches
// ran all along) or by others (a driver's pre-bound address, an admin's unbind). So the cache is
// trusted only for the finalizer and stamp and for a status that keeps the claim's phase and
// addresses (mayWriteFromCache): never for a bind, an unbind, a UID completion, a status that
// changes the phase or the addresses, nor while an address the claim's status names is missing
// from the cache. An entry the cache does not confirm within
// ownWriteTTL (the object went, or the cache is far behind) asks for one read from the apiserver
// and is dropped.
type ownWrites struct {
	mu      sync.Mutex
	m       map[string]ownWrite
	sweepAt int
}

type ownWrite struct {
	rv string
	at time.Time
}

// ownWriteTTL bounds an entry's life: far longer than a cache lags behind its apiserver.
const ownWriteTTL = 10 * time.Minute

func claimWriteKey(namespace, name string) string { return "claim/" + namespace + "/" + name }
func addressWriteKey(name string) string          { return "address/" + name }

// wrote records a write that left the object at resourceVersion rv.
func (w *ownWrites) wrote(key, rv string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]ownWrite{}
	}
	w.m[key] = ownWrite{rv: rv, at: now}
	if len(w.m) >= w.sweepAt {
		for k, e := range w.m {
			if now.Sub(e.at) > 2*ownWriteTTL { // (past ownWriteTTL, a pass reads once: shows)
				delete(w.m, k)
			}
		}
		w.sweepAt = max(2*len(w.m), 1024)
	}
}

// shows reports whether an object the cache holds at resourceVersion cached shows this
// controller's last write of it (or there is none to show), and forgets a write it shows.
func (w *ownWrites) shows(key, cached string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	if !ok {
		return true
	}
	if driverkit.RVAtLeast(cached, e.rv) {
		delete(w.m, key)
		return true
	}
	if now.Sub(e.at) > ownWriteTTL {
		delete(w.m, key) // unconfirmed for long: read once, then trust the cache again
	}
	return false
}

// forget drops an object's entry (it is gone).
func (w *ownWrites) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

func (w *ownWrites) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// mayWriteFromCache says whether a pass (which does not bind) may write what it decided from
// the cache: the finalizer and stamp, or a status that keeps the claim's phase and addresses
// (its condition's reason or message); no unbind, no UID completion; every address the claim's
// status names is in the cache; and the cache shows this controller's own writes.
func (r *ClaimReconciler) mayWriteFromCache(claim *ipamv1.IPAddressClaim, cached []ipamv1.IPAddress, p *claimPass, pending []string) bool {
	if p.binds() || len(p.sorted.surplus) > 0 || len(p.sorted.needUID) > 0 {
		return false
	}
	// A status that changes the phase or the addresses (Bound, Lost, an address added, dropped
	// or changed) rests on the addresses as the apiserver has them: an address cache behind a
	// driver's, an admin's or a previous leader's write could name an address that no longer
	// names the claim, or miss one that does.
	if p.statusChanges && (p.status.Phase != claim.Status.Phase || !slices.Equal(p.status.Addresses, claim.Status.Addresses)) {
		return false
	}
	for _, ca := range claim.Status.Addresses {
		if !slices.ContainsFunc(cached, func(a ipamv1.IPAddress) bool { return a.Name == ca.Name }) {
			return false
		}
	}
	return r.cacheShowsOwnWrites(claim, cached, pending)
}

// cacheShowsOwnWrites: the cached claim and every cached address of it show this controller's
// writes, and no address it bound is missing from the cache.
func (r *ClaimReconciler) cacheShowsOwnWrites(claim *ipamv1.IPAddressClaim, cached []ipamv1.IPAddress, pending []string) bool {
	if len(pending) > 0 {
		return false
	}
	now := r.now()
	ok := r.writes.shows(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, now)
	for i := range cached {
		ok = r.writes.shows(addressWriteKey(cached[i].Name), cached[i].ResourceVersion, now) && ok
	}
	return ok
}
