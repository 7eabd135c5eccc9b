package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/claimcache"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
)

// The claim pass's writes, in their crash-safe order: the finalizer, binds guarded by the
// address's resourceVersion, uid completion, surplus unbinds, the stamp, and the status; and
// bindMemory, what this process bound until its cache shows it.

// bindMemory remembers, per claim, the addresses this controller bound to it until the cache
// lists them for the claim (any pass of the claim looks), or a refresh finds them gone or bound
// elsewhere: a refresh reads them although the cache does not list them yet. An entry lives from
// a bind to the claim's next pass (the bind's own event brings one), so the memory holds the
// binds in flight; a claim that goes forgets its own. An entry does not expire on a clock (a
// freshness.Memory without a TTL, docs/design.md#the-freshness-kit): a cache more than a TTL
// behind must still not hide a bind from a pass that writes from it.
type bindMemory struct {
	mem freshness.Memory[types.NamespacedName, []string]
}

func newBindMemory() *bindMemory {
	return &bindMemory{mem: freshness.Memory[types.NamespacedName, []string]{}}
}

func (b *bindMemory) bound(claim types.NamespacedName, address string, now time.Time) {
	b.mem.Update(claim, now, func(names []string, _ bool) ([]string, bool) {
		if !slices.Contains(names, address) {
			names = append(slices.Clone(names), address)
		}
		return names, true
	})
}

func (b *bindMemory) of(claim types.NamespacedName, now time.Time) []string {
	names, _ := b.mem.Get(claim, now)
	return slices.Clone(names)
}

// observed drops the addresses the cache lists for the claim.
func (b *bindMemory) observed(claim types.NamespacedName, cached []ipamv1.IPAddress, now time.Time) {
	b.drop(claim, now, func(n string) bool {
		return slices.ContainsFunc(cached, func(a ipamv1.IPAddress) bool { return a.Name == n })
	})
}

// gone drops an address the apiserver shows gone or no longer naming the claim.
func (b *bindMemory) gone(claim types.NamespacedName, address string, now time.Time) {
	b.drop(claim, now, func(n string) bool { return n == address })
}

func (b *bindMemory) forget(claim types.NamespacedName) { b.mem.Delete(claim) }

// drop removes the claim's addresses del picks, and the claim's entry once it is empty.
func (b *bindMemory) drop(claim types.NamespacedName, now time.Time, del func(string) bool) {
	b.mem.Update(claim, now, func(names []string, ok bool) ([]string, bool) {
		names = slices.DeleteFunc(slices.Clone(names), del)
		return names, len(names) > 0
	})
}

func (r *ClaimReconciler) bindMemory() *bindMemory {
	r.memOnce.Do(r.initMemory)
	return r.binds
}

// apply makes the writes of a pass, in a crash-safe order: the claim's finalizer (with the
// provisioner annotation, one patch), the binds, the addresses' claimRefs, then the status.
// Every write is guarded by the resourceVersion it was decided on.
func (r *ClaimReconciler) apply(ctx context.Context, claim *ipamv1.IPAddressClaim, p claimPass) (reconcile.Result, error) {
	if p.finalizer || p.stamp != "" || p.unstamp {
		if err := r.untrimmed(ctx, claim); err != nil {
			return reconcile.Result{}, err
		}
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(claim, ipamv1.FinalizerClaim)
		if p.stamp != "" {
			metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationProvisioner, p.stamp)
			metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationResolvedClass, p.stampClass)
		}
		if p.unstamp {
			delete(claim.Annotations, ipamv1.AnnotationProvisioner)
			delete(claim.Annotations, ipamv1.AnnotationResolvedClass)
		}
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return reconcile.Result{}, err
		}
		r.ownWrites().Wrote(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, r.now())
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

// untrimmed replaces a cached claim that leaves others' finalizers out (claimcache.Trimmed) with
// the apiserver's copy, so that a patch of its finalizer list keeps them; a copy that changed
// since the pass read it is a conflict, and the pass decides again.
func (r *ClaimReconciler) untrimmed(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	if !claimcache.Trimmed(claim) {
		return nil
	}
	var fresh ipamv1.IPAddressClaim
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(claim), &fresh); err != nil {
		return err
	}
	if fresh.ResourceVersion != claim.ResourceVersion {
		return apierrors.NewConflict(ipamv1.GroupVersion.WithResource("ipaddressclaims").GroupResource(), claim.Name,
			errors.New("the claim changed since the pass read it"))
	}
	*claim = fresh
	return nil
}

// raceRetry is how soon a pass that lost a race for an address decides again.
const raceRetry = 50 * time.Millisecond

// mayBind: a claim takes new addresses only until it is first Bound.
func mayBind(claim *ipamv1.IPAddressClaim) bool {
	return claim.Status.Phase != ipamv1.ClaimBound && claim.Status.Phase != ipamv1.ClaimLost
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
	r.bindMemory().bound(client.ObjectKeyFromObject(claim), a.Name, r.now())
	r.ownWrites().Wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
	return a, nil
}

func (r *ClaimReconciler) completeUID(ctx context.Context, claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) error {
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	a.Spec.ClaimRef.UID = claim.UID
	if err := r.Client.Patch(ctx, a, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.ownWrites().Wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
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
	r.ownWrites().Wrote(addressWriteKey(a.Name), a.ResourceVersion, r.now())
	r.Recorder.Eventf(claim, a, corev1.EventTypeNormal, "SurplusAddressReleased", "Unbind",
		"IPAddress %s (%s) was a second address for one family; made it Available again", a.Name, a.Spec.Address)
	return nil
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
	r.ownWrites().Wrote(claimWriteKey(claim.Namespace, claim.Name), claim.ResourceVersion, r.now())
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
