package driver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The provisioning window alone, on a clock of the test's.

func windowPool(rv string, available int64) *metallb.IPAddressPool {
	return &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: rv},
		Status: metallb.IPAddressPoolStatus{AssignedIPv4: 8 - available, AvailableIPv4: available}}
}

func windowPlaceholder(name, claim string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, Name: name,
		Labels:      map[string]string{plan.LabelRole: plan.RoleProvisioning, plan.LabelFamily: string(ipamv1.IPv4)},
		Annotations: map[string]string{metallb.AnnotationAddressPool: "p", plan.AnnotationClaim: claim}}}
}

// A standby replica's informers see every change of the pools and placeholders, but nothing
// takes its wakes (the forwarder runs on the leader only): it keeps none.
func TestStandbyWindowKeepsNoWakes(t *testing.T) {
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, time.Now)
	w.seePool(windowPool("1", 0), false)
	for i := range 100 {
		w.seeService(windowPlaceholder("ph", "t/c"), false)
		w.seePool(windowPool(string(rune('a'+i%26))+"x", int64(1+i%3)), false)
	}
	if len(w.wakes) != 0 || len(w.woken) != 0 {
		t.Fatalf("a standby window keeps %d wakes", len(w.wakes))
	}
}

// While forwarding, a claim woken many times before the forwarder takes it is kept once.
func TestWindowWakesAClaimOnce(t *testing.T) {
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, time.Now)
	w.forwarding = true
	w.seePool(windowPool("1", 0), false)
	w.seeService(windowPlaceholder("ph", "t/c"), false)
	for i := range 50 {
		w.seePool(windowPool(string(rune('a'+i%26))+"y", int64(1+i%3)), false)
	}
	if len(w.wakes) != 1 {
		t.Fatalf("%d wakes of one claim", len(w.wakes))
	}
}

// A slot granted to a create the cache never shows expires, and the oldest claim waiting for the
// pool is woken then, not at its next re-check; the claims waiting go oldest first, whatever
// order they queued in.
func TestExpiredSlotWakesTheOldestWaitingClaim(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, func() time.Time { return now })
	w.forwarding = true
	w.seePool(windowPool("1", 1), false)
	pf := poolFamily{pool: "p", fam: ipamv1.IPv4}
	if !w.grant(pf, "lost-create", types.NamespacedName{Namespace: "t", Name: "first"}, now, plan.PoolState{}) {
		t.Fatal("no slot on a pool with one free address")
	}
	younger := types.NamespacedName{Namespace: "t", Name: "younger"}
	older := types.NamespacedName{Namespace: "t", Name: "older"}
	w.waitFor(younger, now.Add(-time.Minute), pf)
	w.waitFor(older, now.Add(-time.Hour), pf)
	if len(w.wakes) != 0 {
		t.Fatalf("woken with the only slot taken: %v", w.wakes)
	}
	now = now.Add(2 * time.Minute)
	w.expire()
	if len(w.wakes) != 1 || w.wakes[0] != older {
		t.Fatalf("wakes after the slot expired: %v, want the older claim alone", w.wakes)
	}
}

// A slot goes to the oldest claim waiting for it: a claim that comes later, and whose first pass
// runs before the woken claim's, does not take it.
func TestFreeSlotGoesToTheOldestWaitingClaim(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, func() time.Time { return now })
	w.forwarding = true
	w.seePool(windowPool("1", 1), false)
	pf := poolFamily{pool: "p", fam: ipamv1.IPv4}
	w.seeService(windowPlaceholder("ph-first", "t/first"), false)
	older := types.NamespacedName{Namespace: "t", Name: "older"}
	w.waitFor(older, now.Add(-time.Hour), pf)
	// The first claim's placeholder is served: its slot frees, and the older claim is woken.
	served := windowPlaceholder("ph-first", "t/first")
	served.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	w.seeService(served, false)
	w.seePool(windowPool("2", 1), false)
	if len(w.wakes) != 1 || w.wakes[0] != older {
		t.Fatalf("wakes once the slot freed: %v, want the older claim", w.wakes)
	}
	// A new claim's first pass comes before the woken claim's.
	newer := types.NamespacedName{Namespace: "t", Name: "newer"}
	if w.grant(pf, "ph-newer", newer, now, plan.PoolState{}) {
		t.Fatal("a new claim took the slot the older waiting claim was woken for")
	}
	if !w.grant(pf, "ph-older", older, now.Add(-time.Hour), plan.PoolState{}) {
		t.Fatal("the older waiting claim found no slot")
	}
	// A woken claim whose pass never comes does not hold the slot for good.
	w.waitFor(newer, now, pf)
	w.seeService(windowPlaceholder("ph-older", "t/older"), false)
	served = windowPlaceholder("ph-older", "t/older")
	served.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.2"}}
	w.seeService(served, false)
	lost := types.NamespacedName{Namespace: "t", Name: "lost"}
	w.waitFor(lost, now.Add(-2*time.Hour), pf)
	if w.grant(pf, "ph-newer", newer, now, plan.PoolState{}) {
		t.Fatal("a new claim took the slot ahead of an older claim just woken")
	}
	now = now.Add(2 * time.Minute)
	if !w.grant(pf, "ph-newer", newer, now, plan.PoolState{}) {
		t.Fatal("an older claim woken long ago and never back holds the slot")
	}
}

// At start, the caches are synced before the window's handlers have been given what they hold:
// a placeholder that waits already may not have reached the window. The window grants no slot
// until its handlers have synced, and then wakes the claims it refused meanwhile.
func TestWindowGrantsNothingBeforeItsHandlersSynced(t *testing.T) {
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, time.Now)
	var synced atomic.Bool
	w.handlersSynced = synced.Load
	pf := poolFamily{pool: "p", fam: ipamv1.IPv4}
	claim := types.NamespacedName{Namespace: "t", Name: "c"}
	// One free address, and a placeholder asking for it that the handlers have not delivered.
	w.seePool(windowPool("1", 1), false)
	if w.grant(pf, "ph-c", claim, time.Now(), plan.PoolState{Free: 1}) {
		t.Fatal("a slot granted before the window's handlers synced")
	}
	w.seeService(windowPlaceholder("ph-other", "t/other"), false)
	// MetalLB counts a second free address meanwhile.
	w.seePool(windowPool("2", 2), false)
	if w.grant(pf, "ph-c", claim, time.Now(), plan.PoolState{Free: 2}) {
		t.Fatal("a slot granted before the window's handlers synced")
	}
	w.waitFor(claim, time.Now(), pf)
	to := make(chan ctrlevent.TypedGenericEvent[client.Object], 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.forward(ctx, to) }()
	select {
	case ev := <-to:
		t.Fatalf("%s woken before the window's handlers synced", client.ObjectKeyFromObject(ev.Object))
	case <-time.After(300 * time.Millisecond):
	}
	synced.Store(true)
	select {
	case ev := <-to:
		if got := client.ObjectKeyFromObject(ev.Object); got != claim {
			t.Fatalf("woke %s, want %s", got, claim)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting claim was not woken once the window's handlers synced")
	}
	if !w.grant(pf, "ph-c", claim, time.Now(), plan.PoolState{Free: 2}) {
		t.Fatal("the woken claim found no slot")
	}
	if w.grant(pf, "ph-d", types.NamespacedName{Namespace: "t", Name: "d"}, time.Now(), plan.PoolState{Free: 2}) {
		t.Fatal("a third placeholder granted on a pool with two free addresses")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A woken claim that never comes back does not hold the queue for good, even while the passes of
// other claims keep releasing slots (grant refused, then waitFor): it is woken once, and after
// expectFor a younger claim gets the slot.
func TestStaleWokenClaimYieldsItsSlot(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := newProvisioningWindow(testDriverNS, 32, time.Minute, func() time.Time { return now })
	w.forwarding = true
	w.seePool(windowPool("1", 1), false)
	pf := poolFamily{pool: "p", fam: ipamv1.IPv4}
	gone := types.NamespacedName{Namespace: "t", Name: "gone"}
	w.waitFor(gone, now.Add(-time.Hour), pf) // woken for the free slot; its pass never comes
	younger := types.NamespacedName{Namespace: "t", Name: "younger"}
	created := now.Add(-time.Minute)
	for i := range 30 {
		if w.grant(pf, "ph-younger", younger, created, plan.PoolState{}) {
			if now.Sub(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) < time.Minute {
				t.Fatalf("pass %d: the younger claim took the slot the older one was just woken for", i)
			}
			return
		}
		w.waitFor(younger, created, pf)
		now = now.Add(10 * time.Second)
	}
	t.Fatal("a claim woken long ago and never back still holds the slot after 5 minutes")
}
