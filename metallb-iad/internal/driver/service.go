package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) setupServices(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-service").
		For(&corev1.Service{}).
		// A claim that becomes Bound (or goes) changes what the Services linked to it get.
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return d.servicesLinkedTo(ctx, o.GetNamespace(), o.GetName())
		})).
		// An address released by another Service may let a waiting Service attach.
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ref := o.(*ipamv1.IPAddress).Spec.ClaimRef
			if ref == nil {
				return nil
			}
			return d.servicesLinkedTo(ctx, ref.Namespace, ref.Name)
		})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileService))
}

// servicesLinkedTo returns requests for the Services that link to a claim (through the index).
func (d *Driver) servicesLinkedTo(ctx context.Context, namespace, claim string) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := d.client.List(ctx, &svcs, client.InNamespace(namespace),
		client.MatchingFields{indexServiceLink: namespace + "/" + claim}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(svcs.Items))
	for _, s := range svcs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}

// linkedClaim applies the link rule to a Service and returns the claim it links to, in any
// phase. why says what stands in the way when there is none ("" when the Service simply links
// to nothing).
func (d *Driver) linkedClaim(ctx context.Context, svc *corev1.Service) (*ipamv1.IPAddressClaim, string, error) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil || svc.Labels[LabelRole] != "" {
		return nil, "", nil
	}
	name, auto := LinkedClaim(svc)
	var claim ipamv1.IPAddressClaim
	if err := d.client.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: name}, &claim); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, "", err
		}
		if auto {
			return nil, "", nil
		}
		return nil, fmt.Sprintf("IPAddressClaim %s/%s does not exist", svc.Namespace, name), nil
	}
	if (auto && claim.Annotations[ipamv1.AnnotationAutoClaim] != "true") || claim.DeletionTimestamp != nil {
		return nil, "", nil
	}
	return &claim, "", nil
}

// linkedBoundClaim is linkedClaim, but only a Bound claim counts.
func (d *Driver) linkedBoundClaim(ctx context.Context, svc *corev1.Service) (*ipamv1.IPAddressClaim, string, error) {
	claim, why, err := d.linkedClaim(ctx, svc)
	if claim == nil || err != nil {
		return nil, why, err
	}
	if claim.Status.Phase != ipamv1.ClaimBound {
		return nil, fmt.Sprintf("IPAddressClaim %s/%s is %s, not Bound yet", svc.Namespace, claim.Name, orPending(claim.Status.Phase)), nil
	}
	return claim, "", nil
}

func orPending(p ipamv1.ClaimPhase) string {
	if p == "" {
		return string(ipamv1.ClaimPending)
	}
	return string(p)
}

// reconcileService attaches a Service to the addresses of the claim it links to, or detaches it.
// Attach order, safe at every crash point: record attachedTo on the addresses (whoever records
// first wins the 1:1 race), delete their hold placeholders, then pin the Service.
func (d *Driver) reconcileService(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var svc corev1.Service
	if err := d.client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if svc.Namespace == d.Namespace && svc.Labels[LabelRole] != "" {
		return reconcile.Result{}, nil // a placeholder
	}
	claim, why, err := d.linkedBoundClaim(ctx, &svc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if claim == nil {
		if why != "" {
			d.warnOnce(&svc, "ClaimNotReady", "%s; the Service gets its address once the claim is Bound", why)
		}
		return reconcile.Result{}, d.detach(ctx, &svc)
	}
	d.forget(&svc, "ClaimNotReady")
	if !FamiliesFit(&svc, claim.Spec.Family) {
		d.warnOnce(&svc, "FamilyMismatch", "the Service's IP families %v do not match claim %s (%s); set spec.ipFamilies and spec.ipFamilyPolicy to match",
			svc.Spec.IPFamilies, claim.Name, claim.Spec.Family)
		return reconcile.Result{}, d.detach(ctx, &svc)
	}
	d.forget(&svc, "FamilyMismatch")
	want := PinValue(claim.Status.Addresses)
	if foreign := ForeignPins(&svc); len(foreign) > 0 {
		// An admin pinned exactly the claim's addresses by hand: adopt the pin (the Service
		// keeps its address throughout). Anything else is not ours to overwrite.
		if !(len(foreign) == 1 && foreign[0] == metallb.AnnotationLoadBalancerIPs && svc.Annotations[metallb.AnnotationLoadBalancerIPs] == want) {
			d.warnOnce(&svc, "ForeignPin", "the Service already requests addresses through %s; remove it to use claim %s",
				strings.Join(foreign, ", "), claim.Name)
			return reconcile.Result{}, nil
		}
	}
	d.forget(&svc, "ForeignPin")

	addrs := make([]*ipamv1.IPAddress, 0, len(claim.Status.Addresses))
	for _, ca := range claim.Status.Addresses {
		var a ipamv1.IPAddress
		if err := d.client.Get(ctx, types.NamespacedName{Name: ca.Name}, &a); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if at := a.Status.AttachedTo; at != nil && !(at.Namespace == svc.Namespace && at.Name == svc.Name && at.UID == svc.UID) {
			d.warnOnce(&svc, "ClaimInUse", "claim %s is already used by Service %s/%s; a claim serves one Service",
				claim.Name, at.Namespace, at.Name)
			return reconcile.Result{}, d.detach(ctx, &svc)
		}
		addrs = append(addrs, &a)
	}
	d.forget(&svc, "ClaimInUse")

	// 1. Record the attachment; the optimistic lock lets exactly one Service win.
	for _, a := range addrs {
		if a.Status.AttachedTo != nil {
			continue
		}
		patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID}
		if err := d.client.Status().Patch(ctx, a, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	// 2. Release the holds.
	for _, a := range addrs {
		holds, err := d.holdsOf(ctx, a.Name)
		if err != nil {
			return reconcile.Result{}, err
		}
		for i := range holds {
			if err := d.client.Delete(ctx, &holds[i]); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
	}
	// 3. Pin the Service.
	if svc.Annotations[metallb.AnnotationLoadBalancerIPs] != want || svc.Annotations[AnnotationPinned] != "true" ||
		svc.Annotations[AnnotationReleasing] != "" {
		patch := client.MergeFrom(svc.DeepCopy())
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[metallb.AnnotationLoadBalancerIPs] = want
		svc.Annotations[AnnotationPinned] = "true"
		delete(svc.Annotations, AnnotationReleasing)
		if err := d.client.Patch(ctx, &svc, patch); err != nil {
			return reconcile.Result{}, err
		}
		d.recorder.Eventf(&svc, nil, corev1.EventTypeNormal, "Attached", "Attach", "pinned to %s from claim %s", want, claim.Name)
	}
	return reconcile.Result{}, nil
}

// detach ends a Service's attachment: its pin goes, MetalLB is made to let go of the address,
// and the addresses are held by placeholders again (by the address controller).
func (d *Driver) detach(ctx context.Context, svc *corev1.Service) error {
	if err := d.unpin(ctx, svc); err != nil {
		return err
	}
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}); err != nil {
		return err
	}
	for i := range attached.Items {
		a := &attached.Items[i]
		if a.Status.AttachedTo.UID != "" && a.Status.AttachedTo.UID != svc.UID {
			continue
		}
		patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		a.Status.AttachedTo = nil
		if err := d.client.Status().Patch(ctx, a, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
		d.recorder.Eventf(a, nil, corev1.EventTypeNormal, "Detached", "Detach",
			"no longer attached to Service %s/%s; held by a placeholder again", svc.Namespace, svc.Name)
	}
	return nil
}

// unpin removes the driver's pin (only a pin carrying its marker) and makes MetalLB let go of
// the address: MetalLB keeps a Service's current IP while it stays valid, and drops its state
// for a Service whose ingress is empty. The IPs being released are recorded on the Service in
// the same write that removes the pin, so a crash between the steps is finished on restart and
// never clears an address MetalLB assigned afterwards.
func (d *Driver) unpin(ctx context.Context, svc *corev1.Service) error {
	releasing := svc.Annotations[AnnotationReleasing]
	if svc.Annotations[AnnotationPinned] == "true" {
		releasing = svc.Annotations[metallb.AnnotationLoadBalancerIPs]
		patch := client.MergeFrom(svc.DeepCopy())
		delete(svc.Annotations, metallb.AnnotationLoadBalancerIPs)
		delete(svc.Annotations, AnnotationPinned)
		svc.Annotations[AnnotationReleasing] = releasing
		if err := d.client.Patch(ctx, svc, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if _, ok := svc.Annotations[AnnotationReleasing]; !ok {
		return nil
	}
	released := strings.Split(releasing, ",")
	if slices.ContainsFunc(ingressStrings(svc), func(ip string) bool { return slices.Contains(released, ip) }) {
		status := client.MergeFrom(svc.DeepCopy())
		svc.Status.LoadBalancer.Ingress = nil
		if err := d.client.Status().Patch(ctx, svc, status); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	patch := client.MergeFrom(svc.DeepCopy())
	delete(svc.Annotations, AnnotationReleasing)
	if err := d.client.Patch(ctx, svc, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.recorder.Eventf(svc, nil, corev1.EventTypeNormal, "Detached", "Detach", "unpinned %s; the claim keeps the address", releasing)
	return nil
}

func ingressStrings(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}
