package controller

import (
	"slices"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
)

// The claim reconciler remembers the resourceVersion of its last write of each claim and address
// until the cache shows it (a freshness.WriteTracker, docs/design.md#the-freshness-kit), and the
// addresses it bound per claim (bindMemory, claim_binding.go).
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
// from the cache. An entry the cache does not confirm within ownWriteTTL (the object went, or the
// cache is far behind) asks for one read from the apiserver and is dropped.

// ownWriteTTL bounds an entry's life: far longer than a cache lags behind its apiserver.
const ownWriteTTL = 10 * time.Minute

func claimWriteKey(namespace, name string) string { return "claim/" + namespace + "/" + name }
func addressWriteKey(name string) string          { return "address/" + name }

// ownWrites is the tracker of this controller's writes (own_writes.go).
func (r *ClaimReconciler) ownWrites() *freshness.WriteTracker[string] {
	r.memOnce.Do(r.initMemory)
	return r.writes
}

func (r *ClaimReconciler) initMemory() {
	r.writes = freshness.NewWriteTracker[string](ownWriteTTL)
	r.binds = newBindMemory()
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
	writes := r.ownWrites()
	ok := writes.Shows(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, now)
	for i := range cached {
		ok = writes.Shows(addressWriteKey(cached[i].Name), cached[i].ResourceVersion, now) && ok
	}
	return ok
}
