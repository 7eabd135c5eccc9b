package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
)

// indexServiceWaiting keys a LoadBalancer Service that auto-claim could serve (no rule of what
// its author asked for skips it) under "": what a newly marked auto-claim class concerns.
const indexServiceWaiting = "ipam.serviceWaitingForAutoClaim"

// AutoClaimReconciler creates a claim for a LoadBalancer Service that names none, when an admin
// opted in: a class marked is-auto-claim-class, or the Service's ip-address-class annotation.
type AutoClaimReconciler struct {
	Client client.Client
	// Reader reads uncached: whether the claim exists, before creating it.
	Reader   client.Reader
	Recorder events.EventRecorder
	Workers  int
	Now      func() time.Time

	// announce says lasting warnings (the claim name is taken, several auto-claim classes)
	// once per Service, and forgets them with it.
	announce *driverkit.Announcer
	once     sync.Once
}

func (r *AutoClaimReconciler) announcer() *driverkit.Announcer {
	r.once.Do(func() { r.announce = &driverkit.Announcer{Recorder: r.Recorder} })
	return r.announce
}

func (r *AutoClaimReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, indexServiceWaiting, func(o client.Object) []string {
		if autoClaimSkipAsked(o.(*corev1.Service)) != "" {
			return nil
		}
		return []string{""}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("autoclaim").
		For(&corev1.Service{}).
		// A claim made for a Service (its controller owner) concerns the Service of that name:
		// when the claim of an earlier Service of the name goes, the new one gets its own.
		Owns(&ipamv1.IPAddressClaim{}, builder.WithPredicates(claimOwnershipChanged())).
		// Turning auto-claim on concerns the Services that could use it; other class updates
		// do not.
		Watches(&ipamv1.IPAddressClass{}, r.classMarked(), builder.WithPredicates(autoClaimTurnedOn())).
		WithOptions(manager.ControllerOptions(r.Workers)).
		Complete(r)
}

// claimOwnershipChanged passes a claim's creation and deletion, and updates that start its
// deletion or change its owners.
func claimOwnershipChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil) ||
				!ownersEqual(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences())
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func ownersEqual(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || (a[i].Controller == nil) != (b[i].Controller == nil) ||
			(a[i].Controller != nil && *a[i].Controller != *b[i].Controller) {
			return false
		}
	}
	return true
}

// autoClaimTurnedOn passes a class created with the auto-claim mark, an update that adds the
// mark, the core's stamp of when it took effect, and a change of the namespaces a marked class
// serves (a namespace it refused may be served now).
func autoClaimTurnedOn() predicate.Predicate {
	marked := func(o client.Object) bool { return o.GetAnnotations()[ipamv1.AnnotationAutoClaimClass] == "true" }
	served := func(o client.Object) (*metav1.LabelSelector, *ipamv1.NamespaceSet) {
		if c, ok := o.(*ipamv1.IPAddressClass); ok {
			return c.Spec.NamespaceSelector, c.Status.ServedNamespaces
		}
		return nil, nil
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return marked(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			stamped := func(o client.Object) bool { return o.GetAnnotations()[ipamv1.AnnotationAutoClaimEnabledAt] != "" }
			oldSel, oldSet := served(e.ObjectOld)
			newSel, newSet := served(e.ObjectNew)
			widened := !equality.Semantic.DeepEqual(oldSel, newSel) || !equality.Semantic.DeepEqual(oldSet, newSet)
			return marked(e.ObjectNew) && (!marked(e.ObjectOld) || !stamped(e.ObjectOld) && stamped(e.ObjectNew) || widened)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// classMarked enqueues the Services that could use a class that got the auto-claim mark, or
// the core's stamp of when the mark took effect.
func (r *AutoClaimReconciler) classMarked() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.waitingServices(ctx, nil) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
	}
}

// waitingServices maps a newly marked auto-claim class to the Services that auto-claim could
// serve (through the index).
func (r *AutoClaimReconciler) waitingServices(ctx context.Context, _ client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceWaiting: ""}); err != nil {
		log.FromContext(ctx).Error(err, "listing the Services auto-claim could serve")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(svcs.Items))
	for _, s := range svcs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}

func (r *AutoClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var svc corev1.Service
	if err := r.Client.Get(ctx, req.NamespacedName, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcer().Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if autoClaimSkipAsked(&svc) != "" {
		return reconcile.Result{}, nil
	}
	// The claim may exist already: made by auto-claim (for this Service; for an earlier
	// Service of the same name, going with it; or kept when an admin removed its owner
	// reference), or someone else's.
	var existing ipamv1.IPAddressClaim
	err := r.Client.Get(ctx, req.NamespacedName, &existing)
	if err == nil {
		return r.existingClaim(&svc, &existing), nil
	}
	if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	className, class, err := r.classFor(ctx, &svc)
	if err != nil || className == "" {
		return reconcile.Result{}, err
	}
	if class == nil {
		// The class the Service names, when it exists (one that does not is the claim's to say).
		var named ipamv1.IPAddressClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: className}, &named); {
		case err == nil:
			if refused, err := r.refusesNamespace(ctx, &svc, &named); refused || err != nil {
				return reconcile.Result{}, err
			}
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, err
		}
	} else if refused, err := r.refusesNamespace(ctx, &svc, class); refused || err != nil {
		return reconcile.Result{}, err
	}
	var enabled time.Time
	if class != nil {
		var ok bool
		if enabled, ok = autoClaimEnabledAt(class); !ok {
			// The class controller has yet to stamp when auto-claim took effect: its write
			// brings the next pass (autoClaimTurnedOn); until then, look again now and then,
			// backing off (a class whose stamp never comes must not cost a pass a second).
			return reconcile.Result{RequeueAfter: recheckAfter(r.now().Sub(class.CreationTimestamp.Time))}, nil
		}
	}
	if autoClaimSkip(&svc, enabled) != "" {
		return reconcile.Result{}, nil
	}
	// The cache may not show yet a claim an earlier pass created: ask the apiserver before creating
	// one (docs/design.md#a-view-that-includes-your-own-writes: never create twice what one write
	// already made).
	if err := r.Reader.Get(ctx, req.NamespacedName, &existing); err == nil {
		return r.existingClaim(&svc, &existing), nil
	} else if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	yes := true
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        svc.Name,
			Namespace:   svc.Namespace,
			Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: &yes,
			}},
		},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: className, Family: claimFamily(&svc)},
	}
	if err := r.Client.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made since the read above (by another replica, or by someone else): decide again
			// on what the apiserver has.
			if err := r.Reader.Get(ctx, req.NamespacedName, &existing); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			return r.existingClaim(&svc, &existing), nil
		}
		return reconcile.Result{}, err
	}
	// No event: the claim, owned by the Service, says it (docs/design.md#the-write-budget).
	return reconcile.Result{}, nil
}

// refusesNamespace: the class does not serve the Service's namespace (its namespaceSelector, or
// the namespaces its driver reports its backend serves), and auto-claim makes no claim from it
// there: the claim could never bind, and the Service, parked for it, would get no address at all.
// The auto-claim class simply does not apply to such a namespace (the Service is left to
// MetalLB, as with no auto-claim class); a class the Service names says why, once, on the
// Service.
func (r *AutoClaimReconciler) refusesNamespace(ctx context.Context, svc *corev1.Service, class *ipamv1.IPAddressClass) (bool, error) {
	if class.Spec.NamespaceSelector == nil && class.Status.ServedNamespaces == nil {
		r.announcer().Clear(svc, ipamv1.ReasonNamespaceNotAllowed)
		return false, nil
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: svc.Namespace}, &ns); client.IgnoreNotFound(err) != nil {
		return false, err
	}
	why := namespaceRefusal(class, svc.Namespace, ns.Labels)
	switch {
	case why == "":
		r.announcer().Clear(svc, ipamv1.ReasonNamespaceNotAllowed)
		return false, nil
	case svc.Annotations[ipamv1.AnnotationServiceClass] != "":
		r.announcer().Say(svc, nil, corev1.EventTypeWarning, ipamv1.ReasonNamespaceNotAllowed, "AutoClaim",
			"no claim is made for this Service: "+why)
	}
	return true, nil
}

// existingClaim handles a Service whose name a claim already has.
func (r *AutoClaimReconciler) existingClaim(svc *corev1.Service, existing *ipamv1.IPAddressClaim) reconcile.Result {
	if existing.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
		r.announcer().Say(svc, nil, corev1.EventTypeWarning, "ClaimNameTaken", "AutoClaim",
			fmt.Sprintf("IPAddressClaim %s/%s exists and was not made by auto-claim; it is left alone. Name it with %s to use it, or set %s: \"false\"",
				svc.Namespace, svc.Name, ipamv1.AnnotationServiceClaim, ipamv1.AnnotationAutoClaim))
		return reconcile.Result{}
	}
	r.announcer().Clear(svc, "ClaimNameTaken")
	owner := metav1.GetControllerOf(existing)
	if owner == nil || owner.UID == svc.UID {
		// This Service's claim, or one an admin kept by removing its owner reference.
		return reconcile.Result{}
	}
	// The claim of an earlier Service of this name, which the garbage collector deletes: its
	// deletion brings the next pass (the Owns watch); until then, look again now and then.
	return reconcile.Result{RequeueAfter: recheckAfter(r.now().Sub(svc.CreationTimestamp.Time))}
}

func (r *AutoClaimReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// classFor picks the Service's class: its ip-address-class annotation, else the auto-claim class
// (the newest when several are marked, with a warning), which it also returns. "" means
// auto-claim is off for the Service.
func (r *AutoClaimReconciler) classFor(ctx context.Context, svc *corev1.Service) (string, *ipamv1.IPAddressClass, error) {
	if name := svc.Annotations[ipamv1.AnnotationServiceClass]; name != "" {
		return name, nil, nil
	}
	var classes ipamv1.IPAddressClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return "", nil, err
	}
	chosen, others := pickMarkedClass(classes.Items, ipamv1.AnnotationAutoClaimClass)
	if chosen == nil {
		return "", nil, nil
	}
	if len(others) == 0 {
		// Resolved: a later recurrence is said again.
		r.announcer().Clear(svc, "MultipleAutoClaimClasses")
	} else {
		r.announcer().Say(svc, nil, corev1.EventTypeWarning, "MultipleAutoClaimClasses", "AutoClaim",
			fmt.Sprintf("several classes are marked for auto-claim (%s, %s); using %s, the newest. Unmark all but one.",
				chosen.Name, strings.Join(others, ", "), chosen.Name))
	}
	return chosen.Name, chosen.DeepCopy(), nil
}
