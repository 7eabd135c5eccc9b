package driver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// MetalLB's report on a hold names a Service of another namespace that is gone: an intruder an
// admin has just deleted, whose deletion MetalLB handles moments later, serving the hold then.
// That is no reason to send an admin to restart MetalLB: the address says KeptByMetalLB only
// once the Service has stayed gone for KeptGrace, and stops saying it when the report names a
// Service that exists. (Before, it said so at the first pass that saw the report: a false
// Warning and two status writes for every ordinary conflict that ended.)
func TestAGoneServiceIsCalledKeptOnlyOnceItStaysGone(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "kept", "198.51.100.240/28")
	// No MetalLB: the hold is never served, as when MetalLB refuses it.
	const ip = "198.51.100.242"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	ns := newNamespace(t, "kept-intruder")
	boundClaimWithAddress(t, "tenant", "kept", "kept", ip)
	var hold corev1.Service
	eventually(t, "the hold", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(name)}, &hold)
		return err == nil, client.IgnoreNotFound(err)
	})
	// MetalLB's report on it, as its recorder writes it.
	at := metav1.Now()
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, GenerateName: "metallb-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: testDriverNS, Name: hold.Name, UID: hold.UID},
		Reason:         ReasonAllocationFailed, Type: corev1.EventTypeWarning, FirstTimestamp: at, LastTimestamp: at, Count: 1,
		Message: fmt.Sprintf("Failed to allocate IP for %q: [%q]: can't change sharing key for %q, address also in use by %s/intruder",
			testDriverNS+"/"+hold.Name, ip, testDriverNS+"/"+hold.Name, ns),
		Source: corev1.EventSource{Component: "metallb-controller"}}
	if err := admin.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ev) })
	touch := func() {
		t.Helper()
		eventually(t, "a touch of the hold", func() (bool, error) {
			var h corev1.Service
			if err := admin.Get(ctx, client.ObjectKeyFromObject(&hold), &h); err != nil {
				return false, err
			}
			if h.Annotations == nil {
				h.Annotations = map[string]string{}
			}
			h.Annotations["test/touched"] = time.Now().Format(time.RFC3339Nano)
			return true, admin.Update(ctx, &h)
		})
	}
	// A change of the hold brings the address's pass at once: touched once the report is in the
	// driver's cache.
	cached(t, ev)
	touch()
	held := func(reason string) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(name, ipamv1.ConditionHeld)
			return c != nil && c.Reason == reason, err
		}
	}
	consistently(t, plan.KeptGrace/3, "the address not to say KeptByMetalLB while the Service is only just gone", func() (bool, error) {
		ok, err := held(plan.ReasonKeptByMetalLB)()
		return !ok, err
	})
	eventuallyWithin(t, plan.KeptGrace+30*time.Second, "KeptByMetalLB once the Service stayed gone", held(plan.ReasonKeptByMetalLB))
	if c, _ := addressCondition(name, ipamv1.ConditionHeld); c == nil || !strings.Contains(c.Message, ns+"/intruder") || !strings.Contains(c.Message, "restart MetalLB's controller") {
		t.Fatalf("held %+v", c)
	}
	// The report names a Service that exists again: the address waits for MetalLB, as for any
	// conflict.
	if err := admin.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "intruder"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}); err != nil {
		t.Fatal(err)
	}
	touch()
	eventually(t, "WaitingForMetalLB once the Service exists", held(plan.ReasonWaitingForMetalLB))
}
