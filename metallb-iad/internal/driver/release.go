package driver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// staleSnapshot completes an address view with what it knows of MetalLB's kept allocations:
// the candidate names (from MetalLB's AllocationFailed messages on the holds, by uid), the
// address's release Services, the memory of the wait and, when a round is due, which names
// are free (read uncached: a name that exists, a placeholder just created included, is never
// released).
func (d *Driver) staleSnapshot(ctx context.Context, v *plan.AddressView, messages map[string]string) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexReleaseOf: v.Addr.Name}); err != nil {
		return err
	}
	v.Stale.Releases = d.live(list.Items)
	w, deleted := d.memory.StaleOf(v.Addr.Name)
	v.Stale.Since, v.Stale.Last, v.Stale.Remembered = w.Since, w.Last, len(deleted) > 0
	v.Stale.Names, v.Stale.Known = plan.StaleCandidates(v, messages, deleted...)
	if len(v.Stale.Names) == 0 {
		return nil
	}
	if due, _ := plan.ReleaseDue(w.Since, w.Last, v.Now, v.NudgeAfter, v.ReleaseAfter, v.Stale.Known); !due {
		return nil
	}
	v.Stale.Free = map[string]bool{}
	for _, n := range v.Stale.Names {
		var s corev1.Service
		err := d.reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: n}, &s)
		switch {
		case apierrors.IsNotFound(err):
			v.Stale.Free[n] = true
		case err != nil:
			return err
		}
	}
	return nil
}

// applyRelease makes the release writes of an address plan: expired release Services (and one
// in the way of the hold's name) go first, then the new ones; then the memory of the wait.
func (d *Driver) applyRelease(ctx context.Context, address string, rp plan.ReleasePlan) error {
	for _, s := range rp.Remove {
		if err := d.deleteService(ctx, s); err != nil {
			return err
		}
	}
	for _, s := range rp.Create {
		// AlreadyExists: the name was taken since it was read (a placeholder, or a release of
		// an earlier pass): not released this round.
		if err := d.client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	switch {
	case rp.Forget:
		d.memory.EndStale(address)
	case rp.Wait != nil:
		d.memory.SetStale(address, *rp.Wait)
	}
	return nil
}

// sweepReleases deletes the release Services older than ReleaseFor: those of an address whose
// pass no longer looks at them (gone, or torn down) and those a restarted driver left.
func (d *Driver) sweepReleases(ctx context.Context) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels{plan.LabelRole: plan.RoleRelease}); err != nil {
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
