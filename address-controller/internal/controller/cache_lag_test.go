package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The claim pass with an address cache that lags the claim cache: a Bound claim stays bound to
// the same address, and a lost bind race is decided again on the apiserver's view
// (docs/design.md#a-view-that-includes-your-own-writes).

// splitReader reads IPAddresses from one reader and everything else from another: informers
// of different kinds lag by different amounts.
type splitReader struct{ addresses, rest client.Reader }

func (s splitReader) pick(o runtime.Object) client.Reader {
	switch o.(type) {
	case *ipamv1.IPAddress, *ipamv1.IPAddressList:
		return s.addresses
	}
	return s.rest
}

func (s splitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return s.pick(obj).Get(ctx, key, obj, opts...)
}

func (s splitReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return s.pick(list).List(ctx, list, opts...)
}

// laggingAddresses is a client of the core's identity whose claims and classes come from a
// cache synced now and whose addresses come from stale.
func laggingAddresses(t *testing.T, stale client.Reader) client.Client {
	t.Helper()
	c, err := client.New(coreCfg, client.Options{Scheme: scheme,
		Cache: &client.CacheOptions{Reader: splitReader{addresses: stale, rest: frozenClient(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A Bound claim whose pass sees its address missing (the address informer lags the claim
// informer) stays Bound to the same address: a status change of a Bound claim is decided on
// the apiserver's view.
func TestBoundClaimStaysBoundWhenTheAddressCacheLags(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "lag", noDriver)
	beforeAddress := frozenClient(t)
	a := newAddress(t, "203.0.113.90", "lag", nil)
	newClaim(t, ns, "c", "lag", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
	})
	live := liveClient(t)
	m := NewMetrics(nil)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}
	if _, err := claimReconciler(frozenClient(t), live, m).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	bound := getClaim(t, ns, "c")
	if bound.Status.Phase != ipamv1.ClaimBound || len(bound.Status.Addresses) != 1 || bound.Status.Addresses[0].Name != a.Name {
		t.Fatalf("first pass: %+v", bound.Status)
	}
	// The claim is Bound in the cache; its address is not there yet.
	if _, err := claimReconciler(laggingAddresses(t, beforeAddress), live, m).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	c := getClaim(t, ns, "c")
	if c.Status.Phase != ipamv1.ClaimBound || !slices.Equal(c.Status.Addresses, bound.Status.Addresses) {
		t.Fatalf("a pass on a lagging address cache changed the Bound claim to %s %+v", c.Status.Phase, c.Status.Addresses)
	}
}

// A bind that loses the address to another claim between the read and the patch is decided
// again soon, on a newer view: it neither asks a driver (the provisioner annotation) nor writes
// a status from the lost race.
func TestLostBindRaceIsDecidedAgain(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "race-again", noDriver)
	a := newAddress(t, "203.0.113.96", "race-again", nil)
	newClaim(t, ns, "c", "race-again", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
	})
	stale := frozenClient(t) // shows the address Available
	// Another claim takes the address first.
	won := getAddress(t, a.Name)
	patch := client.MergeFrom(won.DeepCopy())
	won.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: ns, Name: "other"}
	if err := admin.Patch(ctx, won, patch); err != nil {
		t.Fatal(err)
	}
	res, err := claimReconciler(stale, liveClient(t), NewMetrics(nil)).Reconcile(ctx,
		reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	c := getClaim(t, ns, "c")
	if p := c.Annotations[ipamv1.AnnotationProvisioner]; p != "" {
		t.Errorf("a lost bind race asked driver %q to provision", p)
	}
	if c.Status.Phase != ipamv1.ClaimPending || len(c.Status.Conditions) > 0 {
		// Pending with nothing else is the CRD's default: no status was written.
		t.Errorf("a lost bind race wrote status %+v", c.Status)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("a lost bind race is decided again after %s, want soon", res.RequeueAfter)
	}
	if ref := getAddress(t, a.Name).Spec.ClaimRef; ref == nil || ref.Name != "other" {
		t.Errorf("the address's claimRef is %+v, want the winner's", ref)
	}
}
