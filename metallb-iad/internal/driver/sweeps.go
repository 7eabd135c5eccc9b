package driver

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// sweepPeriodically, every SweepEvery, deletes the holds no address needs whose event was
// missed: it lists the holds by label in the driver's namespace (never every Service) and
// deletes those whose address is gone (confirmed uncached) or past its teardown.
func (d *Driver) sweepPeriodically(ctx context.Context) error {
	t := time.NewTicker(d.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := d.sweepOrphans(ctx); err != nil {
			log.FromContext(ctx).Error(err, "sweeping orphaned holds")
		}
		if err := d.sweepReleases(ctx); err != nil {
			log.FromContext(ctx).Error(err, "sweeping expired release Services")
		}
		if err := d.sweepPlaceholders(ctx); err != nil {
			log.FromContext(ctx).Error(err, "waking the claims of provisioning placeholders")
		}
	}
}

func (d *Driver) sweepOrphans(ctx context.Context) error {
	var holds corev1.ServiceList
	if err := d.client.List(ctx, &holds, client.InNamespace(d.Namespace), client.MatchingLabels{plan.LabelRole: plan.RoleHold}); err != nil {
		return err
	}
	byAddress := map[string][]*corev1.Service{}
	for _, s := range d.live(holds.Items) {
		byAddress[s.Labels[plan.LabelAddress]] = append(byAddress[s.Labels[plan.LabelAddress]], s)
	}
	for name, ss := range byAddress {
		var a ipamv1.IPAddress
		var err error
		if name != "" {
			err = d.client.Get(ctx, types.NamespacedName{Name: name}, &a)
		}
		if apierrors.IsNotFound(err) {
			// The cache may not show an address created a moment ago: ask the apiserver.
			err = d.reader.Get(ctx, types.NamespacedName{Name: name}, &a)
		}
		var addr *ipamv1.IPAddress
		switch {
		case name == "":
		case err == nil:
			addr = &a
		case !apierrors.IsNotFound(err):
			return err
		}
		if !plan.Orphaned(name, addr) {
			continue
		}
		for _, s := range ss {
			if err := d.deleteService(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// sweepPlaceholders brings the claim of every provisioning placeholder older than a sweep period
// back to the claim reconciler, which keeps, settles or retires it (PlanProvision): a placeholder
// left over when its claim was bound, deleted or re-resolved and that event was missed would
// otherwise keep an IP of the pool until the next event
// (docs/design.md#nothing-waits-on-an-event-alone).
func (d *Driver) sweepPlaceholders(ctx context.Context) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels{plan.LabelRole: plan.RoleProvisioning}); err != nil {
		return err
	}
	woken := map[string]bool{}
	for _, s := range d.live(list.Items) {
		key := s.Annotations[plan.AnnotationClaim]
		ns, name, ok := splitKey(key)
		if !ok || woken[key] || d.now().Sub(s.CreationTimestamp.Time) < d.SweepEvery {
			continue
		}
		woken[key] = true
		ev := ctrlevent.TypedGenericEvent[client.Object]{Object: &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
		select {
		case d.wakeClaims <- ev:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// sweepHolds deletes the holds of an address that no longer exists (its teardown never ran: a
// finalizer removed by hand, or a hold labelled for an address that was going). The cache may
// not show an address this driver just created, so its absence is confirmed uncached first.
func (d *Driver) sweepHolds(ctx context.Context, address string) error {
	holds, err := d.holdsOf(ctx, address)
	if err != nil || len(holds) == 0 {
		return err
	}
	var a ipamv1.IPAddress
	if err := d.reader.Get(ctx, types.NamespacedName{Name: address}, &a); err == nil {
		return nil // the cache is behind; the address's own pass follows
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	for _, s := range holds {
		if err := d.deleteService(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
