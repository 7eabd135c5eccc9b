package driver

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) setupServices(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-service").
		// The driver's own Services (placeholders, release Services) are never attached, pinned
		// or parked here: their events (four or five per reserved address) would each cost a
		// pass that plans nothing. The claim and address controllers watch them.
		For(&corev1.Service{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return !d.ownService(o)
		}))).
		// A claim that becomes Bound (or goes) changes what the Services linked to it get.
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return d.servicesLinkedTo(ctx, o.GetNamespace(), o.GetName())
		})).
		// An address released by another Service may let a waiting Service attach.
		// An address being torn down lets its attached Service go (the detach is the Service
		// reconciler's).
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			a := o.(*ipamv1.IPAddress)
			var reqs []reconcile.Request
			if ref := a.Spec.ClaimRef; ref != nil {
				reqs = d.servicesLinkedTo(ctx, ref.Namespace, ref.Name)
			}
			if at := a.Status.AttachedTo; at != nil {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: at.Namespace, Name: at.Name}})
			}
			// A Service that requests the IP without its claim is told (ReservedAddressRequested),
			// also when its request came before the address.
			var requesting corev1.ServiceList
			if err := d.client.List(ctx, &requesting, client.MatchingFields{indexRequestedIP: a.Spec.Address}, client.UnsafeDisableDeepCopy); err == nil {
				reqs = append(reqs, driverkit.Requests(requesting.Items)...)
			}
			return reqs
		})).
		// Whether a parked Service with no claim yet should stay parked depends on the classes
		// (parking.go): a class event looks at the parked Services again (few: a Service is
		// parked only until its claim's addresses are pinned).
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var svcs corev1.ServiceList
			if err := d.client.List(ctx, &svcs, client.MatchingFields{indexParked: "true"}, client.UnsafeDisableDeepCopy); err != nil {
				return nil
			}
			return driverkit.Requests(svcs.Items)
		})).
		// Whether MetalLB serves a Service the addresses of a pool depends on the pool's
		// spec.serviceAllocation (serves.go): a change of it looks again at the Services of the
		// pool's addresses; MetalLB's frequent status updates of the pool do not.
		Watches(&metallb.IPAddressPool{}, handler.EnqueueRequestsFromMapFunc(d.servicesOfPool),
			builder.WithPredicates(allocationChanged())).
		// And, for a pool that selects namespaces by label, on the labels of the Service's
		// namespace: a change of them looks again at the namespace's LoadBalancer Services.
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(d.servicesOfNamespace),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(ctrlevent.CreateEvent) bool { return false },
				DeleteFunc:  func(ctrlevent.DeleteEvent) bool { return false },
				GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
				UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
					return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
				},
			})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileService))
}

// allocationChanged passes a pool update that changes its spec.serviceAllocation. (Creation and
// deletion make the pool's addresses servable or Lost: the address reconciler's business.)
func allocationChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(ctrlevent.CreateEvent) bool { return false },
		DeleteFunc:  func(ctrlevent.DeleteEvent) bool { return false },
		GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
		UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*metallb.IPAddressPool)
			n, ok2 := e.ObjectNew.(*metallb.IPAddressPool)
			return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Spec.ServiceAllocation, n.Spec.ServiceAllocation)
		},
	}
}

// servicesOfPool returns requests for the Services attached to, or linked to the claims of, the
// addresses of the classes that name the pool.
func (d *Driver) servicesOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != d.MetalLBNamespace {
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range d.classesNaming(ctx, o.GetName()) {
		var addrs ipamv1.IPAddressList
		if err := d.client.List(ctx, &addrs, client.MatchingFields{index.AddressByClass: c.Name}, client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for _, a := range addrs.Items {
			if at := a.Status.AttachedTo; at != nil {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: at.Namespace, Name: at.Name}})
			}
			if ref := a.Spec.ClaimRef; ref != nil {
				reqs = append(reqs, d.servicesLinkedTo(ctx, ref.Namespace, ref.Name)...)
			}
		}
	}
	return reqs
}

// servicesOfNamespace returns requests for the tenant LoadBalancer Services of a namespace.
func (d *Driver) servicesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := d.client.List(ctx, &svcs, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer && !d.ownService(s) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return reqs
}

// ownService reports whether a Service is one the driver made for itself: a placeholder or a
// release Service in its namespace.
func (d *Driver) ownService(o client.Object) bool {
	return o.GetNamespace() == d.Namespace && o.GetLabels()[plan.LabelRole] != ""
}

// markOwn gives one of the driver's own Services the label that keeps it out of the core's cache.
// Every Service the driver creates has it; one made by a version before the label gets it with
// the next patch the driver makes to it anyway (a pin, a relabel, a nudge), never with a write of
// its own.
func markOwn(s *corev1.Service) {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[ipamv1.LabelDriverService] = plan.Provisioner
}

// servicesLinkedTo returns requests for the Services that link to a claim (through the index).
func (d *Driver) servicesLinkedTo(ctx context.Context, namespace, claim string) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := d.client.List(ctx, &svcs,
		client.MatchingFields{indexServiceLink: index.ClaimKey(namespace, claim)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return driverkit.Requests(svcs.Items)
}

// linkedClaim applies the link rule to a Service and returns the claim it links to, in any
// phase. why says what stands in the way when there is none ("" when the Service simply links
// to nothing).
func (d *Driver) linkedClaim(ctx context.Context, svc *corev1.Service) (*ipamv1.IPAddressClaim, string, error) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil || svc.Labels[plan.LabelRole] != "" {
		return nil, "", nil
	}
	name, auto := plan.LinkedClaim(svc)
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
	if claim.DeletionTimestamp != nil || (auto && !plan.AutoClaimOf(&claim, svc)) {
		return nil, "", nil
	}
	return &claim, "", nil
}

// reconcileService: snapshot → PlanAttach → writes.
func (d *Driver) reconcileService(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var svc corev1.Service
	if err := d.client.Get(ctx, req.NamespacedName, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			d.announce.Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	fresh, err := d.freshService(ctx, &svc)
	if apierrors.IsNotFound(err) {
		// Gone, or replaced under its name since the cache saw it: look again once the cache
		// shows what is there now (docs/design.md#nothing-waits-on-an-event-alone).
		d.written.Forget(serviceWrittenKey(string(svc.UID)))
		return reconcile.Result{RequeueAfter: time.Second}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	v, err := d.attachSnapshot(ctx, fresh)
	if err != nil {
		return reconcile.Result{}, err
	}
	p := plan.PlanAttach(v)
	return reconcile.Result{RequeueAfter: p.Requeue}, d.applyAttachPlan(ctx, fresh, p)
}

// freshService is the Service as this driver last wrote it when the cache still shows an older
// version (read uncached), else the cached one: a pass never decides from a copy its own pin,
// unpin or parking write has made stale (docs/design.md#a-view-that-includes-your-own-writes).
func (d *Driver) freshService(ctx context.Context, svc *corev1.Service) (*corev1.Service, error) {
	if d.written.Shows(serviceWrittenKey(string(svc.UID)), svc.ResourceVersion, d.now()) {
		return svc, nil
	}
	var f corev1.Service
	if err := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &f); err != nil {
		return nil, err
	}
	if f.UID != svc.UID {
		return nil, apierrors.NewNotFound(corev1.Resource("services"), svc.Name)
	}
	return &f, nil
}

// wroteService records a write of a Service (its new resourceVersion) until the cache shows it.
// Only the Service controller reads the record, and it never sees the driver's own Services:
// nothing is recorded for those.
func (d *Driver) wroteService(s *corev1.Service) {
	if d.ownService(s) {
		return
	}
	d.written.Wrote(serviceWrittenKey(string(s.UID)), s.ResourceVersion, d.now())
}

func (d *Driver) attachSnapshot(ctx context.Context, svc *corev1.Service) (plan.AttachView, error) {
	v := plan.AttachView{Svc: svc, Now: d.now(), Placeholder: d.ownService(svc)}
	if v.Placeholder {
		return v, nil
	}
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}); err != nil {
		return v, err
	}
	for i := range attached.Items {
		a, err := d.freshAddress(ctx, &attached.Items[i])
		if apierrors.IsNotFound(err) {
			continue // gone since the cache listed it: not attached here, and no reason to detach
		} else if err != nil {
			return v, err
		}
		if plan.AttachedTo(a.Status.AttachedTo, svc) {
			v.AttachedHere = append(v.AttachedHere, a)
		}
	}
	claim, why, err := d.linkedClaim(ctx, svc)
	if err != nil {
		return v, err
	}
	if v.Park, err = d.parkingWanted(ctx, svc, claim != nil); err != nil {
		return v, err
	}
	if claim == nil {
		v.Why = why
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			v.Reserved, err = d.reservedRequested(ctx, svc)
		}
		return v, err
	}
	v.Claim = claim
	// This driver's own recent writes the cache may not show yet.
	if pin, ok := d.expect.Pending(pinKey(string(svc.UID)), v.Now); ok {
		if svc.Annotations[plan.AnnotationPinned] == "true" && svc.Annotations[metallb.AnnotationLoadBalancerIPs] == pin {
			d.expect.Observed(pinKey(string(svc.UID)))
		} else {
			v.Pinned = pin
		}
	}
	v.Attached = map[string]bool{}
	v.Servable = map[string]bool{}
	v.Excluded = map[string]string{}
	v.Elsewhere = map[string]bool{}
	for _, ca := range claim.Status.Addresses {
		var cached ipamv1.IPAddress
		err := d.client.Get(ctx, types.NamespacedName{Name: ca.Name}, &cached)
		var a *ipamv1.IPAddress
		if err == nil {
			a, err = d.freshAddress(ctx, &cached)
		}
		if err != nil {
			if !apierrors.IsNotFound(err) {
				return v, err
			}
			v.Addrs = append(v.Addrs, nil)
			continue
		}
		v.Addrs = append(v.Addrs, a)
		if uid, ok := d.expect.Pending(attachKey(a.Name), v.Now); ok {
			if at := a.Status.AttachedTo; at != nil && string(at.UID) == uid {
				d.expect.Observed(attachKey(a.Name))
			} else {
				v.Attached[a.Name] = uid == string(svc.UID)
			}
		}
		var class ipamv1.IPAddressClass
		if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err == nil {
			v.Servable[a.Name] = class.Spec.Provisioner == plan.Provisioner
			if v.Servable[a.Name] {
				why, err := d.allocationVerdict(ctx, plan.ParseClassParams(&class).Pool, svc)
				if err != nil {
					return v, err
				}
				if why != "" {
					v.Excluded[a.Name] = why
				}
			}
		} else if !apierrors.IsNotFound(err) {
			return v, err
		}
		if at := a.Status.AttachedTo; at != nil && !(at.Namespace == svc.Namespace && at.Name == svc.Name) {
			var other corev1.Service
			err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &other)
			if err != nil && !apierrors.IsNotFound(err) {
				return v, err
			}
			v.Elsewhere[a.Name] = err == nil && (at.UID == "" || other.UID == at.UID)
		}
		holds, err := d.holdsOf(ctx, a.Name)
		if err != nil {
			return v, err
		}
		v.Holds = append(v.Holds, holds...)
	}
	return v, nil
}

// allocationVerdict says why the pool's spec.serviceAllocation does not admit the Service
// (AllocationExcludes), or "" when it does or the pool is missing (its addresses are Lost then,
// which the address reconciler reports). The namespaces come from the driver's cache of their
// metadata, read only for a pool that selects namespaces by label.
func (d *Driver) allocationVerdict(ctx context.Context, poolName string, svc *corev1.Service) (string, error) {
	if poolName == "" {
		return "", nil
	}
	var pool metallb.IPAddressPool
	if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: poolName}, &pool); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	alloc := pool.Spec.ServiceAllocation
	if alloc == nil {
		return "", nil
	}
	var namespaces []plan.NamespaceLabels
	if len(alloc.NamespaceSelectors) > 0 {
		list := namespaceMetadataList()
		if err := d.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return "", err
		}
		for _, ns := range list.Items {
			namespaces = append(namespaces, plan.NamespaceLabels{Name: ns.Name, Labels: ns.Labels})
		}
	}
	return plan.AllocationExcludes(&pool, namespaces, svc), nil
}

// namespaceMetadataList lists namespaces from the driver's cache of their metadata (the one the
// Service controller watches for label changes).
func namespaceMetadataList() *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return list
}

// reservedRequested are the addresses of this driver (cached) whose IP the Service requests by
// other means than a claim, that are not attached to it.
func (d *Driver) reservedRequested(ctx context.Context, svc *corev1.Service) ([]*ipamv1.IPAddress, error) {
	var out []*ipamv1.IPAddress
	for _, ip := range plan.RequestedIPs(svc) {
		var a ipamv1.IPAddress
		if err := d.client.Get(ctx, types.NamespacedName{Name: ipamv1.AddressName(ip)}, &a); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if a.Spec.Address != ip.String() || plan.AttachedTo(a.Status.AttachedTo, svc) {
			continue
		}
		var class ipamv1.IPAddressClass
		if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if class.Spec.Provisioner == plan.Provisioner {
			out = append(out, &a)
		}
	}
	return out, nil
}

// ParkingWanted reads the classes ParkingWanted needs, only when they can matter.
func (d *Driver) parkingWanted(ctx context.Context, svc *corev1.Service, linked bool) (bool, error) {
	if d.NoParking {
		return false, nil
	}
	if !plan.Parkable(svc) || linked || svc.Annotations[ipamv1.AnnotationServiceClaim] != "" {
		return plan.ParkingWanted(svc, linked, nil), nil
	}
	var classes ipamv1.IPAddressClassList
	if err := d.client.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	return plan.ParkingWanted(svc, linked, classes.Items), nil
}

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
	if slices.ContainsFunc(plan.IngressIPs(svc), func(ip netip.Addr) bool { return slices.Contains(released, ip) }) {
		// MetalLB writes this status too: clear it only as read (resourceVersion precondition);
		// on a conflict the pass runs again on a fresh view and clears only a released IP.
		status := client.MergeFromWithOptions(svc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		svc.Status.LoadBalancer.Ingress = nil
		if err := d.client.Status().Patch(ctx, svc, status); err != nil {
			return client.IgnoreNotFound(err)
		}
		d.wroteService(svc)
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
