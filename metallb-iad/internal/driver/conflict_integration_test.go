package driver

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Conflicts: a Service other than the attached one and the hold that shows a reserved IP is
// named on the address and warned about, once while it lasts and again when it recurs.

// Defect 11 (warnOnce) and issue 16: every new wrongful holder is announced, an external IP is a
// Conflict too, and the Conflict clears when they let go.
func TestConflictsAnnouncedAndCleared(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "clash", "203.0.113.112/28")
	startFakeMetalLB(t, "clash", netip.MustParsePrefix("203.0.113.112/28"))
	ns := newNamespace(t, "clash")
	const ip = "203.0.113.113"
	_, addr := boundClaimWithAddress(t, ns, "c", "clash", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	conflict := func(want ...string) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
			if len(want) == 0 {
				return c == nil || c.Status == metav1.ConditionFalse, err
			}
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, err
			}
			for _, w := range want {
				if !strings.Contains(c.Message, w) {
					return false, err
				}
			}
			return true, err
		}
	}
	// An admin Service that lists the reserved IP in spec.externalIPs.
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: corev1.ServiceSpec{ExternalIPs: []string{ip}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := admin.Create(ctx, ext); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Conflict naming the external-IP Service", conflict(ns+"/ext"))
	// A second wrongful Service (its status written as MetalLB would for a shared IP).
	// An admin's pin of the reserved IP: a Service that requests it (one that requests
	// nothing is cleared instead, TestStaleIngressOfAServiceThatRequestsNothingIsCleared).
	thief := tenantService(ns, "thief", map[string]string{metallb.AnnotationLoadBalancerIPs: ip})
	if err := admin.Create(ctx, thief); err != nil {
		t.Fatal(err)
	}
	thief.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if err := admin.Status().Update(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Conflict naming both", conflict(ns+"/ext", ns+"/thief"))
	eventually(t, "a Conflict warning naming the second Service", func() (bool, error) {
		for _, e := range driverEvents(t, "default", string(addr.UID), ipamv1.ConditionConflict) {
			if strings.Contains(e.Note, ns+"/thief") {
				return true, nil
			}
		}
		return false, nil
	})
	for _, s := range []*corev1.Service{ext, thief} {
		if len(driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict)) == 0 {
			t.Fatalf("no warning on %s", s.Name)
		}
	}
	ext.Spec.ExternalIPs = nil
	if err := admin.Update(ctx, ext); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Conflict to clear", conflict())
	if !meta.IsStatusConditionTrue(getAddress(t, addr.Name).Status.Conditions, ipamv1.ConditionHeld) {
		t.Fatal("not held after the conflict cleared")
	}
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
