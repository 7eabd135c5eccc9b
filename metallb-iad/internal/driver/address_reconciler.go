package driver

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) setupAddresses(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-address").
		For(&ipamv1.IPAddress{}).
		// A Service concerns an address as its hold, as the Service it is attached to, or as a
		// Service that shows its IP (ingress, external IPs, pin).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(d.addressesOfService)).
		// A class's pool parameter, acceptance or deletion changes what its addresses need; its
		// other updates (such as a status patch that changes nothing relevant) do not.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(driverkit.AddressesOfClass(d.client)),
			builder.WithPredicates(classChanged(), ownClass())).
		// A pool created, deleted or changed in spec may make addresses Lost or servable again;
		// MetalLB's frequent status updates of the pool do not.
		Watches(&metallb.IPAddressPool{}, handler.EnqueueRequestsFromMapFunc(d.addressesOfPool),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A claim decides whether a Service showing the IP adopts it.
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var addrs ipamv1.IPAddressList
			if err := d.client.List(ctx, &addrs, client.MatchingFields{index.AddressByClaim: index.ClaimKey(o.GetNamespace(), o.GetName())},
				client.UnsafeDisableDeepCopy); err != nil {
				return nil
			}
			return driverkit.Requests(addrs.Items)
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool { return false }})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileAddress))
}

func (d *Driver) addressesOfPool(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != d.MetalLBNamespace {
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range d.classesNaming(ctx, o.GetName()) {
		reqs = append(reqs, driverkit.AddressesOfClass(d.client)(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: c.Name}})...)
	}
	return reqs
}

func (d *Driver) addressesOfService(ctx context.Context, o client.Object) []reconcile.Request {
	svc := o.(*corev1.Service)
	names := map[string]bool{}
	if a := svc.Labels[plan.LabelAddress]; a != "" && svc.Namespace == d.Namespace {
		names[a] = true
	}
	for _, ips := range [][]netip.Addr{plan.IngressIPs(svc), plan.ExternalIPs(svc), plan.PinIPs(svc)} {
		for _, ip := range ips {
			names[ipamv1.AddressName(ip)] = true
		}
	}
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}, client.UnsafeDisableDeepCopy); err == nil {
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

// reconcileAddress: snapshot → PlanAddress → writes.
func (d *Driver) reconcileAddress(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cached ipamv1.IPAddress
	if err := d.client.Get(ctx, req.NamespacedName, &cached); err != nil {
		if apierrors.IsNotFound(err) {
			d.announce.Forget(req.NamespacedName)
			d.memory.Forget(req.Name)
			return reconcile.Result{}, d.sweepHolds(ctx, req.Name)
		}
		return reconcile.Result{}, err
	}
	a, err := d.freshAddress(ctx, &cached)
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	v, err := d.addressSnapshot(ctx, a)
	if err != nil || v == nil {
		return reconcile.Result{}, err
	}
	p := plan.PlanAddress(*v)
	if doubtful(v, p) {
		// A new hold or a new Conflict rests on the cached Services, which may not show what
		// the Service reconciler just wrote (a pin, a released ingress): confirm uncached.
		if err := d.refreshServices(ctx, v); err != nil {
			return reconcile.Result{}, err
		}
		p = plan.PlanAddress(*v)
	}
	return reconcile.Result{RequeueAfter: p.Requeue}, d.applyAddressPlan(ctx, a, p)
}

// doubtful: the plan creates a hold, clears a stale ingress, or raises a Conflict (or names
// other wrongful Services).
func doubtful(v *plan.AddressView, p plan.AddressPlan) bool {
	if p.CreateHold != nil || len(p.ClearIngress) > 0 {
		return true
	}
	if p.Status == nil {
		return false
	}
	c := meta.FindStatusCondition(p.Status.Conditions, ipamv1.ConditionConflict)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	o := meta.FindStatusCondition(v.Addr.Status.Conditions, ipamv1.ConditionConflict)
	return o == nil || o.Status != metav1.ConditionTrue || o.Message != c.Message
}
