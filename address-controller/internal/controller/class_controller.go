package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
)

// ClassReconciler protects a class while any address of it exists.
type ClassReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Workers  int
	Now      func() time.Time

	// announce reports ClassInUse when the set of holding addresses changes, not on every
	// pass.
	announce *driverkit.Announcer
	once     sync.Once
}

func (r *ClassReconciler) announcer() *driverkit.Announcer {
	r.once.Do(func() { r.announce = &driverkit.Announcer{Recorder: r.Recorder} })
	return r.announce
}

func (r *ClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ipaddressclass").
		For(&ipamv1.IPAddressClass{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, deletionPredicate(), autoClaimMarkChanged()))).
		// Only an address's arrival or departure matters to its class (className is immutable),
		// and only while the class is being deleted.
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.deletingClassOf),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		WithOptions(manager.ControllerOptions(r.Workers)).
		Complete(r)
}

func (r *ClassReconciler) deletingClassOf(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.(*ipamv1.IPAddress).Spec.ClassName
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &class); err != nil || class.DeletionTimestamp == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

func (r *ClassReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return quietConflict(r.reconcile(ctx, req))
}

func (r *ClassReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcer().Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if class.DeletionTimestamp == nil {
		m := decideClassMeta(&class, ipamv1.FinalizerClass, r.now())
		if !m.finalizer && m.enabledAt == "" && !m.clearEnabledAt {
			return reconcile.Result{}, nil
		}
		patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&class, ipamv1.FinalizerClass)
		if m.enabledAt != "" {
			metav1.SetMetaDataAnnotation(&class.ObjectMeta, ipamv1.AnnotationAutoClaimEnabledAt, m.enabledAt)
		}
		if m.clearEnabledAt {
			delete(class.Annotations, ipamv1.AnnotationAutoClaimEnabledAt)
		}
		return reconcile.Result{}, r.Client.Patch(ctx, &class, patch)
	}
	var addrs ipamv1.IPAddressList
	if err := r.Client.List(ctx, &addrs, client.MatchingFields{index.AddressByClass: class.Name}); err != nil {
		return reconcile.Result{}, err
	}
	if len(addrs.Items) == 0 {
		r.announcer().Forget(req.NamespacedName)
		return reconcile.Result{}, removeFinalizer(ctx, r.Client, &class, ipamv1.FinalizerClass)
	}
	names := make([]string, 0, len(addrs.Items))
	for _, a := range addrs.Items {
		names = append(names, a.Name)
	}
	summary := summarizeNames(names, 5)
	r.announcer().Say(&class, nil, corev1.EventTypeWarning, "ClassInUse", "Delete",
		fmt.Sprintf("deletion waits for %d IPAddress objects of this class: %s. Delete their claims and the remaining addresses first",
			len(names), summary))
	// The watch on addresses brings the next pass; this is a safety net against a missed event.
	return reconcile.Result{RequeueAfter: recheckAfter(time.Since(class.DeletionTimestamp.Time))}, nil
}

func (r *ClassReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// autoClaimMarkChanged passes class updates that change the auto-claim mark or the core's
// stamp of when it took effect.
func autoClaimMarkChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			for _, k := range []string{ipamv1.AnnotationAutoClaimClass, ipamv1.AnnotationAutoClaimEnabledAt} {
				if e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k] {
					return true
				}
			}
			return false
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
