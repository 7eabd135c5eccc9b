package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
)

// AddressReconciler derives each address's phase, protects bound addresses from deletion, and
// returns Released addresses to Available when their class's releaseDelay passes.
type AddressReconciler struct {
	Client   client.Client
	Reader   client.Reader
	Recorder events.EventRecorder
	Workers  int
	Now      func() time.Time

	// announce reports a held deletion once per deletion, not on every pass.
	announce *driverkit.Announcer
	once     sync.Once
}

func (r *AddressReconciler) announcer() *driverkit.Announcer {
	r.once.Do(func() { r.announce = &driverkit.Announcer{Recorder: r.Recorder} })
	return r.announce
}

func (r *AddressReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ipaddress").
		For(&ipamv1.IPAddress{}).
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(r.addressesOfClaim)).
		// A driver's capacity writes on a class decide nothing for its Released addresses.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(r.releasedOfClass),
			builder.WithPredicates(driverkit.NotCapacityOnly())).
		WithOptions(manager.ControllerOptions(r.Workers)).
		Complete(r)
}

func (r *AddressReconciler) addressesOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, index.AddressByClaim, index.ClaimKey(o.GetNamespace(), o.GetName()))
}

func (r *AddressReconciler) releasedOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, index.AddressReleasedByClass, o.GetName())
}

func (r *AddressReconciler) requests(ctx context.Context, field, key string) []reconcile.Request {
	var list ipamv1.IPAddressList
	if err := r.Client.List(ctx, &list, client.MatchingFields{field: key}); err != nil {
		log.FromContext(ctx).Error(err, "mapping to addresses", "index", field, "key", key)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, a := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: a.Name}})
	}
	return reqs
}

func (r *AddressReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *AddressReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return quietConflict(r.reconcile(ctx, req))
}

// errDecideLive stops a pass decided from the cache at its first write: the pass is made again on
// the apiserver's view of the address (docs/design.md#a-view-that-includes-your-own-writes), so
// that a pass woken by this controller's own write, before the cache shows it, neither writes twice
// nor fails a resourceVersion precondition.
var errDecideLive = errors.New("a write is due: decide again on the apiserver's view")

func (r *AddressReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var a ipamv1.IPAddress
	if err := r.Client.Get(ctx, req.NamespacedName, &a); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcer().Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	res, err := r.pass(ctx, &a, false)
	if !errors.Is(err, errDecideLive) {
		return res, err
	}
	var live ipamv1.IPAddress
	if err := r.Reader.Get(ctx, req.NamespacedName, &live); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcer().Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return r.pass(ctx, &live, true)
}

// liveAddress reads a again from the apiserver.
func (r *AddressReconciler) liveAddress(ctx context.Context, a *ipamv1.IPAddress) (*ipamv1.IPAddress, error) {
	var live ipamv1.IPAddress
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(a), &live); err != nil {
		return nil, err
	}
	return &live, nil
}

// pass decides and writes for one address; live says a comes from the apiserver. A pass on a
// cached address returns errDecideLive instead of its first write.
func (r *AddressReconciler) pass(ctx context.Context, a *ipamv1.IPAddress, live bool) (reconcile.Result, error) {
	stale := func() bool { return !live }
	claim, state, err := r.claimOf(ctx, a)
	if err != nil {
		return reconcile.Result{}, err
	}

	if a.DeletionTimestamp != nil {
		if state == claimLive {
			r.announcer().Say(a, claim, corev1.EventTypeWarning, "DeletionBlocked", "Delete",
				fmt.Sprintf("IPAddress %s is bound to claim %s/%s and is deleted once that claim is; delete the claim first",
					a.Name, claim.Namespace, claim.Name))
			// The claim's deletion brings the next pass; a missed event only delays it.
			return reconcile.Result{RequeueAfter: recheckAfter(r.now().Sub(a.DeletionTimestamp.Time))}, nil
		}
		if stale() && controllerutil.ContainsFinalizer(a, ipamv1.FinalizerAddress) {
			return reconcile.Result{}, errDecideLive
		}
		r.announcer().Forget(client.ObjectKeyFromObject(a))
		return reconcile.Result{}, removeFinalizer(ctx, r.Client, a, ipamv1.FinalizerAddress)
	}
	// The protection finalizer, and the auto-claim mark while the claim is live (what the
	// release decides from if the claim vanishes unseen): one patch.
	mark := markedAutoClaim(a)
	if state == claimLive {
		mark = wantAutoClaimMark(claim)
	}
	if !controllerutil.ContainsFinalizer(a, ipamv1.FinalizerAddress) || mark != markedAutoClaim(a) {
		if stale() {
			return reconcile.Result{}, errDecideLive
		}
		done := false
		if mark == markedAutoClaim(a) {
			// Only the finalizer is missing (the usual case: the driver created the address with
			// its own finalizer and the mark): a patch that tests the finalizer list alone, so
			// the driver's status writes of the same moment do not refuse it.
			var err error
			if done, err = addFinalizerGuarded(ctx, r.Client, a, ipamv1.FinalizerAddress); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
		}
		if !done && mark == markedAutoClaim(a) && len(a.Finalizers) > 0 {
			// The finalizer list changed since the live read: decide again from a fresh one.
			return reconcile.Result{RequeueAfter: raceRetry}, nil
		}
		if !done {
			patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.AddFinalizer(a, ipamv1.FinalizerAddress)
			if mark {
				metav1.SetMetaDataAnnotation(&a.ObjectMeta, ipamv1.AnnotationAutoClaim, "true")
			} else {
				delete(a.Annotations, ipamv1.AnnotationAutoClaim)
			}
			if err := r.Client.Patch(ctx, a, patch); err != nil {
				return reconcile.Result{}, err
			}
		}
	}

	var delay *time.Duration
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err == nil {
		if class.Spec.ReleaseDelay != nil {
			delay = &class.Spec.ReleaseDelay.Duration
		}
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}

	d := decideAddress(a, state, delay, r.now())
	if (d.delete || d.clearClaimRef || d.phase != a.Status.Phase || !timesEqual(d.releasedAt, a.Status.ReleasedAt)) && stale() {
		return reconcile.Result{}, errDecideLive
	}
	if d.delete {
		if err := r.Client.Delete(ctx, a, client.Preconditions{UID: &a.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "AddressDeleted", "Release",
			"claim %s/%s is gone and the reclaim policy is Delete", a.Spec.ClaimRef.Namespace, a.Spec.ClaimRef.Name)
		return reconcile.Result{}, nil
	}
	if d.clearClaimRef {
		prev := *a.Spec.ClaimRef
		patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		a.Spec.ClaimRef = nil
		if err := r.Client.Patch(ctx, a, patch); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: raceRetry}, nil // changed since read: decide again
		} else if err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "ReleaseDelayPassed", "Release",
			"released from claim %s/%s for longer than the class's releaseDelay (%s); now Available",
			prev.Namespace, prev.Name, delay.String())
	}
	if d.phase != a.Status.Phase || !timesEqual(d.releasedAt, a.Status.ReleasedAt) {
		before := a.Status.Phase
		// Guarded: a pass that read an older claimRef must not write its phase over a newer
		// one; it retries on the newer address. The test covers the claimRef alone, so the
		// driver's condition writes do not refuse it; when it fails, the whole-object lock
		// decides (a 409 re-reads).
		done, err := setPhaseGuarded(ctx, r.Client, a, d.phase, d.releasedAt)
		if err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if !done {
			// The claimRef test failed: read again; the same claimRef (its JSON differs from
			// this client's, say an explicit empty uid) takes the locked patch, a new one a
			// new decision.
			fresh, err := r.liveAddress(ctx, a)
			if err != nil || !equality.Semantic.DeepEqual(fresh.Spec.ClaimRef, a.Spec.ClaimRef) {
				return reconcile.Result{RequeueAfter: raceRetry}, client.IgnoreNotFound(err)
			}
			*a = *fresh
			// Decided again from the fresh address (its conditions may have changed too).
			d = decideAddress(a, state, delay, r.now())
			if d.delete || d.clearClaimRef || (d.phase == a.Status.Phase && timesEqual(d.releasedAt, a.Status.ReleasedAt)) {
				return reconcile.Result{RequeueAfter: raceRetry}, nil
			}
			patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
			a.Status.Phase, a.Status.ReleasedAt = d.phase, d.releasedAt
			if err := r.Client.Status().Patch(ctx, a, patch); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
		}
		r.phaseEvent(a, before)
	}
	if state == claimTerminating && d.requeueAfter == 0 {
		// The claim's release (then its disappearance) brings the next pass; a missed event
		// only delays it.
		return reconcile.Result{RequeueAfter: recheckAfter(r.now().Sub(claim.DeletionTimestamp.Time))}, nil
	}
	return reconcile.Result{RequeueAfter: d.requeueAfter}, nil
}

func (r *AddressReconciler) phaseEvent(a *ipamv1.IPAddress, before ipamv1.AddressPhase) {
	if before == a.Status.Phase {
		return
	}
	switch a.Status.Phase {
	case ipamv1.AddressReleased:
		r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "Released", "Release",
			"claim %s/%s is gone; the address is retained. Delete it, or clear spec.claimRef to make it Available",
			a.Spec.ClaimRef.Namespace, a.Spec.ClaimRef.Name)
	case ipamv1.AddressConflict:
		r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, "Conflict", "Phase", "the driver reports a conflict: see the Conflict condition")
	case ipamv1.AddressLost:
		r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, "Lost", "Phase", "the driver reports the address lost: see the Lost condition")
	}
}

// claimOf finds the claim an address's claimRef names. The cache may lag behind a driver that
// just created a pre-bound address, so a miss is confirmed by a live read before the claim is
// taken for gone.
func (r *AddressReconciler) claimOf(ctx context.Context, a *ipamv1.IPAddress) (*ipamv1.IPAddressClaim, claimState, error) {
	ref := a.Spec.ClaimRef
	if ref == nil {
		return nil, claimGone, nil
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	var claim ipamv1.IPAddressClaim
	err := r.Client.Get(ctx, key, &claim)
	if err == nil && ref.UID != "" && claim.UID != ref.UID {
		err = r.Reader.Get(ctx, key, &claim)
	}
	if apierrors.IsNotFound(err) {
		err = r.Reader.Get(ctx, key, &claim)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, claimGone, nil
	case err != nil:
		return nil, claimGone, err
	case ref.UID != "" && claim.UID != ref.UID:
		return nil, claimGone, nil
	case claim.DeletionTimestamp != nil:
		return &claim, claimTerminating, nil
	}
	return &claim, claimLive, nil
}
