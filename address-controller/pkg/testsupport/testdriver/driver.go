// Package testdriver is an in-memory address driver that keeps the core's driver contract: it
// accepts the classes naming it, provisions addresses for the claims the core stamps with its
// name, from a range it is given, pre-bound to the claim, and tears them down through its own
// finalizer. The core's tests run against it; a real driver's tests can run the same scenarios.
//
// A class parameter "accept: false" makes the driver refuse the class (Accepted=False, reason
// Refused), for tests of refused classes.
package testdriver

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
)

// Driver provisions addresses from fixed prefixes.
type Driver struct {
	// Name is the provisioner name classes use.
	Name string
	// IPv4 and IPv6 are the ranges addresses are taken from.
	IPv4, IPv6 netip.Prefix
	// RegisterIndexes registers the shared field indexes (when the driver has a manager of its
	// own, as a real driver does).
	RegisterIndexes bool

	client client.Client
	mu     sync.Mutex
	// provisioned counts the addresses created, for tests.
	provisioned int
	// inFlight expects, per claim uid and family, the address the driver last created, so a pass
	// that runs before the cache shows the new address does not create a second one
	// (docs/design.md#the-freshness-kit).
	inFlight *freshness.Expectations[string, struct{}]
}

// inFlightFor is how long a created address is awaited in the cache.
const inFlightFor = 10 * time.Second

// Finalizer is the driver's teardown finalizer on the addresses it creates.
func (d *Driver) Finalizer() string { return "teardown." + d.Name }

// Provisioned returns how many addresses the driver created.
func (d *Driver) Provisioned() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.provisioned
}

// SetupWithManager registers the driver's three controllers.
func (d *Driver) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	d.client = mgr.GetClient()
	d.inFlight = freshness.NewExpectations[string, struct{}](inFlightFor)
	if d.RegisterIndexes {
		if err := index.Setup(ctx, mgr); err != nil {
			return err
		}
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("testdriver-class").
		For(&ipamv1.IPAddressClass{}).Complete(reconcile.Func(d.reconcileClass)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("testdriver-claim").
		For(&ipamv1.IPAddressClaim{}).
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(driverkit.ClaimOfAddress)).
		// A class that becomes Accepted releases the claims waiting for it.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(driverkit.ClaimsWaitingForClass(d.client))).
		Complete(reconcile.Func(d.reconcileClaim)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("testdriver-address").
		For(&ipamv1.IPAddress{}).Complete(reconcile.Func(d.reconcileAddress))
}

func (d *Driver) reconcileClass(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	_, err := driverkit.AcceptClass(ctx, d.client, req.Name, d.Name, func(class *ipamv1.IPAddressClass) (metav1.Condition, error) {
		switch {
		case class.DeletionTimestamp != nil:
			return metav1.Condition{Status: metav1.ConditionFalse, Reason: driverkit.ReasonClassDeleting, Message: "the class is being deleted"}, nil
		case class.Spec.Parameters["accept"] == "false":
			return metav1.Condition{Status: metav1.ConditionFalse, Reason: "Refused", Message: "parameter accept is false"}, nil
		}
		return metav1.Condition{Status: metav1.ConditionTrue, Reason: driverkit.ReasonAccepted,
			Message: "the test driver provisions from " + d.IPv4.String() + " and " + d.IPv6.String()}, nil
	})
	return reconcile.Result{}, err
}

func (d *Driver) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamv1.IPAddressClaim
	if err := d.client.Get(ctx, req.NamespacedName, &claim); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !driverkit.NeedsProvisioning(&claim, d.Name) {
		return reconcile.Result{}, nil
	}
	class, err := driverkit.ClassOfClaim(ctx, d.client, &claim)
	if err != nil || !driverkit.ClassProvisions(class, d.Name) {
		return reconcile.Result{}, err
	}
	var bound ipamv1.IPAddressList
	if err := d.client.List(ctx, &bound, client.MatchingFields{index.AddressByClaim: index.ClaimKey(claim.Namespace, claim.Name)}); err != nil {
		return reconcile.Result{}, err
	}
	have := driverkit.FamiliesPresent(&claim, bound.Items)
	for _, fam := range claim.Spec.Family.Families() {
		key := string(claim.UID) + "/" + string(fam)
		if have[fam] {
			d.inFlight.Observed(key)
			continue
		}
		if _, ok := d.inFlight.Pending(key, time.Now()); ok {
			// The address exists but the cache has not shown it yet: wait for its event.
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		if err := d.provision(ctx, &claim, class, fam); err != nil {
			return reconcile.Result{}, err
		}
		d.inFlight.Expect(key, struct{}{}, time.Now())
	}
	return reconcile.Result{}, nil
}

// provision creates an IPAddress for the first free IP of the family's prefix. The object's name
// is the lock: a Create that finds the name taken moves on to the next IP.
func (d *Driver) provision(ctx context.Context, claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass, fam ipamv1.IPFamily) error {
	prefix := d.IPv4
	if fam == ipamv1.IPv6 {
		prefix = d.IPv6
	}
	for ip := prefix.Masked().Addr(); prefix.Contains(ip); ip = ip.Next() {
		name := ipamv1.AddressName(ip)
		var existing ipamv1.IPAddress
		if err := d.client.Get(ctx, types.NamespacedName{Name: name}, &existing); err == nil {
			continue
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		err := d.client.Create(ctx, driverkit.MarkAutoClaim(driverkit.PreBoundAddress(ip, class, claim, d.Finalizer()), claim))
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err == nil {
			d.mu.Lock()
			d.provisioned++
			d.mu.Unlock()
		}
		return err
	}
	return fmt.Errorf("range %s of driver %s is exhausted", prefix, d.Name)
}

func (d *Driver) reconcileAddress(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var a ipamv1.IPAddress
	if err := d.client.Get(ctx, req.NamespacedName, &a); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !driverkit.TeardownMayStart(&a) {
		return reconcile.Result{}, nil
	}
	// Teardown, once the core let go: nothing to release in memory; a real driver frees the IP
	// here, before its finalizer goes.
	_, err := driverkit.RemoveFinalizer(ctx, d.client, &a, d.Finalizer())
	return reconcile.Result{}, err
}
