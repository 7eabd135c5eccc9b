package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// removeFinalizer removes a finalizer with a merge patch guarded by resourceVersion, so that
// the finalizers of others (the driver's) are never lost.
func removeFinalizer(ctx context.Context, c client.Client, o client.Object, finalizer string) error {
	if !controllerutil.ContainsFinalizer(o, finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, finalizer)
	return client.IgnoreNotFound(c.Patch(ctx, o, patch))
}

// deletionPredicate passes updates that start an object's deletion or change its finalizers.
func deletionPredicate() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil) ||
				!equality.Semantic.DeepEqual(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// equalClaimStatus compares two statuses field by field, condition transition times included:
// a pass that changes nothing leaves them equal because meta.SetStatusCondition keeps a
// condition's lastTransitionTime unless its status changes.
func equalClaimStatus(a, b *ipamv1.IPAddressClaimStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

// timesEqual compares optional timestamps at the second precision the API stores.
func timesEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Unix() == b.Unix()
}

// quietConflict turns a lost optimistic-concurrency race into a prompt retry instead of an
// error: the object changed under us, and the next pass reads the new version.
func quietConflict(res reconcile.Result, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}
	return res, err
}
