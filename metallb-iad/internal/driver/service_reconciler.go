package driver

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
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
		}), builder.WithPredicates(driverkit.NotCapacityOnly())).
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

// servicesLinkedTo returns requests for the Services that link to a claim (through the index).
func (d *Driver) servicesLinkedTo(ctx context.Context, namespace, claim string) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := d.client.List(ctx, &svcs,
		client.MatchingFields{indexServiceLink: index.ClaimKey(namespace, claim)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return driverkit.Requests(svcs.Items)
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
