package driver

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

func (d *Driver) addressSnapshot(ctx context.Context, a *ipamv1.IPAddress) (*plan.AddressView, error) {
	ip, err := ipamv1.ParseCanonical(a.Spec.Address)
	if err != nil {
		return nil, nil // the CRD rejects these; nothing to hold
	}
	v := &plan.AddressView{Addr: a, IP: ip, Namespace: d.Namespace, Now: d.now(), NudgeAfter: d.NudgeAfter, MetallbPassed: d.progress.passed(),
		ReleaseFor: d.ReleaseFor, ReleaseAfter: d.ReleaseAfter, NotServedAfter: d.NotServedAfter}
	var class ipamv1.IPAddressClass
	if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err == nil {
		v.Class = &class
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if v.Class != nil && v.Class.Spec.Provisioner == plan.Provisioner {
		if name := plan.ParseClassParams(v.Class).Pool; name != "" {
			var pool metallb.IPAddressPool
			if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: name}, &pool); err == nil {
				v.Pool = &pool
			} else if !apierrors.IsNotFound(err) {
				return nil, err
			}
		}
	}
	if v.Holds, err = d.holdsOf(ctx, a.Name); err != nil {
		return nil, err
	}
	var failures map[string]string
	if v.FailedAt, failures, err = d.allocationFailures(ctx, v.Holds, v.Now); err != nil {
		return nil, err
	}
	if len(v.Holds) > 0 {
		d.expect.Observed(holdKey(a.Name))
		for _, h := range v.Holds {
			d.written.Forget(relabelledKey(string(h.UID)))
		}
	} else {
		_, v.HoldExpected = d.expect.Pending(holdKey(a.Name), v.Now)
	}
	if at := a.Status.AttachedTo; at != nil {
		var svc corev1.Service
		err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &svc)
		switch {
		case apierrors.IsNotFound(err):
			v.AttachedGone = true
		case err != nil:
			return nil, err
		case at.UID != "" && svc.UID != at.UID:
			v.AttachedGone = true
		default:
			v.Attached = &svc
		}
	}
	v.Unserved = d.memory.UnservedOf(a.Name)
	if v.Holders, err = d.holdersOf(ctx, a, ip); err != nil {
		return nil, err
	}
	for _, h := range v.Holders {
		if c := d.memory.ClearedOf(a.Name, h.Svc.UID, v.Now); len(c) > 0 {
			if v.Cleared == nil {
				v.Cleared = map[types.UID][]time.Time{}
			}
			v.Cleared[h.Svc.UID] = c
		}
	}
	if err := d.keptBy(ctx, v); err != nil {
		return nil, err
	}
	if err := d.staleSnapshot(ctx, v, failures); err != nil {
		return nil, err
	}
	return v, nil
}

// freshAddress returns the address as fresh as this driver's own last write of it: the cached one
// once the cache shows that write, else the apiserver's
// (docs/design.md#a-view-that-includes-your-own-writes: no decision on a cached object this driver
// has just written, and no write refused for a stale resourceVersion).
func (d *Driver) freshAddress(ctx context.Context, a *ipamv1.IPAddress) (*ipamv1.IPAddress, error) {
	if d.written.Shows(writtenKey(a.Name), a.ResourceVersion, d.now()) {
		return a, nil
	}
	var f ipamv1.IPAddress
	if err := d.reader.Get(ctx, client.ObjectKeyFromObject(a), &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// wroteAddress records a write of the address (its new resourceVersion) until the cache shows it.
func (d *Driver) wroteAddress(a *ipamv1.IPAddress) {
	d.written.Wrote(writtenKey(a.Name), a.ResourceVersion, d.now())
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

// refreshServices re-reads uncached the Services the address's view rests on: the attached
// one and those that show the IP.
func (d *Driver) refreshServices(ctx context.Context, v *plan.AddressView) error {
	if v.Attached != nil {
		var s corev1.Service
		err := d.reader.Get(ctx, client.ObjectKeyFromObject(v.Attached), &s)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && s.UID != v.Attached.UID):
			v.Attached, v.AttachedGone = nil, true
		case err != nil:
			return err
		default:
			v.Attached = &s
		}
	}
	holders := v.Holders[:0]
	for _, h := range v.Holders {
		var s corev1.Service
		if err := d.reader.Get(ctx, client.ObjectKeyFromObject(h.Svc), &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		h.Svc = &s
		h.InIngress = slices.Contains(plan.IngressIPs(&s), v.IP)
		h.InExternalIPs = slices.Contains(plan.ExternalIPs(&s), v.IP)
		if h.InIngress || h.InExternalIPs {
			holders = append(holders, h)
		}
	}
	v.Holders = holders
	return nil
}

// allocationFailures looks up, in the cache, MetalLB's latest AllocationFailed report on each
// placeholder that may be nudged (MayNudge): the Events MetalLB's controller records on it;
// when, and what it said (by uid).
func (d *Driver) allocationFailures(ctx context.Context, placeholders []*corev1.Service, now time.Time) (map[types.UID]time.Time, map[string]string, error) {
	out, said := map[types.UID]time.Time{}, map[string]string{}
	for _, s := range placeholders {
		if !plan.MayNudge(s, now, d.NudgeAfter) {
			continue
		}
		t, msg, err := d.lastAllocationFailed(ctx, s)
		if err != nil {
			// Not knowing MetalLB's last report must not stop the rest of the pass (teardown,
			// Lost, Conflict, the hold): without one, the nudge waits for the silence.
			log.FromContext(ctx).Info("cannot read MetalLB's AllocationFailed events; nudging after the silence instead",
				"service", s.Namespace+"/"+s.Name, "error", err.Error())
			continue
		}
		out[s.UID] = t
		if msg != "" {
			said[string(s.UID)] = msg
		}
	}
	return out, said, nil
}

// keptBy reads what plan_kept.go decides from: MetalLB's latest report on each of the address's
// unserved holds (whether or not a nudge is due: the answer must not change with the nudge's
// timing), and on the attached Service once it has waited unserved for keptCheckAfter or the
// address says KeptByMetalLB already (an ordinary attach, which MetalLB serves within seconds,
// asks nothing); both from the cache (CacheByObject); which of the Services they name exist, read
// uncached (a Service the cache does not show yet is not called gone), and only for a name
// MetalLB gave; and since when the driver has seen them gone.
func (d *Driver) keptBy(ctx context.Context, v *plan.AddressView) error {
	var messages []string
	served := false
	for _, h := range v.Holds {
		if slices.Contains(plan.IngressIPs(h), v.IP) {
			served = true // whatever MetalLB said before is over
			break
		}
		_, msg, err := d.lastAllocationFailed(ctx, h)
		if err != nil {
			return err
		}
		messages = append(messages, msg)
	}
	if s := v.Attached; !served && s != nil && plan.AttachedUnserved(v) && (plan.KeptSaid(v.Addr) ||
		(v.Unserved.UID == s.UID && !v.Unserved.Since.IsZero() && v.Now.Sub(v.Unserved.Since) >= keptCheckAfter)) {
		_, msg, err := d.lastAllocationFailed(ctx, s)
		if err != nil {
			return err
		}
		messages = append(messages, msg)
	}
	if served {
		messages = nil
	}
	var missing []string
	for _, k := range plan.KeptCandidates(messages, d.Namespace, v.Attached) {
		var s corev1.Service
		err := d.reader.Get(ctx, k, &s)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, k.String())
		case err != nil:
			return err
		}
	}
	v.KeptBy, v.KeptRecheck = plan.KeptVerdict(d.memory.GoneSince(v.Addr.Name, missing, v.Now), v.Now, plan.KeptSaid(v.Addr))
	v.Reported = slices.ContainsFunc(messages, func(m string) bool { return m != "" })
	return nil
}

// lastAllocationFailed is when MetalLB last reported AllocationFailed on the Service, one of the
// driver's own (zero when never), and what it said: the Events on it of that reason, from the
// cache (CacheByObject). A report the cache does not show yet only delays a nudge to the next
// re-check.
func (d *Driver) lastAllocationFailed(ctx context.Context, s *corev1.Service) (time.Time, string, error) {
	var evs corev1.EventList
	if err := d.client.List(ctx, &evs, client.InNamespace(s.Namespace), client.MatchingFields{indexEventAbout: string(s.UID)},
		client.UnsafeDisableDeepCopy); err != nil {
		return time.Time{}, "", err
	}
	last, msg := latestAllocationFailed(evs.Items)
	return last, msg, nil
}

// latestAllocationFailed is the latest of MetalLB's AllocationFailed reports among evs: when, and
// what it said (zero and "" when none).
func latestAllocationFailed(evs []corev1.Event) (time.Time, string) {
	var last time.Time
	var msg string
	found := false
	for i := range evs {
		e := &evs[i]
		if e.Reason != ReasonAllocationFailed {
			continue
		}
		if t := eventTime(e); t.After(last) || !found {
			last, msg, found = t, e.Message, true
		}
	}
	return last, msg
}

// keptCheckAfter is how long an attached Service waits unserved before the driver reads MetalLB's
// reports on it, looking for an IP kept for a deleted Service.
const keptCheckAfter = 30 * time.Second

// eventTime is when an event was last seen.
func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	for _, u := range []time.Time{e.FirstTimestamp.Time, e.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// holdsOf lists the hold placeholders of an address, without those being deleted.
func (d *Driver) holdsOf(ctx context.Context, address string) ([]*corev1.Service, error) {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexHoldOf: address}); err != nil {
		return nil, err
	}
	return d.live(list.Items), nil
}

// live drops Services being deleted, or deleted by this driver while the cache still shows them.
func (d *Driver) live(items []corev1.Service) []*corev1.Service {
	out := make([]*corev1.Service, 0, len(items))
	now := d.now()
	for i := range items {
		s := &items[i]
		if s.DeletionTimestamp != nil {
			continue
		}
		if _, gone := d.expect.Pending(deletedKey(string(s.UID)), now); gone {
			continue
		}
		out = append(out, s)
	}
	return out
}

// holdersOf lists the Services that show ip in their ingress or external IPs, and whether each
// links to the address's claim.
func (d *Driver) holdersOf(ctx context.Context, a *ipamv1.IPAddress, ip netip.Addr) ([]plan.Holder, error) {
	byUID := map[types.UID]*plan.Holder{}
	var order []types.UID
	for _, field := range []string{indexIngressIP, indexExternalIP} {
		var list corev1.ServiceList
		if err := d.client.List(ctx, &list, client.MatchingFields{field: ip.String()}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			s := &list.Items[i]
			h := byUID[s.UID]
			if h == nil {
				h = &plan.Holder{Svc: s}
				byUID[s.UID] = h
				order = append(order, s.UID)
			}
			if field == indexIngressIP {
				h.InIngress = true
			} else {
				h.InExternalIPs = true
			}
		}
	}
	out := make([]plan.Holder, 0, len(order))
	for _, uid := range order {
		h := byUID[uid]
		if ref := a.Spec.ClaimRef; ref != nil && h.Svc.Namespace == ref.Namespace {
			claim, _, err := d.linkedClaim(ctx, h.Svc)
			if err != nil {
				return nil, err
			}
			h.LinksToClaim = claim != nil && claim.Name == ref.Name && (ref.UID == "" || claim.UID == ref.UID)
		}
		out = append(out, *h)
	}
	return out, nil
}

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
	if p.CreateHold != nil {
		err := d.client.Create(ctx, p.CreateHold)
		if apierrors.IsAlreadyExists(err) {
			// Made by an earlier pass the cache does not show yet; or a release Service under
			// the name (being deleted): never taken for the hold, which is made on a later pass.
			var s corev1.Service
			if gerr := d.reader.Get(ctx, client.ObjectKeyFromObject(p.CreateHold), &s); gerr == nil && s.Labels[plan.LabelRole] != plan.RoleHold {
				return nil
			}
		} else if err != nil {
			return err
		}
		d.expect.Expect(holdKey(a.Name), p.CreateHold.Name, d.now())
	}
	if s := p.PinHold; s != nil {
		patch := client.MergeFrom(s.DeepCopy())
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[metallb.AnnotationLoadBalancerIPs] = a.Spec.Address
		markOwn(s)
		if err := d.client.Patch(ctx, s, patch); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	if s := p.Nudge; s != nil {
		if err := d.nudgeService(ctx, s); err != nil {
			return err
		}
	}
	if p.Status != nil {
		// The driver alone writes AttachedTo and these conditions
		// (docs/design.md#who-writes-which-field), and its view of them is fresh (freshAddress): a
		// merge patch of the conditions needs no resourceVersion lock, so the core's phase writes
		// never make it fail. A patch that changes AttachedTo keeps the lock: the Service
		// reconciler writes it too (a re-created Service of the same name attaching while this pass
		// decided the old one was gone), and one of the two must see the other's write and decide
		// again.
		a.Status = *p.Status
		patch := client.MergeFrom(orig)
		if !equality.Semantic.DeepEqual(orig.Status.AttachedTo, a.Status.AttachedTo) {
			patch = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
		}
		if err := d.client.Status().Patch(ctx, a, patch); err != nil {
			return client.IgnoreNotFound(err) // a conflict is retried with backoff, on a fresh read
		}
		d.wroteAddress(a)
	}
	if p.Unserved != nil {
		// After the status write: a report the write failed to record is planned again.
		d.memory.SetUnserved(a.Name, *p.Unserved)
	}
	d.unsay(p.Unsay)
	d.emit(ctx, p.Events)
	return nil
}

func (d *Driver) unsay(us []plan.Unsay) {
	for _, u := range us {
		if u.Obj != nil {
			d.announce.Clear(u.Obj, u.Topic)
		} else {
			d.announce.ClearTopic(u.Topic, u.Keep...)
		}
	}
}

// deleteService deletes a placeholder (precondition: its uid) and remembers it until the cache
// drops it, so no later pass deletes it again.
func (d *Driver) deleteService(ctx context.Context, s *corev1.Service) error {
	uid := s.UID
	err := d.client.Delete(ctx, s, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	d.deleted(s)
	return nil
}

// deleted remembers a placeholder this driver deleted until the cache drops it, so no later pass
// deletes it again; and should MetalLB keep the IPs it served it (a delete it never handled),
// the address waiting for them knows under which name (plan_release.go).
func (d *Driver) deleted(s *corev1.Service) {
	d.expect.Expect(deletedKey(string(s.UID)), s.Name, d.now())
	for _, ip := range plan.IngressIPs(s) {
		d.memory.HoldDeleted(ipamv1.AddressName(ip), s.Name)
	}
}

// errChangedSince: a Service changed after the copy a delete was decided from.
var errChangedSince = errors.New("the Service changed since it was read; looking again")

// deleteServiceAsSeen deletes a placeholder only in the version it was seen in (precondition:
// uid and resourceVersion). A 409 means it changed since (this driver made it a hold, MetalLB
// served it): nothing is recorded, and errChangedSince asks for a fresh look.
func (d *Driver) deleteServiceAsSeen(ctx context.Context, s *corev1.Service) error {
	uid, rv := s.UID, s.ResourceVersion
	err := d.client.Delete(ctx, s, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsConflict(err):
		return errChangedSince
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	d.deleted(s)
	return nil
}

// nudgeService touches a placeholder MetalLB has not served, to make it try again.
func (d *Driver) nudgeService(ctx context.Context, s *corev1.Service) error {
	patch := client.MergeFrom(s.DeepCopy())
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[plan.AnnotationNudge] = d.now().UTC().Format(time.RFC3339Nano)
	if d.ownService(s) {
		markOwn(s)
	}
	if err := d.client.Patch(ctx, s, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.wroteService(s) // an attached tenant Service is nudged too (plan_release.go)
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
