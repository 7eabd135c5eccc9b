package driver

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Re-linking a Service to another claim, and the claim or Service going: the Service ends with
// the new claim's addresses only, the old ones are held again, and no Conflict or Warning is said
// on the way (docs/design.md#attach-detach-and-re-link).

// Defects 4 and 5: re-linking a Service from claim A to claim B ends with B's address on the
// Service and A's held again, with no Conflict and no driver Warning on the way; detaching leaves
// no false Conflict either.
func TestRelinkAndDetachWithoutConflict(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "relink", "203.0.113.32/28")
	// MetalLB moves a Service to its new pin only after a while, as the real one does under load.
	startSlowFakeMetalLB(t, "relink", netip.MustParsePrefix("203.0.113.32/28"), 700*time.Millisecond)
	ns := newNamespace(t, "relink")
	const ipA, ipB = "203.0.113.33", "203.0.113.34"
	_, a := boundClaimWithAddress(t, ns, "a", "relink", ipA)
	_, b := boundClaimWithAddress(t, ns, "b", "relink", ipB)
	waitHeldByPlaceholder(t, a.Name, ipA)
	waitHeldByPlaceholder(t, b.Name, ipB)
	svc := attachedService(t, ns, "web", "a", ipA)

	noConflict := func() (bool, error) {
		for _, n := range []string{a.Name, b.Name} {
			c, err := addressCondition(n, ipamv1.ConditionConflict)
			if err != nil || (c != nil && c.Status == metav1.ConditionTrue) {
				return false, fmt.Errorf("%s: Conflict %+v (%v)", n, c, err)
			}
		}
		return true, nil
	}
	// From here the driver's cache of Services lags its own writes and the addresses' (the
	// skew of two informers on a loaded apiserver): decisions must rest on a view that
	// includes them.
	withWatchLagOn(t, "services", 150*time.Millisecond)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	s.Annotations[ipamv1.AnnotationServiceClaim] = "b"
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "no Conflict during the re-link", noConflict)
	waitServiceIngress(t, ns, "web", ipB)
	waitHeldByPlaceholder(t, a.Name, ipA)
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[metallb.AnnotationLoadBalancerIPs] != ipB || getAddress(t, b.Name).Status.AttachedTo == nil {
		t.Fatalf("not attached to B: %v / %+v", s.Annotations, getAddress(t, b.Name).Status.AttachedTo)
	}
	for _, e := range driverEvents(t, ns, string(s.UID), "") {
		if e.Type == corev1.EventTypeWarning {
			t.Fatalf("a driver Warning during the re-link: %s %s", e.Reason, e.Note)
		}
	}

	// Detach: the Service lets go of B; B is held again, never in Conflict.
	delete(s.Annotations, ipamv1.AnnotationServiceClaim)
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "no Conflict after the detach", noConflict)
	waitHeldByPlaceholder(t, b.Name, ipB)
	for _, e := range driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict) {
		t.Fatalf("a false conflict was reported on the detached Service: %s", e.Note)
	}
}

// Defect 11: a re-created Service of the same name takes the claim over without a ClaimInUse
// warning.
func TestRecreatedServiceTakesOver(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "again", "203.0.113.96/28")
	startFakeMetalLB(t, "again", netip.MustParsePrefix("203.0.113.96/28"))
	ns := newNamespace(t, "again")
	const ip = "203.0.113.97"
	_, addr := boundClaimWithAddress(t, ns, "c", "again", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	old := attachedService(t, ns, "web", "c", ip)
	if err := admin.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	fresh := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	eventually(t, "the new Service to be created", func() (bool, error) { return admin.Create(ctx, fresh) == nil, nil })
	waitServiceIngress(t, ns, "web", ip)
	eventually(t, "the address attached to the new Service", func() (bool, error) {
		at := getAddress(t, addr.Name).Status.AttachedTo
		return at != nil && at.UID == fresh.UID, nil
	})
	if evs := driverEvents(t, ns, string(fresh.UID), plan.ReasonClaimInUse); len(evs) > 0 {
		t.Fatalf("a spurious ClaimInUse on the re-created Service: %s", evs[0].Note)
	}
}

// Defect 8: an attached Service keeps its pin while its claim is Lost.
func TestLostClaimKeepsItsService(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "keep", "203.0.113.80/28")
	startFakeMetalLB(t, "keep", netip.MustParsePrefix("203.0.113.80/28"))
	ns := newNamespace(t, "keep")
	const ip = "203.0.113.81"
	claim, addr := boundClaimWithAddress(t, ns, "c", "keep", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	svc := attachedService(t, ns, "web", "c", ip)
	claim.Status.Phase = ipamv1.ClaimLost
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "the Service to keep its pin while the claim is Lost", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		a := getAddress(t, addr.Name)
		return s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip && a.Status.AttachedTo != nil, nil
	})
}

// relinkAway attaches a Service to claim a, puts claim b in phase, re-links the Service to b and
// checks that it keeps no pin and a is held again.
func relinkAway(t *testing.T, name string, phase ipamv1.ClaimPhase, prefix, ipA, ipB string) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, name, prefix)
	startFakeMetalLB(t, name, netip.MustParsePrefix(prefix))
	ns := newNamespace(t, name)
	_, a := boundClaimWithAddress(t, ns, "a", name, ipA)
	claimB, b := boundClaimWithAddress(t, ns, "b", name, ipB)
	waitHeldByPlaceholder(t, a.Name, ipA)
	waitHeldByPlaceholder(t, b.Name, ipB)
	claimB.Status.Phase = phase
	if err := admin.Status().Update(ctx, claimB); err != nil {
		t.Fatal(err)
	}
	svc := attachedService(t, ns, "web", "a", ipA)
	// Gone with the test: left naming a Pending claim, the Service would get the driver's
	// ClaimNotReady warning 15s after its creation, a write inside a later test's budget window.
	t.Cleanup(func() { _ = admin.Delete(context.Background(), svc) })

	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	s.Annotations[ipamv1.AnnotationServiceClaim] = "b"
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service to drop A's pin and A to be held again", func() (bool, error) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		if len(plan.PinIPs(&s)) != 0 || s.Annotations[plan.AnnotationPinned] != "" {
			return false, nil
		}
		at := getAddress(t, a.Name).Status.AttachedTo
		return at == nil, nil
	})
	waitHeldByPlaceholder(t, a.Name, ipA)
	if at := getAddress(t, b.Name).Status.AttachedTo; at != nil {
		t.Fatalf("the %s claim's address was attached: %+v", phase, at)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if got := ingress(&s); len(got) != 0 {
		t.Fatalf("the Service still shows %v", got)
	}
}

// Finding 2: a Service re-linked from claim A to a Lost claim B does not keep A's pin: it ends
// with B's addresses only (none: B is Lost and was not attached to it), and A is held again.
func TestRelinkToALostClaimDropsTheOldPin(t *testing.T) {
	relinkAway(t, "relost", ipamv1.ClaimLost, "198.51.100.128/28", "198.51.100.129", "198.51.100.130")
}

// Finding 9, decided: a Service re-linked to a claim not Bound yet lets A go the same way (its
// ingress is cleared): the design wants A held again at once (docs/design.md#holds,
// docs/design.md#attach-detach-and-re-link), which MetalLB allows only once the Service's ingress
// no longer shows A. The foreign address an auto-assigning pool may then give the Service is the
// "never a foreign address" defect's.
func TestRelinkToAPendingClaimHoldsTheOldAddress(t *testing.T) {
	relinkAway(t, "repend", ipamv1.ClaimPending, "198.51.100.224/28", "198.51.100.225", "198.51.100.226")
}

// Finding 8: when a claim goes while its Service is attached, the Service is unpinned once —
// by the Service reconciler — not again by the address's teardown: no write refused, no
// second unpin.
func TestClaimGoneUnpinsOnce(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "once", "198.51.100.208/28")
	startFakeMetalLB(t, "once", netip.MustParsePrefix("198.51.100.208/28"))
	ns := newNamespace(t, "once")
	const ip = "198.51.100.209"
	claim, addr := boundClaimWithAddress(t, ns, "c", "once", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	svc := attachedService(t, ns, "web", "c", ip)
	settled(t, ns)
	before := writesSnapshot()
	// The core's part when a claim with reclaim policy Delete goes: the claim is deleting, the
	// address is deleted and let go at once.
	claim.Finalizers = []string{ipamv1.FinalizerClaim}
	if err := admin.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, addr); err != nil {
		t.Fatal(err)
	}
	releaseByCore(t, addr.Name)
	eventually(t, "the address gone and the Service unpinned", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		err := admin.Get(ctx, client.ObjectKey{Name: addr.Name}, &ipamv1.IPAddress{})
		return len(plan.PinIPs(&s)) == 0 && client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	settled(t, ns)
	// Refused writes are logged, not failed on: one answered 404 races the address's own
	// deletion, and one answered 409 is the optimistic lock that keeps the Service reconciler and
	// the address reconciler from overwriting each other's AttachedTo — both are retried on a
	// fresh read. What must not happen twice is the unpin.
	if _, refused := writesSince(t, "claim gone", before); len(refused) > 0 {
		t.Logf("refused (and retried) driver writes: %v", refused)
	}
	if n := seriesCount(driverEvents(t, ns, string(svc.UID), plan.ReasonDetached)); n != 1 {
		t.Errorf("the Service was unpinned %d times, want once", n)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), claim); err == nil {
		claim.Finalizers = nil
		_ = admin.Update(ctx, claim)
	}
}
