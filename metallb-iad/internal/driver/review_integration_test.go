package driver

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Each test here reproduces a finding of the review of issue 10 on a real apiserver; each failed
// on the driver before its fix.

// quiet waits until the driver has made no write for d (its passes settled).
func quiet(t *testing.T, d time.Duration) {
	t.Helper()
	last, since := writesSnapshot(), time.Now()
	eventually(t, "the driver to settle", func() (bool, error) {
		now := writesSnapshot()
		for k, v := range now {
			if last[k] != v {
				last, since = now, time.Now()
				return false, nil
			}
		}
		return time.Since(since) >= d, nil
	})
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

// Finding 3: the unpin's ingress-clearing status patch is made against the Service as it was
// read: an ingress MetalLB wrote since (here a new IP) is never cleared blindly.
func TestUnpinDoesNotClearAnIngressWrittenSince(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, "unpinlock")
	const old, fresh = "198.51.100.193", "198.51.100.194"
	svc := tenantService(ns, "web", nil)
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	setIngress := func(ip string) *corev1.Service {
		t.Helper()
		var s corev1.Service
		eventually(t, "the Service's status to be written", func() (bool, error) {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
				return false, err
			}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			return admin.Status().Update(ctx, &s) == nil, nil
		})
		return &s
	}
	// The driver's view: the Service it unpinned a moment ago, still showing the old IP and its
	// record of releasing it.
	stale := setIngress(old).DeepCopy()
	stale.Annotations = map[string]string{plan.AnnotationReleasing: old}
	// MetalLB assigns a new IP meanwhile.
	setIngress(fresh)
	err := testDriver.unpin(ctx, stale, false)
	t.Logf("unpin on the stale view: %v", err)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if got := ingress(&s); len(got) != 1 || got[0] != fresh {
		t.Fatalf("the unpin cleared an ingress MetalLB wrote after the driver's read: %v", got)
	}
}

// seriesCount is how many times an event was said: once, or its series' count.
func seriesCount(evs []eventsv1.Event) int {
	n := 0
	for _, e := range evs {
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}

// Finding 5: a Conflict that resolved and comes back is announced again (the say-once memory
// is cleared when it resolves), on the address and on the wrongful Service.
func TestRecurringConflictIsAnnouncedAgain(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "again2", "198.51.100.144/28")
	startFakeMetalLB(t, "again2", netip.MustParsePrefix("198.51.100.144/28"))
	ns := newNamespace(t, "again2")
	const ip = "198.51.100.145"
	_, addr := boundClaimWithAddress(t, ns, "c", "again2", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	// An admin's pin of the reserved IP: a Service that requests it (one that requests
	// nothing is cleared instead, TestStaleIngressOfAServiceThatRequestsNothingIsCleared).
	thief := tenantService(ns, "thief", map[string]string{metallb.AnnotationLoadBalancerIPs: ip})
	if err := admin.Create(ctx, thief); err != nil {
		t.Fatal(err)
	}
	setIngress := func(ips ...string) {
		t.Helper()
		eventually(t, "the thief's status to be written", func() (bool, error) {
			var s corev1.Service
			if err := admin.Get(ctx, client.ObjectKeyFromObject(thief), &s); err != nil {
				return false, err
			}
			s.Status.LoadBalancer.Ingress = nil
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
			return admin.Status().Update(ctx, &s) == nil, nil
		})
	}
	conflict := func(want bool) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
			return c != nil && (c.Status == metav1.ConditionTrue) == want, err
		}
	}
	said := func(n int) func() (bool, error) {
		return func() (bool, error) {
			onAddr := seriesCount(driverEvents(t, "default", string(addr.UID), ipamv1.ConditionConflict))
			onSvc := seriesCount(driverEvents(t, ns, string(thief.UID), plan.ReasonServiceConflict))
			return onAddr >= n && onSvc >= n, nil
		}
	}
	setIngress(ip)
	eventually(t, "Conflict", conflict(true))
	eventually(t, "the conflict announced once", said(1))
	setIngress()
	eventually(t, "the Conflict to resolve", conflict(false))
	setIngress(ip)
	eventually(t, "Conflict again", conflict(true))
	eventually(t, "the recurrence announced again on the address and on the Service", said(2))
}

// Finding 12 (attach): attaching a Service to a Bound claim takes at most 3 driver writes
// (AttachedTo with Held, the hold's deletion, the pin), none refused.
func TestAttachWriteBudget(t *testing.T) {
	needAPIServer(t)
	newPoolClass(t, "budget", "198.51.100.160/28")
	startFakeMetalLB(t, "budget", netip.MustParsePrefix("198.51.100.160/28"))
	ns := newNamespace(t, "budget")
	const ip = "198.51.100.161"
	_, addr := boundClaimWithAddress(t, ns, "c", "budget", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	quiet(t, time.Second)
	before := writesSnapshot()
	attachedService(t, ns, "web", "c", ip)
	eventually(t, "the address to say Attached", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionHeld)
		return c != nil && c.Reason == plan.ReasonAttached, err
	})
	quiet(t, time.Second)
	total, refused := writesSince(t, "attach", before)
	if total > 3 {
		t.Errorf("the attach took %d driver writes, want at most 3", total)
	}
	if len(refused) > 0 {
		t.Errorf("the apiserver refused driver writes: %v", refused)
	}
	if !meta.IsStatusConditionTrue(getAddress(t, addr.Name).Status.Conditions, ipamv1.ConditionHeld) {
		t.Fatal("not Held after the attach")
	}
	_ = metallb.AnnotationLoadBalancerIPs
}

// Finding 7: an orphaned hold whose events the driver missed is swept by the periodic sweep
// (here the sweep on an address's events is turned off, as if they had been lost).
func TestPeriodicSweepEndsAMissedOrphan(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	testDriver.eventSweepOff.Store(true)
	t.Cleanup(func() { testDriver.eventSweepOff.Store(false) })
	ip := netip.MustParseAddr("198.51.100.251")
	orphan := plan.HoldService(testDriverNS, ipamv1.AddressName(ip), ip, "nowhere")
	if err := admin.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the periodic sweep to delete the orphaned hold", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Service{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}

// Finding 1: attaching while the driver's cache of addresses lags its Services (the address's
// pass sees the hold deleted before it sees AttachedTo): no hold is made again for the attached
// address, and no Conflict is raised against the Service that now serves it.
func TestAttachUnderAddressLagMakesNoHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "alag", "198.51.100.176/28")
	startFakeMetalLB(t, "alag", netip.MustParsePrefix("198.51.100.176/28"))
	ns := newNamespace(t, "alag")
	const ip = "198.51.100.177"
	_, addr := boundClaimWithAddress(t, ns, "c", "alag", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	var first corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr.Name)}, &first); err != nil {
		t.Fatal(err)
	}

	w, err := kubeWatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var remade atomic.Int32
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added && s.Name == plan.HoldName(addr.Name) && s.UID != first.UID {
				remade.Add(1)
			}
		}
	}()
	withWatchLagOn(t, "ipaddresses", 300*time.Millisecond)
	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, "web", ip)
	consistently(t, 3*time.Second, "no new hold and no Conflict while attached", func() (bool, error) {
		if remade.Load() > 0 {
			return false, nil // a hold made again for an attached address
		}
		c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
		return c == nil || c.Status != metav1.ConditionTrue, err
	})
}

// Finding 12 (nudges): the driver finds MetalLB's AllocationFailed report on a placeholder (a
// core Event, as MetalLB's recorder writes it), and nothing for another placeholder.
func TestAllocationFailedIsSeen(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	refused, waiting, at := refusedPlaceholders(t, "seen")
	eventuallyWithin(t, 10*time.Second, "the driver to see MetalLB's report", func() (bool, error) {
		got, _, err := testDriver.lastAllocationFailed(ctx, refused)
		return got.Equal(at.Time), err
	})
	got, _, err := testDriver.lastAllocationFailed(ctx, waiting)
	if err != nil || !got.IsZero() {
		t.Fatalf("waiting placeholder: %v, %v; want none", got, err)
	}
}

// refusedPlaceholders makes two Services in the driver's namespace, with MetalLB's
// AllocationFailed report (and an IPAllocated one, which never counts) on the first.
func refusedPlaceholders(t *testing.T, name string) (refused, waiting *corev1.Service, at metav1.Time) {
	t.Helper()
	ctx := context.Background()
	// ClusterIP Services: what the driver reads here is only their Events, and no reconciler
	// of the driver acts on them.
	clusterIP := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	}
	refused, waiting = clusterIP(name+"-refused"), clusterIP(name+"-waiting")
	for _, s := range []*corev1.Service{refused, waiting} {
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), s) })
	}
	at = metav1.NewTime(time.Now().Truncate(time.Second))
	for _, reason := range []string{"AllocationFailed", "IPAllocated"} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, GenerateName: "metallb-"},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: testDriverNS, Name: refused.Name, UID: refused.UID},
			Reason:         reason, Message: "Failed to allocate IP", Type: corev1.EventTypeWarning,
			FirstTimestamp: at, LastTimestamp: at, Count: 1, Source: corev1.EventSource{Component: "metallb-controller"}}
		if reason != "AllocationFailed" {
			ev.LastTimestamp = metav1.NewTime(at.Add(time.Hour)) // another reason never counts
		}
		if err := admin.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), ev) })
	}
	return refused, waiting, at
}

// Measured at 10,000 claims (bench-e2e -fresh): every pass over a claim or an address whose
// placeholder waited for MetalLB listed the Events of the driver's namespace from the apiserver,
// which filters all of them (MetalLB records one per placeholder it serves): the apiserver's
// cost per pass grew with the number of placeholders, the driver's claim passes took 82 ms, and
// claims waited minutes in its queue. MetalLB's reports are read from the driver's cache, which
// holds only the AllocationFailed Events of its namespace: looking at many placeholders reads
// none from the apiserver.
func TestAllocationFailedIsReadFromTheCache(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	refused, waiting, at := refusedPlaceholders(t, "cached")
	eventuallyWithin(t, 10*time.Second, "the driver to see MetalLB's report", func() (bool, error) {
		got, _, err := testDriver.lastAllocationFailed(ctx, refused)
		return got.Equal(at.Time), err
	})
	var many []*corev1.Service
	for range 50 {
		many = append(many, refused, waiting)
	}
	before := eventReads.Load()
	// Long after both were last touched: each may be nudged, so each report is looked up.
	failedAt, said, err := testDriver.allocationFailures(ctx, many, time.Now().Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !failedAt[refused.UID].Equal(at.Time) || !failedAt[waiting.UID].IsZero() || said[string(refused.UID)] == "" {
		t.Fatalf("reports: %v, %v", failedAt, said)
	}
	if n := eventReads.Load() - before; n != 0 {
		t.Fatalf("looking at %d placeholders read Events from the apiserver %d times, want none (the cache)", len(many), n)
	}
	// The cache holds MetalLB's AllocationFailed reports and nothing else (not the IPAllocated
	// report beside it: at 10,000 Services that would be 10,000 Events more); in a tenant's
	// namespace too, where a report on an attached Service is read from it without a request
	// to the apiserver (listing them uncached cost the apiserver 0.28 s a look during an attach
	// of 10,000 Services).
	tenant := newNamespace(t, "events-elsewhere")
	web := tenantService(tenant, "web", nil)
	if err := admin.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{ReasonAllocationFailed, "IPAllocated"} {
		if err := admin.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, GenerateName: "metallb-"},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: tenant, Name: "web", UID: web.UID},
			Reason:         reason, Message: "Failed to allocate IP for " + reason, Type: corev1.EventTypeWarning, Count: 1,
			FirstTimestamp: at, LastTimestamp: at}); err != nil {
			t.Fatal(err)
		}
	}
	before = eventReads.Load()
	eventuallyWithin(t, 10*time.Second, "the driver to see MetalLB's report on the tenant's Service", func() (bool, error) {
		_, msg, err := testDriver.lastAllocationFailed(ctx, web)
		return msg == "Failed to allocate IP for "+ReasonAllocationFailed, err
	})
	if n := eventReads.Load() - before; n != 0 {
		t.Fatalf("reading MetalLB's report on a tenant's Service read Events from the apiserver %d times, want none (the cache)", n)
	}
	// The address pass's look at an attached Service that has waited unserved past
	// keptCheckAfter (the path that listed Events 20,582 times) reads it from the cache too.
	const ip = "198.51.100.250"
	attached := web.DeepCopy()
	attached.Annotations = map[string]string{}
	v := &plan.AddressView{Addr: testAddress(ip, plan.Finalizer), IP: netip.MustParseAddr(ip), Attached: pinned(attached, ip),
		Now: time.Now(), Unserved: plan.UnservedWait{Since: time.Now().Add(-2 * keptCheckAfter), UID: web.UID}}
	before = eventReads.Load()
	if err := testDriver.keptBy(ctx, v); err != nil {
		t.Fatal(err)
	}
	if n := eventReads.Load() - before; n != 0 || !v.Reported {
		t.Fatalf("the pass's look at the attached Service read Events from the apiserver %d times (want none), reported %v (want true)", n, v.Reported)
	}
	testDriver.memory.Forget(v.Addr.Name)
	var cached corev1.EventList
	if err := testDriver.client.List(ctx, &cached); err != nil {
		t.Fatal(err)
	}
	for _, e := range cached.Items {
		if e.Reason != ReasonAllocationFailed {
			t.Errorf("the driver caches the Event %s/%s (reason %s)", e.Namespace, e.Name, e.Reason)
		}
	}
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
	quiet(t, time.Second)
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
	quiet(t, time.Second)
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
