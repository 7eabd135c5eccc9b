package controller

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// indexServiceWaiting keys a LoadBalancer Service that auto-claim could still serve (no
// address, no claim named) under "": what a newly marked auto-claim class concerns.
const indexServiceWaiting = "ipam.serviceWaitingForAutoClaim"

// AutoClaimReconciler creates a claim for a LoadBalancer Service that names none, when an admin
// opted in: a class marked is-auto-claim-class, or the Service's ip-address-class annotation.
type AutoClaimReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Workers  int

	said warnings
}

func (r *AutoClaimReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, indexServiceWaiting, func(o client.Object) []string {
		if autoClaimSkip(o.(*corev1.Service)) != "" {
			return nil
		}
		return []string{""}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("autoclaim").
		For(&corev1.Service{}).
		// Marking a class for auto-claim concerns the Services still waiting for an address.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			if o.GetAnnotations()[ipamv1.AnnotationAutoClaimClass] != "true" {
				return nil
			}
			var svcs corev1.ServiceList
			if err := r.Client.List(ctx, &svcs, client.MatchingFields{indexServiceWaiting: ""}); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, 0, len(svcs.Items))
			for _, s := range svcs.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
			}
			return reqs
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

func (r *AutoClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var svc corev1.Service
	if err := r.Client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if autoClaimSkip(&svc) != "" {
		return reconcile.Result{}, nil
	}
	// The claim may exist already: made by auto-claim (for this Service, or kept from an
	// earlier one when an admin removed its owner reference), or someone else's.
	var existing ipamv1.IPAddressClaim
	err := r.Client.Get(ctx, req.NamespacedName, &existing)
	if err == nil {
		if existing.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
			r.said.warn(r.Recorder, &svc, "ClaimNameTaken",
				"IPAddressClaim %s/%s exists and was not made by auto-claim; it is left alone. Name it with %s to use it, or set %s: \"false\"",
				svc.Namespace, svc.Name, ipamv1.AnnotationServiceClaim, ipamv1.AnnotationAutoClaim)
		}
		return reconcile.Result{}, nil
	}
	if !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	class, err := r.classFor(ctx, &svc)
	if err != nil || class == "" {
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
		Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: claimFamily(&svc)},
	}
	if err := r.Client.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	r.Recorder.Eventf(&svc, claim, corev1.EventTypeNormal, "AutoClaimCreated", "AutoClaim",
		"created IPAddressClaim %s of class %s (%s); it is deleted with the Service, with its addresses", claim.Name, class, claim.Spec.Family)
	return reconcile.Result{}, nil
}

// classFor picks the Service's class: its ip-address-class annotation, else the auto-claim class
// (the newest when several are marked, with a warning). "" means auto-claim is off for it.
func (r *AutoClaimReconciler) classFor(ctx context.Context, svc *corev1.Service) (string, error) {
	if name := svc.Annotations[ipamv1.AnnotationServiceClass]; name != "" {
		return name, nil
	}
	var classes ipamv1.IPAddressClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return "", err
	}
	chosen, others := pickMarkedClass(classes.Items, ipamv1.AnnotationAutoClaimClass)
	if chosen == nil {
		return "", nil
	}
	if len(others) > 0 {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, "MultipleAutoClaimClasses", "AutoClaim",
			"several classes are marked for auto-claim (%s, %s); using %s, the newest. Unmark all but one.",
			chosen.Name, strings.Join(others, ", "), chosen.Name)
	}
	return chosen.Name, nil
}
