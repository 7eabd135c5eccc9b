package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// These tests stage the findings of the second review of the core (issue 11): each failed on
// the code before its fix.

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

// An auto-claim's address is deleted when the claim goes, under Retain too, also when the claim
// vanishes without the core seeing it go (its finalizer removed by hand): the core marks the
// address while the claim lives.
func TestAddressOfAVanishedAutoClaimIsDeletedUnderRetain(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "ac-vanish", noDriver)
	a := newAddress(t, "203.0.113.97", "ac-vanish", nil)
	claim := newClaim(t, ns, "web", "ac-vanish", ipamv1.IPv4, autoClaimOf("web"))
	waitClaimPhase(t, ns, "web", ipamv1.ClaimBound)
	eventually(t, "the address to carry the auto-claim mark", func() (bool, error) {
		return markedAutoClaim(getAddress(t, a.Name)), nil
	})
	stopCore(t)
	c := getClaim(t, ns, "web")
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, ipamv1.FinalizerClaim)
	if err := admin.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	del(t, claim)
	waitGone(t, claim)
	restartCore(t)
	waitGone(t, a)
}

// An address a driver pre-binds to an auto-claim after the claim is gone (the driver copies
// the claim's mark, driverkit.MarkAutoClaim) is deleted, not Released, under Retain.
func TestLatePreBoundAddressOfAGoneAutoClaimIsDeleted(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "ac-late", noDriver)
	claim := newClaim(t, ns, "web", "ac-late", ipamv1.IPv4, autoClaimOf("web"))
	waitClaimReason(t, ns, "web", ipamv1.ReasonWaitingForAddress)
	del(t, claim)
	waitGone(t, claim)
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-203-0-113-98", Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}},
		Spec: ipamv1.IPAddressSpec{Address: "203.0.113.98", ClassName: "ac-late", ReclaimPolicy: ipamv1.ReclaimRetain,
			ClaimRef: &ipamv1.ClaimReference{Namespace: ns, Name: "web", UID: claim.UID}},
	}
	create(t, a)
	waitGone(t, a)
}

// Auto-claim creates a Service's claim once, also when a second pass runs before its cache
// shows the claim the first pass created.
func TestAutoClaimCreatesTheClaimOnce(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "ac-once", noDriver)
	svc := lbService(ns, "web", map[string]string{ipamv1.AnnotationServiceClass: "ac-once"})
	create(t, svc)
	stale := frozenClient(t) // shows the Service, and no claim
	r := &AutoClaimReconciler{Client: stale, Reader: liveClient(t), Recorder: events.NewFakeRecorder(100)}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)}
	since := time.Now()
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var creates []string
	for _, w := range auditedRecords(t, coreUser, since) {
		if w.Verb == "create" && w.Resource == "ipaddressclaims" && w.Namespace == ns {
			creates = append(creates, w.URI)
		}
	}
	if len(creates) != 1 {
		t.Fatalf("%d creates of the Service's claim, want 1:\n%s", len(creates), strings.Join(creates, "\n"))
	}
	if uid, err := claimOwner(t, ns, "web"); err != nil || uid != svc.UID {
		t.Fatalf("the claim's owner is %q (%v), want the Service %q", uid, err, svc.UID)
	}
}

// A new Service of the name of an old Service's auto-claim looks again on a schedule until the
// old claim goes: it does not take the old claim for its own (owner uids differ).
func TestAutoClaimOfAnOlderServiceIsWaitedOut(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "ac-older", noDriver)
	svc := lbService(ns, "web", map[string]string{ipamv1.AnnotationServiceClass: "ac-older"})
	create(t, svc)
	yes := true
	newClaim(t, ns, "web", "ac-older", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "true"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web",
			UID: "00000000-0000-0000-0000-0000000000bb", Controller: &yes}}
	})
	r := &AutoClaimReconciler{Client: frozenClient(t), Reader: liveClient(t), Recorder: events.NewFakeRecorder(100)}
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("a Service waiting for an older Service's claim to go looks again after %s, want within a minute", res.RequeueAfter)
	}
	// Its own claim: nothing to wait for.
	c := getClaim(t, ns, "web")
	patch := client.MergeFrom(c.DeepCopy())
	c.OwnerReferences[0].UID = svc.UID
	if err := admin.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	r.Client = frozenClient(t)
	if res, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)}); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("a Service with its own claim: %+v, %v", res, err)
	}
}

// When auto-claim was enabled is stored, not remembered: a Service created while the core was
// down, after the class was marked, that shows an address (won from an auto-assigning pool in
// the race before its claim) still gets a claim after the core restarts.
func TestAutoClaimEnabledAtSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "ac-restart", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	eventually(t, "the core to see the class", func() (bool, error) {
		c := &ipamv1.IPAddressClass{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cls), c); err != nil {
			return false, err
		}
		return controllerutil.ContainsFinalizer(c, ipamv1.FinalizerClass), nil
	})
	stopCore(t)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision: a later second
	svc := lbService(ns, "raced", nil)
	create(t, svc)
	t.Cleanup(func() { del(t, svc) })
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.249"}}
	if err := admin.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	restartCore(t)
	eventually(t, "a claim for the Service created after auto-claim was enabled", func() (bool, error) {
		uid, err := claimOwner(t, ns, "raced")
		return uid == svc.UID, client.IgnoreNotFound(err)
	})
}
