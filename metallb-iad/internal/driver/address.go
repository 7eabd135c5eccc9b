package driver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

const indexIngressIP = "metallb-iad.ingressIP"

func (d *Driver) setupAddresses(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Service{}, indexIngressIP, func(o client.Object) []string {
		var out []string
		for _, ip := range IngressIPs(o.(*corev1.Service)) {
			out = append(out, ip.String())
		}
		return out
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-address").
		For(&ipamv1.IPAddress{}).
		// Any Service can affect an address: as its hold, as the Service it is attached to, or
		// as a Service that holds its IP (a conflict).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(d.addressesOfService)).
		// A class turning Accepted brings its addresses under the hold invariant.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if o.(*ipamv1.IPAddressClass).Spec.Provisioner != Provisioner {
				return nil
			}
			var addrs ipamv1.IPAddressList
			if err := d.client.List(ctx, &addrs, client.MatchingFields{index.AddressByClass: o.GetName()}); err != nil {
				return nil
			}
			return addressRequests(addrs.Items)
		})).
		// A claim that goes away, or stops being Bound, ends the attachment of its addresses.
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var addrs ipamv1.IPAddressList
			if err := d.client.List(ctx, &addrs, client.MatchingFields{index.AddressByClaim: index.ClaimKey(o.GetNamespace(), o.GetName())}); err != nil {
				return nil
			}
			return addressRequests(addrs.Items)
		})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileAddress))
}

func addressRequests(addrs []ipamv1.IPAddress) []reconcile.Request {
	reqs := make([]reconcile.Request, 0, len(addrs))
	for _, a := range addrs {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: a.Name}})
	}
	return reqs
}

func (d *Driver) addressesOfService(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.(*corev1.Service)
	names := map[string]bool{}
	if a := svc.Labels[LabelAddress]; a != "" && svc.Namespace == d.Namespace {
		names[a] = true
	}
	for _, ip := range IngressIPs(svc) {
		names[ipamv1.AddressName(ip)] = true
	}
	for _, ip := range strings.Split(svc.Annotations[metallb.AnnotationLoadBalancerIPs], ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(ip)); err == nil {
			names[ipamv1.AddressName(a)] = true
		}
	}
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}); err == nil {
		for _, a := range attached.Items {
			names[a.Name] = true
		}
	}
	reqs := make([]reconcile.Request, 0, len(names))
	for n := range names {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	return reqs
}

// reconcileAddress keeps the hold invariant (an address not attached to a live Service has
// exactly one placeholder pinned to it), ends attachments that no longer hold, reports
// conflicts, and tears down on deletion.
func (d *Driver) reconcileAddress(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var a ipamv1.IPAddress
	if err := d.client.Get(ctx, req.NamespacedName, &a); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ip, err := ipamv1.ParseCanonical(a.Spec.Address)
	if err != nil {
		return reconcile.Result{}, nil // the CRD rejects these; nothing to hold
	}
	if a.DeletionTimestamp != nil {
		return reconcile.Result{}, d.teardown(ctx, &a)
	}
	var class ipamv1.IPAddressClass
	if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if class.Spec.Provisioner != Provisioner || !meta.IsStatusConditionTrue(class.Status.Conditions, ipamv1.ConditionAccepted) {
		return reconcile.Result{}, nil
	}
	pool := class.Spec.Parameters[ClassParameterPool]
	// Addresses an admin created by hand are torn down the same way.
	if !controllerutil.ContainsFinalizer(&a, Finalizer) {
		patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&a, Finalizer)
		if err := d.client.Patch(ctx, &a, patch); err != nil {
			return reconcile.Result{}, err
		}
	}

	orig := a.DeepCopy()
	attached, err := d.checkAttachment(ctx, &a)
	if err != nil {
		return reconcile.Result{}, err
	}
	var requeue time.Duration
	holds, err := d.holdsOf(ctx, a.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if attached != nil {
		// Attached: the Service holds the address; a leftover hold (a crash mid-attach) goes.
		for i := range holds {
			if err := d.client.Delete(ctx, &holds[i]); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
		served := slices.Contains(IngressIPs(attached), ip)
		setCondition(&a, ipamv1.ConditionHeld, served, "Attached",
			fmt.Sprintf("attached to Service %s/%s", attached.Namespace, attached.Name))
	} else if adopter, err := d.adoptingService(ctx, &a, ip); err != nil {
		return reconcile.Result{}, err
	} else if adopter != nil {
		// A Service already serves the IP and links to the address's claim (an admin's pin
		// being adopted): it attaches next; holding the IP now would only fight it.
		attached = adopter
		setCondition(&a, ipamv1.ConditionHeld, true, "Adopting",
			fmt.Sprintf("served by Service %s/%s, which links to the claim", adopter.Namespace, adopter.Name))
	} else {
		hold, wait, err := d.ensureHold(ctx, &a, ip, pool, holds)
		if err != nil {
			return reconcile.Result{}, err
		}
		requeue = wait
		served := hold != nil && slices.Contains(IngressIPs(hold), ip)
		msg := "held by placeholder " + d.Namespace + "/" + HoldName(a.Name)
		reason := "Held"
		if hold != nil {
			msg = "held by placeholder " + d.Namespace + "/" + hold.Name
		}
		if !served {
			reason, msg = "WaitingForMetalLB", "waiting for MetalLB to assign "+ip.String()+" to the hold placeholder"
		}
		setCondition(&a, ipamv1.ConditionHeld, served, reason, msg)
	}
	if err := d.checkConflict(ctx, &a, ip, attached); err != nil {
		return reconcile.Result{}, err
	}
	if !equalDriverStatus(orig, &a) {
		if err := d.client.Status().Patch(ctx, &a, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// adoptingService returns a Service that holds the address's IP and links to its claim (in any
// phase: the claim may not be Bound yet while an admin adopts the address).
func (d *Driver) adoptingService(ctx context.Context, a *ipamv1.IPAddress, ip netip.Addr) (*corev1.Service, error) {
	ref := a.Spec.ClaimRef
	if ref == nil {
		return nil, nil
	}
	var holders corev1.ServiceList
	if err := d.client.List(ctx, &holders, client.InNamespace(ref.Namespace), client.MatchingFields{indexIngressIP: ip.String()}); err != nil {
		return nil, err
	}
	for i := range holders.Items {
		svc := &holders.Items[i]
		claim, _, err := d.linkedClaim(ctx, svc)
		if err != nil {
			return nil, err
		}
		if claim != nil && claim.Name == ref.Name && (ref.UID == "" || claim.UID == ref.UID) {
			return svc, nil
		}
	}
	return nil, nil
}

func (d *Driver) holdsOf(ctx context.Context, address string) ([]corev1.Service, error) {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingFields{indexHoldOf: address}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ensureHold makes sure exactly one placeholder holds the address, pinned to its IP.
func (d *Driver) ensureHold(ctx context.Context, a *ipamv1.IPAddress, ip netip.Addr, pool string, holds []corev1.Service) (*corev1.Service, time.Duration, error) {
	if len(holds) == 0 {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name:      HoldName(a.Name),
				Namespace: d.Namespace,
				Labels:    map[string]string{LabelRole: RoleHold, LabelAddress: a.Name},
				Annotations: map[string]string{
					metallb.AnnotationAddressPool:     pool,
					metallb.AnnotationLoadBalancerIPs: ip.String(),
				},
			},
			Spec: PlaceholderSpec(ipamv1.FamilyOf(ip)),
		}
		if err := d.client.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, 0, err
		}
		return nil, d.NudgeAfter, nil
	}
	// Keep the one MetalLB serves (else the oldest); a second holder is a leftover.
	slices.SortFunc(holds, func(x, y corev1.Service) int {
		xs, ys := slices.Contains(IngressIPs(&x), ip), slices.Contains(IngressIPs(&y), ip)
		if xs != ys {
			if xs {
				return -1
			}
			return 1
		}
		return x.CreationTimestamp.Compare(y.CreationTimestamp.Time)
	})
	for i := range holds[1:] {
		if err := d.client.Delete(ctx, &holds[1+i]); client.IgnoreNotFound(err) != nil {
			return nil, 0, err
		}
	}
	hold := &holds[0]
	if hold.Annotations[metallb.AnnotationLoadBalancerIPs] != ip.String() {
		patch := client.MergeFrom(hold.DeepCopy())
		hold.Annotations[metallb.AnnotationLoadBalancerIPs] = ip.String()
		if err := d.client.Patch(ctx, hold, patch); err != nil {
			return nil, 0, err
		}
	}
	if slices.Contains(IngressIPs(hold), ip) {
		return hold, 0, nil
	}
	wait, err := d.nudgeIfStuck(ctx, hold)
	return hold, wait, err
}

// checkAttachment returns the Service the address is attached to, or clears an attachment that
// no longer holds (the Service is gone, replaced, no longer a LoadBalancer, or no longer linked
// to the address's Bound claim), unpinning the Service when it still exists.
func (d *Driver) checkAttachment(ctx context.Context, a *ipamv1.IPAddress) (*corev1.Service, error) {
	at := a.Status.AttachedTo
	if at == nil {
		return nil, nil
	}
	var svc corev1.Service
	err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &svc)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	exists := err == nil && (at.UID == "" || svc.UID == at.UID)
	if exists {
		// The attachment holds while the Service links to the address's claim (in any phase: a
		// Lost claim keeps its Service; an empty uid is one the core has yet to complete).
		claim, _, err := d.linkedClaim(ctx, &svc)
		if err != nil {
			return nil, err
		}
		if ref := a.Spec.ClaimRef; claim != nil && ref != nil && ref.Namespace == claim.Namespace &&
			ref.Name == claim.Name && (ref.UID == "" || ref.UID == claim.UID) {
			return &svc, nil
		}
		if err := d.unpin(ctx, &svc); err != nil {
			return nil, err
		}
	}
	a.Status.AttachedTo = nil
	d.recorder.Eventf(a, nil, corev1.EventTypeNormal, "Detached", "Detach",
		"no longer attached to Service %s/%s; held by a placeholder again", at.Namespace, at.Name)
	return nil, nil
}

// checkConflict sets Conflict when a Service other than the attached one and the hold
// placeholders holds the address's IP.
func (d *Driver) checkConflict(ctx context.Context, a *ipamv1.IPAddress, ip netip.Addr, attached *corev1.Service) error {
	var holders corev1.ServiceList
	if err := d.client.List(ctx, &holders, client.MatchingFields{indexIngressIP: ip.String()}); err != nil {
		return err
	}
	var wrongful []string
	for i := range holders.Items {
		s := &holders.Items[i]
		if attached != nil && s.UID == attached.UID {
			continue
		}
		if s.Namespace == d.Namespace && s.Labels[LabelAddress] == a.Name {
			continue
		}
		wrongful = append(wrongful, s.Namespace+"/"+s.Name)
		d.warnOnce(s, "ReservedAddressConflict",
			"holds %s, which is reserved as IPAddress %s; remove the MetalLB annotation or spec.loadBalancerIP that requests it", ip, a.Name)
	}
	slices.Sort(wrongful)
	if len(wrongful) == 0 {
		if meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict) {
			d.recorder.Eventf(a, nil, corev1.EventTypeNormal, "ConflictResolved", "Conflict", "no other Service holds %s any more", ip)
		}
		d.forget(a, "Conflict")
		setCondition(a, ipamv1.ConditionConflict, false, "NoConflict", "no other Service holds the address")
		return nil
	}
	msg := fmt.Sprintf("Service %s holds %s outside the reservation", strings.Join(wrongful, ", "), ip)
	d.warnOnce(a, "Conflict", "%s", msg)
	setCondition(a, ipamv1.ConditionConflict, true, "HeldByOtherService", msg)
	return nil
}

// teardown releases a deleted address: its placeholders go, an attached Service is unpinned,
// and MetalLB returns the IP to the pool. Then the driver's finalizer goes.
func (d *Driver) teardown(ctx context.Context, a *ipamv1.IPAddress) error {
	if !controllerutil.ContainsFinalizer(a, Finalizer) {
		return nil
	}
	holds, err := d.holdsOf(ctx, a.Name)
	if err != nil {
		return err
	}
	for i := range holds {
		if err := d.client.Delete(ctx, &holds[i]); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	if at := a.Status.AttachedTo; at != nil {
		var svc corev1.Service
		err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &svc)
		if err == nil && (at.UID == "" || svc.UID == at.UID) {
			if err := d.unpin(ctx, &svc); err != nil {
				return err
			}
		} else if !apierrors.IsNotFound(err) && err != nil {
			return err
		}
	}
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(a, Finalizer)
	return client.IgnoreNotFound(d.client.Patch(ctx, a, patch))
}

func setCondition(a *ipamv1.IPAddress, typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: a.Generation})
}

func equalDriverStatus(a, b *ipamv1.IPAddress) bool {
	if (a.Status.AttachedTo == nil) != (b.Status.AttachedTo == nil) ||
		(a.Status.AttachedTo != nil && *a.Status.AttachedTo != *b.Status.AttachedTo) {
		return false
	}
	if len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for _, c := range b.Status.Conditions {
		o := meta.FindStatusCondition(a.Status.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message || o.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}

func countAddresses(ctx context.Context, r client.Reader) (attached, conflicts int, err error) {
	var addrs ipamv1.IPAddressList
	if err := r.List(ctx, &addrs); err != nil {
		return 0, 0, err
	}
	for _, a := range addrs.Items {
		if a.Status.AttachedTo != nil {
			attached++
		}
		if meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict) {
			conflicts++
		}
	}
	return attached, conflicts, nil
}
