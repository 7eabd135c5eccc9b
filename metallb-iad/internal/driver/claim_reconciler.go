package driver

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

func (d *Driver) setupClaims(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-claim").
		For(&ipamv1.IPAddressClaim{}).
		// A provisioning placeholder that MetalLB served wakes its claim.
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(d.claimOfPlaceholder)).
		// An address created or bound for the claim settles it.
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(driverkit.ClaimOfAddress)).
		// A class that becomes Accepted releases the claims waiting for it.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(driverkit.ClaimsWaitingForClass(d.client)),
			builder.WithPredicates(ownClass(), classChanged())).
		// The periodic sweep brings back the claims that still have provisioning placeholders.
		WatchesRawSource(source.Channel(d.wakeClaims, &handler.EnqueueRequestForObject{})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileClaim))
}

func (d *Driver) claimOfPlaceholder(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != d.Namespace || o.GetLabels()[plan.LabelRole] != plan.RoleProvisioning {
		return nil
	}
	ns, name, ok := splitKey(o.GetAnnotations()[plan.AnnotationClaim])
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// reconcileClaim: snapshot → PlanProvision → writes.
func (d *Driver) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	v, err := d.provisionSnapshot(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	p := plan.PlanProvision(v)
	// A placeholder whose delete was refused (it changed since the cache showed it) is decided
	// again once the cache shows the change: soon for a new one, backing off for one that stays
	// refused (never every second for good).
	refusedSince, err := d.applyProvisionPlan(ctx, v, p)
	if !refusedSince.IsZero() {
		p.Requeue = driverkit.Sooner(p.Requeue, driverkit.Recheck(refusedSince, v.Now, time.Second))
	}
	if errors.Is(err, errAddressExists) {
		return reconcile.Result{RequeueAfter: addressExistsRetry}, nil
	}
	return reconcile.Result{RequeueAfter: p.Requeue}, err
}
