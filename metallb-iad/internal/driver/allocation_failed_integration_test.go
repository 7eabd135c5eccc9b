package driver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// MetalLB's AllocationFailed reports: the driver sees them on its placeholders and reads them
// from its cache, not from the apiserver.

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
	failedAt, said, err := testDriver.allocationFailures(ctx, many, time.Now().Add(48*time.Hour), nil)
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
	attached.Annotations = map[string]string{metallb.AnnotationLoadBalancerIPs: ip, plan.AnnotationPinned: "true"}
	addr := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip)), Finalizers: []string{plan.Finalizer}},
		Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "k"}}
	v := &plan.AddressView{Addr: addr, IP: netip.MustParseAddr(ip), Attached: attached,
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
