package driver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	if !w.grant(pf, "lost-create", plan.PoolState{}) {
		t.Fatal("no slot on a pool with one free address")
	}
	younger := types.NamespacedName{Namespace: "t", Name: "younger"}
	older := types.NamespacedName{Namespace: "t", Name: "older"}
	w.wait(pf, younger, now.Add(-time.Minute))
	w.wait(pf, older, now.Add(-time.Hour))
	if len(w.wakes) != 0 {
		t.Fatalf("woken with the only slot taken: %v", w.wakes)
	}
	now = now.Add(2 * time.Minute)
	w.expire()
	if len(w.wakes) != 1 || w.wakes[0] != older {
		t.Fatalf("wakes after the slot expired: %v, want the older claim alone", w.wakes)
	}
}
