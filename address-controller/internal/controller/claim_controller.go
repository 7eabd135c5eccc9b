package controller

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/manager"
)

// ClaimReconciler binds claims to addresses and releases them when claims go.
type ClaimReconciler struct {
	Client   client.Client
	Reader   client.Reader // uncached: what a bind or a release decides from
	Recorder events.EventRecorder
	Metrics  *Metrics
	Workers  int
	Now      func() time.Time
	// QuietWait is how long a claim that waits only for its driver keeps the status the API
	// server defaults (phase Pending) before the core writes what it waits for (0: quietWait;
	// negative: no quiet wait).
	QuietWait time.Duration

	// announce says lasting warnings (several default classes) once per claim.
	announce *driverkit.Announcer
	once     sync.Once
	// binds are the addresses this controller bound that the cache does not show yet (refresh).
	binds     *bindMemory
	bindsOnce sync.Once
	// writes are this controller's writes the cache may not show yet (own_writes.go).
	writes ownWrites
	// progress is when claims of each class last became Bound (class_progress.go).
	progress classProgress
	// limitLocks serialize, per namespace and class (striped), the passes that ask for addresses
	// of a class with a per-namespace limit, from the count to the write (lockLimit).
	limitLocks [32]sync.Mutex
}

// bindMemory remembers, per claim, the addresses this controller bound to it until the cache
// lists them for the claim (any pass of the claim looks), or a refresh finds them gone or bound
// elsewhere: a refresh reads them although the cache does not list them yet. An entry lives from
// a bind to the claim's next pass (the bind's own event brings one), so the memory holds the
// binds in flight; a claim that goes forgets its own.
type bindMemory struct {
	mu sync.Mutex
	m  map[types.NamespacedName][]string
}

func (b *bindMemory) bound(claim types.NamespacedName, address string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Contains(b.m[claim], address) {
		b.m[claim] = append(b.m[claim], address)
	}
}

func (b *bindMemory) of(claim types.NamespacedName) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.m[claim])
}

// observed drops the addresses the cache lists for the claim.
func (b *bindMemory) observed(claim types.NamespacedName, cached []ipamv1.IPAddress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := b.m[claim]
	if len(names) == 0 {
		return
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		return slices.ContainsFunc(cached, func(a ipamv1.IPAddress) bool { return a.Name == n })
	})
	b.set(claim, names)
}

// gone drops an address the apiserver shows gone or no longer naming the claim.
func (b *bindMemory) gone(claim types.NamespacedName, address string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.set(claim, slices.DeleteFunc(b.m[claim], func(n string) bool { return n == address }))
}

func (b *bindMemory) forget(claim types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, claim)
}

func (b *bindMemory) set(claim types.NamespacedName, names []string) {
	if len(names) == 0 {
		delete(b.m, claim)
		return
	}
	b.m[claim] = names
}

func (r *ClaimReconciler) announcer() *driverkit.Announcer {
	r.once.Do(func() { r.announce = &driverkit.Announcer{Recorder: r.Recorder} })
	return r.announce
}

func (r *ClaimReconciler) bindMemory() *bindMemory {
	r.bindsOnce.Do(func() { r.binds = &bindMemory{m: map[types.NamespacedName][]string{}} })
	return r.binds
}

func (r *ClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclaim").
		For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{}, deletionPredicate()))).
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfAddress),
			builder.WithPredicates(addressChangedForClaims())).
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsWaitingForClass)).
		WithOptions(manager.ControllerOptions(r.Workers)).
		Complete(r)
}

// addressChangedForClaims passes the address events a claim decides on: creation, deletion,
// and updates of the binding, the deletion mark, or the driver's Lost and Conflict conditions.
// The driver's attachment and Held writes do not concern the claim.
func addressChangedForClaims() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, ok1 := e.ObjectOld.(*ipamv1.IPAddress)
			after, ok2 := e.ObjectNew.(*ipamv1.IPAddress)
			if !ok1 || !ok2 {
				return true
			}
			return !equality.Semantic.DeepEqual(before.Spec.ClaimRef, after.Spec.ClaimRef) ||
				(before.DeletionTimestamp == nil) != (after.DeletionTimestamp == nil) ||
				conditionStatus(before, ipamv1.ConditionLost) != conditionStatus(after, ipamv1.ConditionLost) ||
				conditionStatus(before, ipamv1.ConditionConflict) != conditionStatus(after, ipamv1.ConditionConflict)
		},
	}
}

func conditionStatus(a *ipamv1.IPAddress, condition string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(a.Status.Conditions, condition); c != nil {
		return c.Status
	}
	return ""
}

// claimsOfAddress maps an address to the claim it is bound to or, when it is unbound, to the
// claims waiting for an address of its class. When its class limits the addresses per namespace,
// an address bound in a namespace also concerns that namespace's claims waiting for the class:
// its deletion may free room under the limit.
func (r *ClaimReconciler) claimsOfAddress(ctx context.Context, o client.Object) []reconcile.Request {
	a := o.(*ipamv1.IPAddress)
	ref := a.Spec.ClaimRef
	if ref == nil {
		return r.waitingFor(ctx, a.Spec.ClassName)
	}
	reqs := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err != nil || class.Spec.MaxAddressesPerNamespace == nil {
		return reqs
	}
	var claims ipamv1.IPAddressClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(ref.Namespace),
		client.MatchingFields{index.ClaimWaitingForClass: a.Spec.ClassName}); err != nil {
		log.FromContext(ctx).Error(err, "listing claims waiting for class", "class", a.Spec.ClassName, "namespace", ref.Namespace)
		return reqs
	}
	for _, c := range claims.Items {
		if c.Name != ref.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
		}
	}
	return reqs
}

func (r *ClaimReconciler) claimsWaitingForClass(ctx context.Context, o client.Object) []reconcile.Request {
	c := o.(*ipamv1.IPAddressClass)
	reqs := r.waitingFor(ctx, c.Name)
	if c.Annotations[ipamv1.AnnotationDefaultClass] == "true" {
		reqs = append(reqs, r.waitingFor(ctx, "")...)
	}
	return reqs
}

func (r *ClaimReconciler) waitingFor(ctx context.Context, class string) []reconcile.Request {
	reqs, err := index.ClaimsWaitingFor(ctx, r.Client, class)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing claims waiting for class", "class", class)
	}
	return reqs
}

func (r *ClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return quietConflict(r.reconcile(ctx, req))
}

func (r *ClaimReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamv1.IPAddressClaim
	if err := r.Client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcer().Forget(req.NamespacedName)
			r.bindMemory().forget(req.NamespacedName)
			r.writes.forget(claimWriteKey(req.Namespace, req.Name))
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if claim.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, &claim)
	}
	var refs ipamv1.IPAddressList
	if err := r.Client.List(ctx, &refs, client.MatchingFields{index.AddressByClaim: index.ClaimKey(claim.Namespace, claim.Name)}); err != nil {
		return reconcile.Result{}, err
	}
	r.bindMemory().observed(req.NamespacedName, refs.Items)
	sorted := sortClaimAddresses(&claim, refs.Items)
	pass, err := r.decide(ctx, &claim, sorted)
	if err != nil {
		return reconcile.Result{}, err
	}
	if all := pass.binds(); all || (pass.writes() && !r.mayWriteFromCache(&claim, refs.Items, &pass, r.bindMemory().of(req.NamespacedName))) {
		// A write is due that the cache may not be trusted for: decide again on the apiserver's
		// view of the claim and of its addresses. A decision from a lagging cache could bind a
		// second address, or turn a Bound claim Lost or change its addresses
		// (docs/design.md#a-view-that-includes-your-own-writes: no decision rests on our own unseen
		// writes); a bind also rests on every address that names the claim, one a driver or an
		// admin made a moment ago included. The common writes (the finalizer and stamp, a status
		// that only adds addresses) decide from a cache that shows this controller's own writes
		// (mayWriteFromCache): every write is guarded by the resourceVersion it was decided on.
		ok, err := r.refresh(ctx, &claim, &sorted, refs.Items, all)
		if err != nil || !ok {
			return reconcile.Result{}, err
		}
		if pass, err = r.decide(ctx, &claim, sorted); err != nil {
			return reconcile.Result{}, err
		}
		if !all && pass.binds() {
			// A bind rests on every address that names the claim (refresh).
			if ok, err := r.refresh(ctx, &claim, &sorted, refs.Items, true); err != nil || !ok {
				return reconcile.Result{}, err
			}
			if pass, err = r.decide(ctx, &claim, sorted); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	if pass.limit != nil {
		// The pass asks for addresses of a class with a per-namespace limit: count again on the
		// apiserver's view, one such pass of the namespace and class at a time, until its writes
		// are made. The cache may not show what a pass of another claim asked for a moment ago.
		unlock := r.lockLimit(claim.Namespace, pass.limit.class)
		defer unlock()
		w, err := r.limitWait(ctx, &claim, pass.limit, true)
		if err != nil {
			return reconcile.Result{}, err
		}
		if w != nil {
			pass.block(&claim, w)
		}
	}
	return r.apply(ctx, &claim, pass)
}

// lockLimit takes the lock of a namespace and class (one of a fixed set of stripes) and returns
// its unlock.
func (r *ClaimReconciler) lockLimit(namespace, class string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + class))
	m := &r.limitLocks[h.Sum32()%uint32(len(r.limitLocks))]
	m.Lock()
	return m.Unlock
}

// limitWait counts what the claim's namespace holds of the class ask names (decideLimit), from
// the cache or, live, from the apiserver, and says why the claim may not have what it asks for
// (nil when it may).
func (r *ClaimReconciler) limitWait(ctx context.Context, claim *ipamv1.IPAddressClaim, ask *limitAsk, live bool) (*waiting, error) {
	var claims ipamv1.IPAddressClaimList
	var addrs []ipamv1.IPAddress
	if live {
		if err := r.Reader.List(ctx, &claims, client.InNamespace(claim.Namespace)); err != nil {
			return nil, err
		}
		for _, c := range claims.Items {
			if c.UID == claim.UID && c.Annotations[ipamv1.AnnotationResolvedClass] == ask.class &&
				c.Annotations[ipamv1.AnnotationProvisioner] != "" {
				return nil, nil // stamped by an earlier pass the cache does not show yet: counted then
			}
		}
		var err error
		if addrs, err = liveAddresses(ctx, r.Reader, claim.Namespace, ""); err != nil {
			return nil, err
		}
	} else {
		// Read only: no copies.
		if err := r.Client.List(ctx, &claims, client.InNamespace(claim.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		var list ipamv1.IPAddressList
		if err := r.Client.List(ctx, &list, client.MatchingFields{addressByClassNamespace: classNamespaceKey(ask.class, claim.Namespace)},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		addrs = list.Items
	}
	return decideLimit(claim, ask, addrs, claims.Items), nil
}

// claimPass is what one pass over a claim decided from a snapshot: the reconciler then
// applies it (apply), writing only what changes.
type claimPass struct {
	sorted claimAddresses
	// plans are the missing families that may still bind, in the claim's order.
	plans []familyPlan
	// className is the class the claim resolved to ("" when unresolved).
	className string
	// wait is why the first waiting family waits.
	wait *waiting
	// finalizer: the claim lacks the core's finalizer.
	finalizer bool
	// stamp is the driver to ask for an address ("" when none is asked for now), and
	// stampClass the class it provisions from (AnnotationResolvedClass).
	stamp, stampClass string
	// status is the claim's status as it should be if no bind happens; statusChanges says it
	// differs from the claim's.
	status        ipamv1.IPAddressClaimStatus
	statusChanges bool
	// quietFor: the status is left unwritten for this long yet (see quietUntil).
	quietFor time.Duration
	// limit is what the pass asks of a class with a per-namespace limit (nil: nothing, or no
	// limit applies).
	limit *limitAsk
}

// block turns the pass into one that asks for nothing, binds nothing and stamps nothing, and
// whose status says w: the claim's namespace is at its class's limit.
func (p *claimPass) block(claim *ipamv1.IPAddressClaim, w *waiting) {
	p.plans, p.stamp, p.stampClass, p.limit, p.quietFor = nil, "", "", nil, 0
	p.wait = w
	p.status = claimStatus(claim, p.className, p.sorted.kept, w)
	p.statusChanges = !equalClaimStatus(&claim.Status, &p.status)
}

// binds reports whether the pass binds an address.
func (p *claimPass) binds() bool {
	return slices.ContainsFunc(p.plans, func(f familyPlan) bool { return len(f.candidates) > 0 })
}

// writes reports whether applying the pass writes anything.
func (p *claimPass) writes() bool {
	return p.finalizer || p.stamp != "" || p.statusChanges || len(p.sorted.needUID) > 0 || len(p.sorted.surplus) > 0 || p.binds()
}

// decide reads what one pass needs (from the cache, apart from the claim and its addresses,
// which the caller gives) and decides its writes; it writes nothing.
func (r *ClaimReconciler) decide(ctx context.Context, claim *ipamv1.IPAddressClaim, sorted claimAddresses) (claimPass, error) {
	p := claimPass{sorted: sorted, className: claim.Status.ClassName,
		finalizer: !controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerClaim)}
	// What a previous leader or process bound counts as progress too (classProgress).
	r.sawBound(claim)
	// Bind the missing families, unless the claim was Bound before: a Lost claim keeps
	// waiting for its own addresses instead of silently taking new ones.
	var class *ipamv1.IPAddressClass // of the families that bind or ask the driver
	asking := 0
	for _, fam := range claim.Spec.Family.Families() {
		if sorted.kept[fam] != nil || !mayBind(claim) {
			continue
		}
		plan, err := r.planFamily(ctx, claim, fam, keptClass(claim, sorted.kept))
		if err != nil {
			return claimPass{}, err
		}
		plan.family = fam
		if plan.class != "" {
			p.className = plan.class
		}
		w := plan.wait
		if len(plan.candidates) > 0 || w == nil && plan.provisioner != "" {
			class = plan.classObj
			asking++
		}
		switch {
		case len(plan.candidates) > 0:
			p.plans = append(p.plans, plan)
		case w == nil && plan.provisioner != "":
			// Nothing to bind: the driver must provision.
			if claim.Annotations[ipamv1.AnnotationProvisioner] != plan.provisioner ||
				claim.Annotations[ipamv1.AnnotationResolvedClass] != plan.class {
				p.stamp, p.stampClass = plan.provisioner, plan.class
			}
			w = &waiting{ipamv1.ReasonWaitingForAddress,
				fmt.Sprintf("waiting for driver %s to provision an %s address of class %s", plan.provisioner, fam, plan.class)}
		}
		if p.wait == nil {
			p.wait = w
		}
	}
	// A stamp for another class than the one resolved now (the claim already has an address of
	// that class, or the stamped class is gone) is rewritten, also when nothing is asked of a
	// driver this pass: a driver provisions from the stamp.
	if stamped, by := claim.Annotations[ipamv1.AnnotationResolvedClass], claim.Annotations[ipamv1.AnnotationProvisioner]; p.stamp == "" &&
		stamped != "" && by != "" && p.className != "" && stamped != p.className {
		p.stamp, p.stampClass = by, p.className
	}
	p.status = claimStatus(claim, p.className, sorted.kept, p.wait)
	p.statusChanges = !equalClaimStatus(&claim.Status, &p.status)
	if class != nil {
		if p.limit = askOfLimit(claim, class, asking); p.limit != nil {
			// Over the limit by the cache's count: the claim waits (no read of the apiserver for
			// a claim that keeps waiting). Within it, the reconciler counts again, live, before
			// it writes.
			w, err := r.limitWait(ctx, claim, p.limit, false)
			if err != nil {
				return claimPass{}, err
			}
			if w != nil {
				p.block(claim, w)
				return p, nil
			}
		}
	}
	if p.statusChanges && mayStayQuiet(claim, &p.status) {
		lastBind, err := r.lastBind(ctx, p.status.ClassName, claim.Spec.Family.Families())
		if err != nil {
			return claimPass{}, err
		}
		if until, ok := quietUntil(claim, &p.status, r.quietWait(), lastBind); ok && r.now().Before(until) {
			p.status, p.statusChanges, p.quietFor = claim.Status, false, until.Sub(r.now())
		}
	}
	return p, nil
}

// sawBound feeds classProgress from a claim seen Bound: its Bound condition's transition time,
// never later than this controller's clock (a previous leader's clock may run ahead).
func (r *ClaimReconciler) sawBound(claim *ipamv1.IPAddressClaim) {
	cond := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.ConditionBound)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return
	}
	at := cond.LastTransitionTime.Time
	if now := r.now(); at.After(now) {
		at = now
	}
	r.progress.saw(claim.Status.ClassName, boundFamilies(claim), at)
}

// lastBind is when a claim of class last became Bound with every one of families
// (classProgress), seeding the class from the cache's Bound claims on its first use.
func (r *ClaimReconciler) lastBind(ctx context.Context, class string, families []ipamv1.IPFamily) (time.Time, error) {
	err := r.progress.seed(class, func() error {
		var claims ipamv1.IPAddressClaimList
		// Read only, once per class and process: no copy of every claim.
		if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		for i := range claims.Items {
			if c := &claims.Items[i]; c.Status.ClassName == class {
				r.sawBound(c)
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return r.progress.lastBind(class, families), nil
}

func (r *ClaimReconciler) quietWait() time.Duration {
	switch {
	case r.QuietWait < 0:
		return 0 // off
	case r.QuietWait > 0:
		return r.QuietWait
	}
	return quietWait
}

// apply makes the writes of a pass, in a crash-safe order: the claim's finalizer (with the
// provisioner annotation, one patch), the binds, the addresses' claimRefs, then the status.
// Every write is guarded by the resourceVersion it was decided on.
func (r *ClaimReconciler) apply(ctx context.Context, claim *ipamv1.IPAddressClaim, p claimPass) (reconcile.Result, error) {
	if p.finalizer || p.stamp != "" {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, ipamv1.FinalizerClaim)
		if p.stamp != "" {
			metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationProvisioner, p.stamp)
			metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationResolvedClass, p.stampClass)
		}
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return reconcile.Result{}, err
		}
		r.writes.wrote(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, r.now())
	}
	kept := p.sorted.kept
	for _, plan := range p.plans {
		bound, err := r.bindFirst(ctx, claim, plan.candidates)
		if err != nil {
			return reconcile.Result{}, err
		}
		if bound == nil {
			// Another claim took every candidate between our read and our patch: decide again
			// on a newer view (the next pass), rather than ask a driver or write a status.
			return reconcile.Result{RequeueAfter: raceRetry}, nil
		}
		kept[plan.family] = bound
	}
	for _, a := range p.sorted.needUID {
		if err := r.completeUID(ctx, claim, a); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: raceRetry}, nil // as for the surplus below
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	for _, a := range p.sorted.surplus {
		if err := r.unbindSurplus(ctx, claim, a); apierrors.IsConflict(err) {
			// Another writer changed the address since it was read: decide again. Its write may
			// be one this controller is not woken by (a driver's status write), and a Bound claim
			// has no scheduled re-check, so the retry is this pass's to ask for.
			return reconcile.Result{RequeueAfter: raceRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	status := p.status
	if len(p.plans) > 0 {
		status = claimStatus(claim, p.className, kept, p.wait)
	}
	if err := r.writeStatus(ctx, claim, status); err != nil {
		return reconcile.Result{}, err
	}
	// Nothing waits on an event alone: a claim still waiting is looked at again.
	if claim.Status.Phase != ipamv1.ClaimBound {
		since := claim.CreationTimestamp.Time
		if cond := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.ConditionBound); cond != nil {
			since = cond.LastTransitionTime.Time
		}
		after := recheckAfter(r.now().Sub(since))
		if p.quietFor > 0 && len(p.plans) == 0 {
			after = min(after, p.quietFor)
		}
		return reconcile.Result{RequeueAfter: after}, nil
	}
	return reconcile.Result{}, nil
}

// raceRetry is how soon a pass that lost a race for an address decides again.
const raceRetry = 50 * time.Millisecond

// mayBind: a claim takes new addresses only until it is first Bound.
func mayBind(claim *ipamv1.IPAddressClaim) bool {
	return claim.Status.Phase != ipamv1.ClaimBound && claim.Status.Phase != ipamv1.ClaimLost
}

// refresh replaces the cached claim and its addresses with the apiserver's. It reports false
// when the claim is gone or being deleted (a later pass releases it).
//
// With all, the addresses are listed by claimRef: a pass that binds sees every address that names
// the claim, one a driver or an admin made a moment ago included, so it never binds a second one.
// Otherwise they are read one by one, by name: every address the cache lists for the claim, the
// live claim's status names, or this controller bound to it without the cache showing it yet
// (binds) — a view with all of this controller's own writes
// (docs/design.md#a-view-that-includes-your-own-writes) and what its last status write rested on. A
// read by name costs the apiserver the same whatever the number of addresses, while a list by
// claimRef (a field selector) makes it filter every address: once per write of every claim, that
// was the core's bottleneck at 10,000 addresses. What a read by name can miss is an address another
// writer made name the claim a moment ago that the cache does not show yet; the status then waits
// for that address's own event, which brings the claim back.
func (r *ClaimReconciler) refresh(ctx context.Context, claim *ipamv1.IPAddressClaim, sorted *claimAddresses, cached []ipamv1.IPAddress, all bool) (bool, error) {
	var live ipamv1.IPAddressClaim
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(claim), &live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if live.DeletionTimestamp != nil || live.UID != claim.UID {
		return false, nil
	}
	if all {
		addrs, err := liveAddressesOf(ctx, r.Reader, &live)
		if err != nil {
			return false, err
		}
		*claim = live
		*sorted = sortClaimAddresses(claim, addrs)
		return true, nil
	}
	key := client.ObjectKeyFromObject(claim)
	var names []string
	for _, a := range cached {
		names = append(names, a.Name)
	}
	for _, a := range live.Status.Addresses {
		names = append(names, a.Name)
	}
	names = append(names, r.bindMemory().of(key)...)
	slices.Sort(names)
	addrs := make([]ipamv1.IPAddress, 0, len(names))
	for _, name := range slices.Compact(names) {
		var a ipamv1.IPAddress
		if err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, &a); apierrors.IsNotFound(err) {
			r.bindMemory().gone(key, name)
			continue
		} else if err != nil {
			return false, err
		}
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == live.Namespace && ref.Name == live.Name {
			addrs = append(addrs, a)
		} else {
			r.bindMemory().gone(key, name)
		}
	}
	*claim = live
	*sorted = sortClaimAddresses(claim, addrs)
	return true, nil
}

// liveAddressesOf lists, uncached, the addresses whose claimRef names the claim.
func liveAddressesOf(ctx context.Context, reader client.Reader, claim *ipamv1.IPAddressClaim) ([]ipamv1.IPAddress, error) {
	return liveAddresses(ctx, reader, claim.Namespace, claim.Name)
}

// liveAddresses lists, uncached, the addresses whose claimRef names the claim namespace/name, or
// any claim of the namespace when name is empty (through the CRD's selectable claimRef fields, so
// the apiserver filters them).
func liveAddresses(ctx context.Context, reader client.Reader, namespace, name string) ([]ipamv1.IPAddress, error) {
	fields := client.MatchingFields{"spec.claimRef.namespace": namespace}
	if name != "" {
		fields["spec.claimRef.name"] = name
	}
	var list ipamv1.IPAddressList
	err := reader.List(ctx, &list, fields)
	if apierrors.IsBadRequest(err) {
		// An apiserver without selectable CRD fields (before Kubernetes 1.31): filter here.
		list = ipamv1.IPAddressList{}
		err = reader.List(ctx, &list)
	}
	if err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, a := range list.Items {
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == namespace && (name == "" || ref.Name == name) {
			out = append(out, a)
		}
	}
	return out, nil
}

// familyPlan is how one missing family of a claim may be bound.
type familyPlan struct {
	// class is the class the claim resolved to ("" when unresolved).
	class string
	// candidates to bind, in order: the named address, or the Available ones of the class.
	candidates []*ipamv1.IPAddress
	// family is the family the plan is for.
	family ipamv1.IPFamily
	// provisioner is the driver to ask when no candidate binds ("" for a named address).
	provisioner string
	// wait is why nothing can be bound now (nil when candidates or the driver may serve).
	wait *waiting
	// classObj is the resolved class (nil when unresolved).
	classObj *ipamv1.IPAddressClass
}

// planFamily finds, from the cache, what one missing family of a claim can bind: the address
// named by spec.addressName, or the Available addresses of the claim's class; otherwise the
// driver to ask, or why the claim waits. It writes nothing.
func (r *ClaimReconciler) planFamily(ctx context.Context, claim *ipamv1.IPAddressClaim, fam ipamv1.IPFamily, bound string) (familyPlan, error) {
	var named *ipamv1.IPAddress
	if claim.Spec.AddressName != "" {
		named = &ipamv1.IPAddress{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Spec.AddressName}, named); err != nil {
			if apierrors.IsNotFound(err) {
				return familyPlan{wait: &waiting{ipamv1.ReasonAddressNotFound,
					fmt.Sprintf("IPAddress %s does not exist; create it, or recreate the claim without addressName", claim.Spec.AddressName)}}, nil
			}
			return familyPlan{}, err
		}
	}
	class, w, err := r.resolveClass(ctx, claim, named, bound)
	if err != nil || class == nil {
		return familyPlan{wait: w}, err
	}
	plan := familyPlan{class: class.Name, classObj: class}
	if cond := meta.FindStatusCondition(class.Status.Conditions, ipamv1.ConditionAccepted); cond != nil && cond.Status == metav1.ConditionFalse {
		plan.wait = &waiting{ipamv1.ReasonClassNotAccepted,
			fmt.Sprintf("class %s is not accepted by its driver (%s: %s)", class.Name, cond.Reason, cond.Message)}
		return plan, nil
	}
	if named != nil {
		if w := checkNamedAddress(claim, named, class.Name, fam); w != nil {
			plan.wait = w
			return plan, nil
		}
		plan.candidates = []*ipamv1.IPAddress{named}
		return plan, nil
	}
	var candidates ipamv1.IPAddressList
	if err := r.Client.List(ctx, &candidates, client.MatchingFields{index.AddressBindable: index.BindableKey(class.Name, fam)}); err != nil {
		return familyPlan{}, err
	}
	orderAddresses(candidates.Items)
	for i := range candidates.Items {
		a := &candidates.Items[i]
		if a.Spec.ClaimRef != nil || a.DeletionTimestamp != nil || !addressUsable(a) ||
			meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict) {
			continue
		}
		plan.candidates = append(plan.candidates, a)
	}
	plan.provisioner = class.Spec.Provisioner
	return plan, nil
}

// bindFirst binds the first candidate that can still be bound (nil when another writer won
// every one).
func (r *ClaimReconciler) bindFirst(ctx context.Context, claim *ipamv1.IPAddressClaim, candidates []*ipamv1.IPAddress) (*ipamv1.IPAddress, error) {
	for _, a := range candidates {
		// Only an unbound address, or one pre-bound to this claim by namespace and name without a
		// uid, is bound. An address that still names an earlier claim of the same name (Released,
		// with that claim's uid) is not this claim's (docs/design.md).
		if !bindableBy(claim, a) {
			continue
		}
		bound, err := r.bind(ctx, claim, a)
		if err != nil || bound != nil {
			return bound, err
		}
	}
	return nil, nil
}

// checkNamedAddress says why the address a claim names cannot be bound to it, or nil.
func checkNamedAddress(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress, class string, fam ipamv1.IPFamily) *waiting {
	if got, _ := addressFamily(a); got != fam {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is %s but the claim requests %s", a.Name, got, fam)}
	}
	if a.Spec.ClassName != class {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s belongs to class %s, not %s", a.Name, a.Spec.ClassName, class)}
	}
	if a.DeletionTimestamp != nil {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is being deleted", a.Name)}
	}
	if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace != claim.Namespace {
		// The tenant reads this (condition and Warning): it says the address is taken, never by
		// whom; the address's claimRef tells an admin (docs/design.md).
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf(
			"IPAddress %s is reserved for a claim of another namespace; name another address, or recreate the claim without addressName", a.Name)}
	}
	if ref := a.Spec.ClaimRef; ref != nil && ref.Name != claim.Name {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is bound to claim %s/%s", a.Name, ref.Namespace, ref.Name)}
	}
	if !bindableBy(claim, a) {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf(
			"IPAddress %s is retained for an earlier claim named %s/%s, not this one; if it should be yours, ask an admin to hand it to this claim (remove spec.claimRef.uid on the IPAddress)",
			a.Name, claim.Namespace, claim.Name)}
	}
	return nil
}

// resolveClass finds the claim's class: spec.className, else the sticky status.className, else
// the class of the address it names, else that of an address it already has for another family,
// else the class it resolved to when it asked a driver (AnnotationResolvedClass, sticky until the
// status records it), else the default class. A class known only from that annotation that is
// gone or going is resolved again, since nothing of it is bound yet.
func (r *ClaimReconciler) resolveClass(ctx context.Context, claim *ipamv1.IPAddressClaim, named *ipamv1.IPAddress, bound string) (*ipamv1.IPAddressClass, *waiting, error) {
	name := claim.Spec.ClassName
	if name == "" {
		name = claim.Status.ClassName
	}
	if name == "" && named != nil {
		name = named.Spec.ClassName
	}
	if name == "" {
		name = bound
	}
	if stamped := claim.Annotations[ipamv1.AnnotationResolvedClass]; name == "" && stamped != "" {
		var class ipamv1.IPAddressClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: stamped}, &class); {
		case err == nil && class.DeletionTimestamp == nil:
			return &class, nil, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, nil, err
		}
	}
	if name == "" {
		var classes ipamv1.IPAddressClassList
		if err := r.Client.List(ctx, &classes); err != nil {
			return nil, nil, err
		}
		def, others := pickMarkedClass(classes.Items, ipamv1.AnnotationDefaultClass)
		if def == nil {
			return nil, &waiting{ipamv1.ReasonNoDefaultClass,
				"the claim names no class and no IPAddressClass is marked " + ipamv1.AnnotationDefaultClass + `: "true"`}, nil
		}
		if len(others) == 0 {
			// Resolved: a later recurrence is said again.
			r.announcer().Clear(claim, "MultipleDefaultClasses")
		} else {
			r.announcer().Say(claim, nil, corev1.EventTypeWarning, "MultipleDefaultClasses", "ResolveClass",
				fmt.Sprintf("several classes are marked default (%s, %s); using %s, the newest. Unmark all but one.",
					def.Name, strings.Join(others, ", "), def.Name))
		}
		return def, nil, nil
	}
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.progress.forget(name)
			return nil, &waiting{ipamv1.ReasonClassNotFound,
				fmt.Sprintf("IPAddressClass %s does not exist; the claim binds once it is created", name)}, nil
		}
		return nil, nil, err
	}
	if class.DeletionTimestamp != nil {
		r.progress.forget(name)
		return nil, &waiting{ipamv1.ReasonClassNotFound, fmt.Sprintf("IPAddressClass %s is being deleted", name)}, nil
	}
	return &class, nil, nil
}

// bind sets claimRef on an unbound address with an optimistic-concurrency precondition, so two
// claims can never both bind it. It returns nil (and no error) when another writer won.
func (r *ClaimReconciler) bind(ctx context.Context, claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) (*ipamv1.IPAddress, error) {
	a = a.DeepCopy()
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	if err := r.Client.Patch(ctx, a, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	r.bindMemory().bound(client.ObjectKeyFromObject(claim), a.Name)
	r.writes.wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
	return a, nil
}

func (r *ClaimReconciler) completeUID(ctx context.Context, claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) error {
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	a.Spec.ClaimRef.UID = claim.UID
	if err := r.Client.Patch(ctx, a, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.writes.wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
	return nil
}

func (r *ClaimReconciler) unbindSurplus(ctx context.Context, claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) error {
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	a.Spec.ClaimRef = nil
	if err := r.Client.Patch(ctx, a, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone: nothing left to unbind
		}
		return err
	}
	r.writes.wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
	r.Recorder.Eventf(claim, a, corev1.EventTypeNormal, "SurplusAddressReleased", "Unbind",
		"IPAddress %s (%s) was a second address for one family; made it Available again", a.Name, a.Spec.Address)
	return nil
}

// claimStatus is the status the claim should have with the addresses it keeps: decideClaimStatus
// applied to the claim's status (class, phase, addresses, Bound condition).
// keptClass is the class of the claim's kept addresses ("" when none), in family order.
func keptClass(claim *ipamv1.IPAddressClaim, kept map[ipamv1.IPFamily]*ipamv1.IPAddress) string {
	for _, f := range claim.Spec.Family.Families() {
		if a := kept[f]; a != nil {
			return a.Spec.ClassName
		}
	}
	return ""
}

func claimStatus(claim *ipamv1.IPAddressClaim, className string, kept map[ipamv1.IPFamily]*ipamv1.IPAddress, wait *waiting) ipamv1.IPAddressClaimStatus {
	out := decideClaimStatus(claim, kept, wait)
	st := *claim.Status.DeepCopy()
	st.Phase = out.phase
	st.Addresses = out.addresses
	if className != "" {
		st.ClassName = className
	}
	if st.ClassName == "" && out.phase == ipamv1.ClaimBound {
		// Bound without a status written before (quietUntil): the class is the one the claim
		// names, else its addresses', else the one it resolved to when it asked its driver.
		st.ClassName = cmp.Or(claim.Spec.ClassName, keptClass(claim, kept), claim.Annotations[ipamv1.AnnotationResolvedClass])
	}
	status := metav1.ConditionFalse
	if out.phase == ipamv1.ClaimBound {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: ipamv1.ConditionBound, Status: status, Reason: out.reason, Message: out.message,
		ObservedGeneration: claim.Generation,
	})
	return st
}

// writeStatus writes the claim's status when it differs, guarded by resourceVersion: a pass
// that read an older claim must not write over what a newer pass wrote (it retries on the
// newer claim instead), and so each transition, and the bind metric, is counted once.
func (r *ClaimReconciler) writeStatus(ctx context.Context, claim *ipamv1.IPAddressClaim, status ipamv1.IPAddressClaimStatus) error {
	if equalClaimStatus(&claim.Status, &status) {
		return nil
	}
	orig := claim.DeepCopy()
	claim.Status = status
	if err := r.Client.Status().Patch(ctx, claim, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	r.writes.wrote(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, r.now())
	r.claimTransition(orig, claim)
	return nil
}

// claimTransition emits the events and metrics of a status change: once per transition. The
// way to Bound says nothing (docs/design.md#the-write-budget: the status says it); what needs a
// tenant or an admin to act is a Warning.
func (r *ClaimReconciler) claimTransition(before, after *ipamv1.IPAddressClaim) {
	prev := meta.FindStatusCondition(before.Status.Conditions, ipamv1.ConditionBound)
	cur := meta.FindStatusCondition(after.Status.Conditions, ipamv1.ConditionBound)
	switch {
	case after.Status.Phase == ipamv1.ClaimBound && before.Status.Phase != ipamv1.ClaimBound:
		if before.Status.Phase == "" || before.Status.Phase == ipamv1.ClaimPending {
			r.Metrics.observeBind(r.now().Sub(after.CreationTimestamp.Time))
			r.progress.saw(after.Status.ClassName, boundFamilies(after), r.now())
		}
	case after.Status.Phase == ipamv1.ClaimLost && before.Status.Phase != ipamv1.ClaimLost:
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "AddressLost", "Bind", "%s", cur.Message)
	case after.Status.Phase == ipamv1.ClaimPending && cur.Reason != ipamv1.ReasonWaitingForAddress &&
		(prev == nil || prev.Reason != cur.Reason):
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, cur.Reason, "Bind", "%s", cur.Message)
	}
}

func (r *ClaimReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// finalize releases a deleted claim's addresses, read from the apiserver so that one a driver
// bound a moment ago is not missed: reclaimAction deletes an address (Delete policy, or a claim
// auto-claim made) or leaves it for the address controller to mark Released once the claim is
// gone. Then the finalizer goes.
func (r *ClaimReconciler) finalize(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	if !controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerClaim) {
		return nil
	}
	addrs, err := liveAddressesOf(ctx, r.Reader, claim)
	if err != nil {
		return err
	}
	sorted := sortClaimAddresses(claim, addrs)
	all := sorted.surplus
	for _, a := range sorted.kept {
		all = append(all, a)
	}
	for _, a := range all {
		var class *ipamv1.IPAddressClass
		if a.Spec.ReclaimPolicy == "" {
			class = &ipamv1.IPAddressClass{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, class); err != nil {
				class = nil
			}
		}
		if reclaimAction(a, claim, class) != reclaimDelete || a.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, a, client.Preconditions{UID: &a.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.Recorder.Eventf(claim, a, corev1.EventTypeNormal, "AddressDeleted", "Release",
			"deleted IPAddress %s (%s): the claim is gone and the address is not retained", a.Name, a.Spec.Address)
	}
	r.announcer().Forget(client.ObjectKeyFromObject(claim))
	return removeFinalizer(ctx, r.Client, claim, ipamv1.FinalizerClaim)
}
