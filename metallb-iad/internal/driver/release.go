package driver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
	w, deleted := d.memory.staleOf(v.addr.Name)
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
		d.memory.endStale(address)
	case rp.wait != nil:
		d.memory.setStale(address, *rp.wait)
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
