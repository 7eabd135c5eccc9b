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
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
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
		// A namespace's labels decide which marked classes serve its Services (namespaceSelector,
		// servedNamespaces); a namespace the cache gets after its Services ends their wait.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.waitingServicesOf),
			builder.WithPredicates(predicate.Funcs{
				DeleteFunc:  func(event.DeleteEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			}, predicate.LabelChangedPredicate{})).
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
// mark, the core's stamp of when it took effect, its driver's acceptance, and a change of the
// namespaces a marked class serves (a namespace it refused may be served now).
func autoClaimTurnedOn() predicate.Predicate {
	marked := func(o client.Object) bool { return o.GetAnnotations()[ipamv1.AnnotationAutoClaimClass] == "true" }
	served := func(o client.Object) (*metav1.LabelSelector, *ipamv1.NamespaceSet) {
		if c, ok := o.(*ipamv1.IPAddressClass); ok {
			return c.Spec.NamespaceSelector, c.Status.ServedNamespaces
		}
		return nil, nil
	}
	accepted := func(o client.Object) bool {
		c, ok := o.(*ipamv1.IPAddressClass)
		return ok && autoclaim.Accepted(c)
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return marked(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			stamped := func(o client.Object) bool { return o.GetAnnotations()[ipamv1.AnnotationAutoClaimEnabledAt] != "" }
			oldSel, oldSet := served(e.ObjectOld)
			newSel, newSet := served(e.ObjectNew)
			widened := !equality.Semantic.DeepEqual(oldSel, newSel) || !equality.Semantic.DeepEqual(oldSet, newSet) ||
				accepted(e.ObjectOld) != accepted(e.ObjectNew)
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

// waitingServicesOf maps a namespace to its Services that auto-claim could serve and that have no
// claim of their name yet.
func (r *AutoClaimReconciler) waitingServicesOf(ctx context.Context, o client.Object) []reconcile.Request {
	var svcs corev1.ServiceList
	if err := r.Client.List(ctx, &svcs, client.InNamespace(o.GetName()), client.MatchingFields{indexServiceWaiting: ""},
		client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the Services auto-claim could serve", "namespace", o.GetName())
		return nil
	}
	if len(svcs.Items) == 0 {
		return nil
	}
	var claims ipamv1.IPAddressClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the claims of a namespace", "namespace", o.GetName())
		return nil
	}
	claimed := make(map[string]bool, len(claims.Items))
	for i := range claims.Items {
		claimed[claims.Items[i].Name] = true
	}
	var reqs []reconcile.Request
	for _, s := range svcs.Items {
		if !claimed[s.Name] {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
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
	className, class, wait, err := r.classFor(ctx, &svc)
	if err == nil && className == "" && wait == 0 && autoclaim.Parked(&svc) {
		// Parked by admission rules that read the classes and the namespace from the apiserver,
		// while this cache does not show yet the class that serves it: look again, backing off,
		// rather than wait on a class or namespace event alone.
		wait = recheckAfter(r.now().Sub(svc.CreationTimestamp.Time))
	}
	if err != nil || className == "" {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	if class == nil {
		// The class the Service names, when it exists (one that does not is the claim's to say).
		var named ipamv1.IPAddressClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: className}, &named); {
		case err == nil:
			if wait, refused, err := r.refusesNamespace(ctx, &svc, &named); refused || err != nil {
				return reconcile.Result{RequeueAfter: wait}, err
			}
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, err
		}
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

// refusesNamespace: the class the Service names does not serve the Service's namespace (its
// namespaceSelector, or the namespaces its driver reports its backend serves), and auto-claim
// makes no claim from it there: the claim could never bind. It says why, once, on the Service.
// A namespace missing from the cache (created just before the Service, not seen yet) is refused
// for now, and looked at again after wait, backing off.
func (r *AutoClaimReconciler) refusesNamespace(ctx context.Context, svc *corev1.Service, class *ipamv1.IPAddressClass) (time.Duration, bool, error) {
	if class.Spec.NamespaceSelector == nil && class.Status.ServedNamespaces == nil {
		r.announcer().Clear(svc, ipamv1.ReasonNamespaceNotAllowed)
		return 0, false, nil
	}
	nsLabels, wait, err := r.namespaceLabels(ctx, svc)
	if wait != 0 || err != nil {
		return wait, true, err
	}
	if why := namespaceRefusal(class, svc.Namespace, nsLabels); why != "" {
		r.announcer().Say(svc, nil, corev1.EventTypeWarning, ipamv1.ReasonNamespaceNotAllowed, "AutoClaim",
			"no claim is made for this Service: "+why)
		return 0, true, nil
	}
	r.announcer().Clear(svc, ipamv1.ReasonNamespaceNotAllowed)
	return 0, false, nil
}

// namespaceLabels reads the labels of the Service's namespace from the cache. A namespace the
// cache does not hold yet gives a wait (backing off with the Service's age): its labels are
// unknown, not empty, and its creation event brings a pass too (the Namespace watch).
func (r *AutoClaimReconciler) namespaceLabels(ctx context.Context, svc *corev1.Service) (map[string]string, time.Duration, error) {
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: svc.Namespace}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, recheckAfter(r.now().Sub(svc.CreationTimestamp.Time)), nil
		}
		return nil, 0, err
	}
	return ns.Labels, 0, nil
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
// (autoclaim.PickClass: the newest marked class that serves the Service's namespace, with a
// warning when several do), which it also returns. "" means auto-claim is off for the Service;
// wait, when set, is when to look again (the namespace's labels are not known yet).
func (r *AutoClaimReconciler) classFor(ctx context.Context, svc *corev1.Service) (string, *ipamv1.IPAddressClass, time.Duration, error) {
	if name := svc.Annotations[ipamv1.AnnotationServiceClass]; name != "" {
		return name, nil, 0, nil
	}
	var classes ipamv1.IPAddressClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return "", nil, 0, err
	}
	var nsLabels map[string]string
	if autoclaim.NeedsNamespaceLabels(classes.Items) {
		var wait time.Duration
		var err error
		if nsLabels, wait, err = r.namespaceLabels(ctx, svc); wait != 0 || err != nil {
			return "", nil, wait, err
		}
	}
	chosen, others := autoclaim.PickClass(classes.Items, svc.Namespace, nsLabels)
	if chosen == nil {
		return "", nil, 0, nil
	}
	if len(others) == 0 {
		// Resolved: a later recurrence is said again.
		r.announcer().Clear(svc, "MultipleAutoClaimClasses")
	} else {
		r.announcer().Say(svc, nil, corev1.EventTypeWarning, "MultipleAutoClaimClasses", "AutoClaim",
			fmt.Sprintf("several classes marked for auto-claim serve namespace %s (%s, %s); using %s, the newest. Unmark all but one, or restrict their namespaces.",
				svc.Namespace, chosen.Name, strings.Join(others, ", "), chosen.Name))
	}
	return chosen.Name, chosen.DeepCopy(), 0, nil
}
