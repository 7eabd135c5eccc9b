package driver

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) applyAttachPlan(ctx context.Context, svc *corev1.Service, p plan.AttachPlan) error {
	for _, r := range p.Clear {
		d.announce.Clear(svc, r)
	}
	if p.Detach {
		wantParked := p.Parked != nil && *p.Parked
		if err := d.detach(ctx, svc, wantParked); err != nil {
			return err
		}
		// Parked or unparked here unless the unpin did it (or the admission policy, on the
		// unpin's write), compared with the Service as last written or read.
		if p.Parked != nil && *p.Parked != autoclaim.Parked(svc) {
			if err := d.setParked(ctx, svc, *p.Parked); err != nil {
				return err
			}
		}
	}
	// 1. Record the attachment; the optimistic lock lets exactly one Service win.
	for _, a := range p.Attach {
		orig := a.DeepCopy()
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}
		plan.SetCondition(a, &a.Status, ipamv1.ConditionHeld, true, plan.ReasonAttached, plan.AttachedMessage(svc))
		if err := d.client.Status().Patch(ctx, a, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		d.wroteAddress(a)
		d.expect.Expect(attachKey(a.Name), string(svc.UID), d.now())
	}
	// 2. Release the holds. (Their names are remembered: should MetalLB keep the IP under one of
	// them, plan_release.go releases it.)
	for _, s := range p.DeleteHolds {
		if err := d.deleteService(ctx, s); err != nil {
			return err
		}
		d.memory.HoldDeleted(s.Labels[plan.LabelAddress], s.Name)
	}
	// 3. Pin the Service.
	if p.Pin != "" {
		patch := client.MergeFrom(svc.DeepCopy())
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[metallb.AnnotationLoadBalancerIPs] = p.Pin
		svc.Annotations[plan.AnnotationPinned] = "true"
		if p.Key != "" {
			svc.Annotations[metallb.AnnotationAllowSharedIP] = p.Key
		} else if plan.DriverKey(svc) != "" {
			delete(svc.Annotations, metallb.AnnotationAllowSharedIP)
		}
		delete(svc.Annotations, plan.AnnotationReleasing)
		if autoclaim.Parked(svc) {
			delete(svc.Annotations, autoclaim.ParkingAnnotation)
		}
		if err := d.client.Patch(ctx, svc, patch); err != nil {
			return err
		}
		d.wroteService(svc)
		d.expect.Expect(pinKey(string(svc.UID)), p.Pin, d.now())
	}
	// 4. A re-link: the addresses of the claim the Service left are held again.
	for _, a := range p.Unattach {
		if err := d.clearAttachment(ctx, a); err != nil {
			return err
		}
	}
	d.emit(ctx, p.Events)
	return nil
}

// detach ends a Service's attachment: its pin goes, MetalLB is made to let go of the address,
// and the addresses are held by placeholders again (by the address reconciler).
func (d *Driver) detach(ctx context.Context, svc *corev1.Service, park bool) error {
	if err := d.unpin(ctx, svc, park); err != nil {
		return err
	}
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}); err != nil {
		return err
	}
	for i := range attached.Items {
		a, err := d.freshAddress(ctx, &attached.Items[i])
		if apierrors.IsNotFound(err) {
			continue // gone: the other addresses (a Dual claim's) still get cleared
		} else if err != nil {
			return err
		}
		if plan.AttachedTo(a.Status.AttachedTo, svc) {
			if err := d.clearAttachment(ctx, a); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Driver) clearAttachment(ctx context.Context, a *ipamv1.IPAddress) error {
	d.expect.Observed(attachKey(a.Name))
	at := a.Status.AttachedTo
	orig := a.DeepCopy()
	a.Status.AttachedTo = nil
	if err := d.client.Status().Patch(ctx, a, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.wroteAddress(a)
	d.announce.Recorder.Eventf(a, nil, corev1.EventTypeNormal, plan.ReasonDetached, "Detach",
		"no longer attached to Service %s/%s; held by a placeholder again", at.Namespace, at.Name)
	return nil
}

// unpin removes the driver's pin (only a pin carrying its marker) and makes MetalLB let go of
// the address: MetalLB keeps a Service's current IP while it stays valid, and drops its state
// for a Service whose ingress is empty. The IPs being released are recorded on the Service in
// the same write that removes the pin, so a crash between the steps is finished on restart and
// never clears an address MetalLB assigned afterwards; while recorded, the IPs are not a
// Conflict.
func (d *Driver) unpin(ctx context.Context, svc *corev1.Service, park bool) error {
	if _, ok := d.expect.Pending(pinKey(string(svc.UID)), d.now()); ok {
		// This driver pinned the Service a moment ago and the cache may not show it: decide
		// from the apiserver's Service, or the pin would stay.
		var fresh corev1.Service
		if err := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		*svc = fresh
	}
	d.expect.Observed(pinKey(string(svc.UID)))
	releasing := svc.Annotations[plan.AnnotationReleasing]
	_, resuming := svc.Annotations[plan.AnnotationReleasing]
	if park && !autoclaim.Parked(svc) && svc.Annotations[plan.AnnotationPinned] != "true" && resuming {
		// An unpin resumed from its releasing record: parked before the status is cleared, so
		// that MetalLB never serves the Service from an auto-assigning pool meanwhile.
		if err := d.setParked(ctx, svc, true); err != nil {
			return err
		}
	}
	if svc.Annotations[plan.AnnotationPinned] == "true" {
		releasing = svc.Annotations[metallb.AnnotationLoadBalancerIPs]
		patch := client.MergeFrom(svc.DeepCopy())
		delete(svc.Annotations, metallb.AnnotationLoadBalancerIPs)
		delete(svc.Annotations, plan.AnnotationPinned)
		if plan.DriverKey(svc) != "" {
			delete(svc.Annotations, metallb.AnnotationAllowSharedIP) // the driver's key goes with its pin
		}
		svc.Annotations[plan.AnnotationReleasing] = releasing
		if park && !autoclaim.Parked(svc) {
			// Parked in the same write: never served from an auto-assigning pool meanwhile.
			svc.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
		}
		if err := d.client.Patch(ctx, svc, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
		d.wroteService(svc)
	}
	if _, ok := svc.Annotations[plan.AnnotationReleasing]; !ok {
		return nil
	}
	released := plan.ParseIPList(releasing)
	shows := func(s *corev1.Service) bool {
		return slices.ContainsFunc(plan.IngressIPs(s), func(ip netip.Addr) bool { return slices.Contains(released, ip) })
	}
	if shows(svc) {
		// MetalLB writes this status too: clear it only as read (resourceVersion precondition).
		// A Service that shared its IP with the hold is usually cleared by MetalLB itself as soon
		// as its key is gone (the hold keeps the IP under the key): on a conflict, the Service
		// as it is now decides; one that still shows a released IP is cleared by the next pass.
		status := client.MergeFromWithOptions(svc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		svc.Status.LoadBalancer.Ingress = nil
		if err := d.client.Status().Patch(ctx, svc, status); apierrors.IsConflict(err) {
			var fresh corev1.Service
			if gerr := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &fresh); gerr != nil {
				return client.IgnoreNotFound(gerr)
			}
			if shows(&fresh) {
				return err
			}
			*svc = fresh
		} else if err != nil {
			return client.IgnoreNotFound(err)
		} else {
			d.wroteService(svc)
		}
	}
	patch := client.MergeFrom(svc.DeepCopy())
	delete(svc.Annotations, plan.AnnotationReleasing)
	if err := d.client.Patch(ctx, svc, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.wroteService(svc)
	d.announce.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, plan.ReasonDetached, "Detach",
		"unpinned %s; the claim keeps the address", strings.ReplaceAll(releasing, ",", ", "))
	return nil
}

// setParked adds or removes the parking annotation (parking.go).
func (d *Driver) setParked(ctx context.Context, svc *corev1.Service, park bool) error {
	patch := client.MergeFrom(svc.DeepCopy())
	if park {
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
	} else {
		delete(svc.Annotations, autoclaim.ParkingAnnotation)
	}
	if err := d.client.Patch(ctx, svc, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.wroteService(svc)
	return nil
}
