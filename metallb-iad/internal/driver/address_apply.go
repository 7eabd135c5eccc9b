package driver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) applyAddressPlan(ctx context.Context, a *ipamv1.IPAddress, p plan.AddressPlan) error {
	orig := a.DeepCopy()
	if p.AddFinalizer {
		if _, err := driverkit.EnsureFinalizer(ctx, d.client, a, plan.Finalizer); err != nil {
			return err
		}
		d.wroteAddress(a)
		orig = a.DeepCopy()
	}
	for _, s := range p.DeleteHolds {
		if err := d.deleteService(ctx, s); err != nil {
			return err
		}
	}
	if p.RemoveFinalizer {
		if _, err := driverkit.RemoveFinalizer(ctx, d.client, a, plan.Finalizer); err != nil {
			return err
		}
		// A pass before the cache shows the removal (or the address gone) must not remove it
		// again: it reads the address uncached meanwhile.
		d.wroteAddress(a)
		d.announce.Forget(client.ObjectKeyFromObject(a))
		return nil
	}
	if err := d.applyRelease(ctx, a.Name, p.Release); err != nil {
		return err
	}
	if err := d.clearIngress(ctx, a, p); err != nil {
		return err
	}
	if p.CreateHold != nil {
		if made, err := d.createHold(ctx, a, p.CreateHold); err != nil || !made {
			return err
		}
	}
	if s := p.PinHold; s != nil {
		if err := d.pinHold(ctx, a, s); err != nil {
			return err
		}
	}
	if s := p.Nudge; s != nil {
		if err := d.nudgeService(ctx, s, ""); err != nil {
			return err
		}
	}
	if p.Status != nil {
		if written, err := d.writeAddressStatus(ctx, a, orig, *p.Status); err != nil || !written {
			return err
		}
	}
	if p.Unserved != nil {
		// After the status write: a report the write failed to record is planned again.
		d.memory.SetUnserved(a.Name, *p.Unserved)
	}
	d.unsay(p.Unsay)
	d.emit(ctx, p.Events)
	return nil
}

// clearIngress clears the load-balancer status of the plan's stale holders, and says so for each
// cleared.
func (d *Driver) clearIngress(ctx context.Context, a *ipamv1.IPAddress, p plan.AddressPlan) error {
	for _, c := range p.ClearIngress {
		// MetalLB writes this status too: clear it only as read (resourceVersion precondition).
		// A conflict or a Service gone means a newer view decides (the Service's event brings
		// this address back).
		s := c.Svc
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		s.Status.LoadBalancer.Ingress = nil
		if err := d.client.Status().Patch(ctx, s, patch); apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		d.wroteService(s)
		d.memory.NoteCleared(a.Name, s.UID, d.now())
		d.emit(ctx, []plan.Event{c.Said})
	}
	return nil
}

// createHold creates the address's hold; made is false when the name is taken by a Service that
// is not a hold (the rest of the pass waits for a later one).
func (d *Driver) createHold(ctx context.Context, a *ipamv1.IPAddress, hold *corev1.Service) (made bool, err error) {
	err = d.client.Create(ctx, hold)
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass the cache does not show yet; or a release Service under
		// the name (being deleted): never taken for the hold, which is made on a later pass.
		var s corev1.Service
		if gerr := d.reader.Get(ctx, client.ObjectKeyFromObject(hold), &s); gerr == nil && s.Labels[plan.LabelRole] != plan.RoleHold {
			return false, nil
		}
	} else if err != nil {
		return false, err
	}
	d.expect.Expect(holdKey(a.Name), hold.Name, d.now())
	return true, nil
}

// pinHold pins the hold to the address's IP, with the driver's sharing key.
func (d *Driver) pinHold(ctx context.Context, a *ipamv1.IPAddress, s *corev1.Service) error {
	patch := client.MergeFrom(s.DeepCopy())
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[metallb.AnnotationLoadBalancerIPs] = a.Spec.Address
	if key := plan.HoldKey(a); key != "" {
		s.Annotations[metallb.AnnotationAllowSharedIP] = key
	}
	markOwn(s)
	return client.IgnoreNotFound(d.client.Patch(ctx, s, patch))
}

// writeAddressStatus writes the driver's part of the address's status (orig: as read);
// written is false when the write failed in a way a later pass settles.
func (d *Driver) writeAddressStatus(ctx context.Context, a, orig *ipamv1.IPAddress, status ipamv1.IPAddressStatus) (written bool, err error) {
	// The driver alone writes AttachedTo and these conditions
	// (docs/design.md#who-writes-which-field), and its view of them is fresh (freshAddress): a
	// merge patch of the conditions needs no resourceVersion lock, so the core's phase writes
	// never make it fail. A patch that changes AttachedTo keeps the lock: the Service
	// reconciler writes it too (a re-created Service of the same name attaching while this pass
	// decided the old one was gone), and one of the two must see the other's write and decide
	// again.
	a.Status = status
	patch := client.MergeFrom(orig)
	if !equality.Semantic.DeepEqual(orig.Status.AttachedTo, a.Status.AttachedTo) {
		patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	}
	if err := d.client.Status().Patch(ctx, a, patch); err != nil {
		return false, client.IgnoreNotFound(err) // a conflict is retried with backoff, on a fresh read
	}
	d.wroteAddress(a)
	return true, nil
}
