package controller

import (
	"context"
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
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
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
	binds *bindMemory
	// writes are this controller's writes the cache may not show yet (own_writes.go).
	writes  *freshness.WriteTracker[string]
	memOnce sync.Once
	// progress is when claims of each class last became Bound (class_progress.go).
	progress classProgress
	// limitLocks serialize, per namespace and class (striped), the passes that ask for addresses
	// of a class with a per-namespace limit, from the count to the write (lockLimit).
	limitLocks [32]sync.Mutex
}

func (r *ClaimReconciler) announcer() *driverkit.Announcer {
	r.once.Do(func() { r.announce = &driverkit.Announcer{Recorder: r.Recorder} })
	return r.announce
}

func (r *ClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclaim").
		For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{}, deletionPredicate()))).
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfAddress),
			builder.WithPredicates(addressChangedForClaims())).
		// A driver's capacity writes on a class decide nothing for its claims.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsWaitingForClass),
			builder.WithPredicates(driverkit.NotCapacityOnly())).
		// A namespace's labels decide which classes serve its claims (namespaceSelector).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.waitingClaimsOf),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return false },
				DeleteFunc: func(event.DeleteEvent) bool { return false },
			}, predicate.LabelChangedPredicate{})).
		WithOptions(manager.ControllerOptions(r.Workers)).
		Complete(r)
}

// waitingClaimsOf maps a namespace to its claims that are not Bound.
func (r *ClaimReconciler) waitingClaimsOf(ctx context.Context, o client.Object) []reconcile.Request {
	var claims ipamv1.IPAddressClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the claims of a namespace", "namespace", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range claims.Items {
		if c := &claims.Items[i]; mayBind(c) && c.DeletionTimestamp == nil {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
		}
	}
	return reqs
}

// addressChangedForClaims passes the address events a claim decides on: creation, deletion,
// and updates of the binding, the deletion mark, the driver's Lost and Conflict conditions, or
// the object the driver reports it attached to (the claim's status.usedBy). The driver's Held
// writes do not concern the claim.
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
				conditionStatus(before, ipamv1.ConditionConflict) != conditionStatus(after, ipamv1.ConditionConflict) ||
				!equality.Semantic.DeepEqual(before.Status.AttachedTo, after.Status.AttachedTo)
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
			r.ownWrites().Forget(claimWriteKey(req.Namespace, req.Name))
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
	r.bindMemory().observed(req.NamespacedName, refs.Items, r.now())
	sorted := sortClaimAddresses(&claim, refs.Items)
	pass, err := r.decide(ctx, &claim, sorted)
	if err != nil {
		return reconcile.Result{}, err
	}
	if all := pass.binds(); all || (pass.writes() && !r.mayWriteFromCache(&claim, refs.Items, &pass, r.bindMemory().of(req.NamespacedName, r.now()))) {
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
	if controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerClaim) {
		if err := r.untrimmed(ctx, claim); err != nil {
			return err
		}
	}
	return removeFinalizer(ctx, r.Client, claim, ipamv1.FinalizerClaim)
}
