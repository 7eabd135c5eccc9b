package driver

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) setupClasses(ctx context.Context, mgr ctrl.Manager) error {
	watchCIDRs, err := d.canWatchServiceCIDRs(ctx)
	if err != nil {
		return err
	}
	d.serviceCIDRs = watchCIDRs
	b := ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-class").
		For(&ipamv1.IPAddressClass{}).
		// A pool's arrival, departure or change of spec, and a rival class's arrival or
		// departure, re-check the classes naming that pool. MetalLB's writes of the pool's
		// status (with every assignment) change nothing a class pass reads.
		Watches(&metallb.IPAddressPool{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if o.GetNamespace() != d.MetalLBNamespace {
				return nil
			}
			return d.classesNaming(ctx, o.GetName())
		}), builder.WithPredicates(poolSpecChanged())).
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return d.classesNaming(ctx, plan.ParseClassParams(o.(*ipamv1.IPAddressClass)).Pool)
		})).
		// An address's creation or deletion changes its class's capacity: the class is looked at
		// once its next capacity write is due, so that a burst of addresses costs one pass.
		Watches(&ipamv1.IPAddress{}, handler.TypedFuncs[client.Object, reconcile.Request]{
			CreateFunc: func(_ context.Context, e ctrlevent.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				d.capacityChanged(e.Object, q)
			},
			DeleteFunc: func(_ context.Context, e ctrlevent.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				d.capacityChanged(e.Object, q)
			},
		}).
		WithOptions(d.controllerOptions())
	if watchCIDRs {
		// A change of the cluster's Service CIDRs changes the families every class serves.
		b = b.Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(d.ownClasses),
			builder.WithPredicates(serviceCIDRsChanged()))
	}
	return b.Complete(reconcile.Func(d.reconcileClass))
}

// ownClasses are all the classes of this driver, from the cache.
func (d *Driver) ownClasses(ctx context.Context, _ client.Object) []reconcile.Request {
	var classes ipamv1.IPAddressClassList
	if err := d.client.List(ctx, &classes); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range classes.Items {
		if c.Spec.Provisioner == plan.Provisioner {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
		}
	}
	return reqs
}

// poolSpecChanged passes a pool's update only when its spec or its deletion changed.
func poolSpecChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*metallb.IPAddressPool)
		n, ok2 := e.ObjectNew.(*metallb.IPAddressPool)
		if !ok1 || !ok2 {
			return true
		}
		return (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || !equality.Semantic.DeepEqual(o.Spec, n.Spec)
	}}
}

// serviceCIDRsChanged passes a ServiceCIDR's update only when its CIDRs changed.
func serviceCIDRsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*networkingv1.ServiceCIDR)
		n, ok2 := e.ObjectNew.(*networkingv1.ServiceCIDR)
		return !ok1 || !ok2 || !slices.Equal(o.Spec.CIDRs, n.Spec.CIDRs)
	}}
}

// canWatchServiceCIDRs asks the apiserver once, at start, whether the driver may list the
// cluster's ServiceCIDRs: a cache of a kind it may not list or watch would never sync and stop
// the driver from starting. Without the API (a cluster before ServiceCIDRs) or the permission,
// the classes take every family as served; a grant given later takes a restart of the driver.
func (d *Driver) canWatchServiceCIDRs(ctx context.Context) (bool, error) {
	var list networkingv1.ServiceCIDRList
	if err := d.reader.List(ctx, &list, client.Limit(1)); err != nil {
		if !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			return false, err
		}
		log.FromContext(ctx).Info("cannot list the cluster's Service CIDRs; every family is taken as served", "error", err.Error())
		return false, nil
	}
	return true, nil
}

func (d *Driver) classesNaming(ctx context.Context, pool string) []reconcile.Request {
	var classes ipamv1.IPAddressClassList
	if err := d.client.List(ctx, &classes, client.MatchingFields{indexClassPool: pool}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(classes.Items))
	for _, c := range classes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}})
	}
	return reqs
}

func (d *Driver) reconcileClass(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var reason, message string
	done, err := driverkit.JudgeClass(ctx, d.client, req.Name, plan.Provisioner, func(class *ipamv1.IPAddressClass) (driverkit.Verdict, error) {
		poolName := plan.ParseClassParams(class).Pool
		var pool *metallb.IPAddressPool
		var rivals ipamv1.IPAddressClassList
		if poolName != "" {
			pool = &metallb.IPAddressPool{}
			if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: poolName}, pool); err != nil {
				if !apierrors.IsNotFound(err) {
					return driverkit.Verdict{}, err
				}
				pool = nil
			}
			if err := d.client.List(ctx, &rivals, client.MatchingFields{indexClassPool: poolName}); err != nil {
				return driverkit.Verdict{}, err
			}
		}
		cluster, err := d.clusterFamilies(ctx)
		if err != nil {
			return driverkit.Verdict{}, err
		}
		reason, message = plan.ClassVerdict(class, pool, rivals.Items, d.MetalLBNamespace, cluster)
		status := metav1.ConditionTrue
		if reason != plan.ReasonAccepted {
			status = metav1.ConditionFalse
		}
		v := driverkit.Verdict{Condition: metav1.Condition{Status: status, Reason: reason, Message: message}}
		v.Families, v.ServedNamespaces = plan.ClassReport(pool, cluster)
		if pool != nil {
			reserved, err := d.reservedOf(ctx, class.Name)
			if err != nil {
				return driverkit.Verdict{}, err
			}
			v.Capacity = plan.PoolCapacity(pool, reserved)
		}
		v.DeferCapacity = d.capacity.wait(class.Name, d.CapacityEvery, d.now()) > 0
		return v, nil
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	if done.Class == nil {
		d.capacity.forget(req.Name)
	}
	if done.CapacityWritten {
		d.capacity.wrote(req.Name, d.now())
	}
	var res reconcile.Result
	if done.CapacityDeferred {
		res.RequeueAfter = max(d.capacity.wait(req.Name, d.CapacityEvery, d.now()), time.Second)
	}
	if !done.Wrote {
		return res, nil
	}
	prev := done.Before
	if reason != plan.ReasonAccepted && reason != plan.ReasonClassDeleting && (prev == nil || prev.Reason != reason) {
		d.announce.Recorder.Eventf(done.Class, nil, corev1.EventTypeWarning, "PoolRefused", "Accept", "%s", message)
	} else if reason == plan.ReasonAccepted && (prev == nil || prev.Status != metav1.ConditionTrue) {
		d.announce.Recorder.Eventf(done.Class, nil, corev1.EventTypeNormal, "Accepted", "Accept", "%s", message)
	}
	return res, nil
}

// DefaultCapacityEvery is how often, at most, a class's capacity alone is written.
const DefaultCapacityEvery = 30 * time.Second

// capacityClock remembers when each class's capacity was last written, so that counts that move
// with every address are written at most once per CapacityEvery; an entry goes with its class.
// Losing it in a restart costs at most one write per class sooner.
type capacityClock struct {
	mu      sync.Mutex
	written map[string]time.Time
}

// wait is how long the class's capacity may not be written yet (0: it may now).
func (c *capacityClock) wait(class string, every time.Duration, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.written[class]
	if !ok {
		return 0
	}
	return max(at.Add(every).Sub(now), 0)
}

func (c *capacityClock) wrote(class string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written[class] = now
}

func (c *capacityClock) forget(class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.written, class)
}

// capacityChanged queues the class of a created or deleted address for when its capacity may
// next be written.
func (d *Driver) capacityChanged(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	a, ok := o.(*ipamv1.IPAddress)
	if !ok || a.Spec.ClassName == "" {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: a.Spec.ClassName}}
	if after := d.capacity.wait(a.Spec.ClassName, d.CapacityEvery, d.now()); after > 0 {
		q.AddAfter(req, after)
		return
	}
	q.Add(req)
}

// reservedOf counts the class's addresses per family, from the cache.
func (d *Driver) reservedOf(ctx context.Context, class string) (map[ipamv1.IPFamily]int64, error) {
	var list ipamv1.IPAddressList
	if err := d.client.List(ctx, &list, client.MatchingFields{index.AddressByClass: class}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := map[ipamv1.IPFamily]int64{}
	for i := range list.Items {
		if ip, err := ipamv1.ParseCanonical(list.Items[i].Spec.Address); err == nil {
			out[ipamv1.FamilyOf(ip)]++
		}
	}
	return out, nil
}

// clusterFamilies are the families of the cluster's Service CIDRs (networking.k8s.io/v1
// ServiceCIDR, from the cache), which a placeholder's family must be among; nil when the driver
// does not watch them (no such API, or no permission to list them: canWatchServiceCIDRs) or
// there are none, which rules out no family.
func (d *Driver) clusterFamilies(ctx context.Context) ([]ipamv1.IPFamily, error) {
	if !d.serviceCIDRs {
		return nil, nil
	}
	var list networkingv1.ServiceCIDRList
	if err := d.client.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []ipamv1.IPFamily
	for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		for _, sc := range list.Items {
			if slices.ContainsFunc(sc.Spec.CIDRs, func(c string) bool {
				p, err := netip.ParsePrefix(c)
				return err == nil && ipamv1.FamilyOf(p.Addr()) == fam
			}) && !slices.Contains(out, fam) {
				out = append(out, fam)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// ownClass passes only events of this driver's classes.
func ownClass() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		c, ok := o.(*ipamv1.IPAddressClass)
		return ok && c.Spec.Provisioner == plan.Provisioner
	})
}

// classChanged passes an update of a class only when its spec (generation), its acceptance or its
// deletion changed.
func classChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
		o, n := e.ObjectOld.(*ipamv1.IPAddressClass), e.ObjectNew.(*ipamv1.IPAddressClass)
		if o.Generation != n.Generation || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
			return true
		}
		return meta.IsStatusConditionTrue(o.Status.Conditions, ipamv1.ConditionAccepted) !=
			meta.IsStatusConditionTrue(n.Status.Conditions, ipamv1.ConditionAccepted)
	}}
}
