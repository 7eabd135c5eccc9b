package driver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// The chart keeps MetalLB's report of an unfinished hand-over off a tenant Service
// (metallb-iad-handover-events), so a refusal that lasts is the driver's to say: an attached
// Service MetalLB does not serve its pinned address for NotServedAfter gets Held=False NotServed
// on the address and one Warning; both end when MetalLB serves it, and a recurrence is said again.
// A Service MetalLB serves in time costs no such write.
func TestAnAttachedServiceMetalLBDoesNotServeIsReported(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	after := testDriver.NotServedAfter
	// No MetalLB stand-in: this test plays MetalLB by hand.
	newPoolClass(t, "notserved", "198.51.100.16/28")
	ns := newNamespace(t, "notserved")
	const ip = "198.51.100.17"
	_, a := boundClaimWithAddress(t, ns, "c", "notserved", ip)
	serve := func(key client.ObjectKey, ips ...string) {
		t.Helper()
		eventually(t, "MetalLB (played) to serve "+key.String(), func() (bool, error) {
			var s corev1.Service
			if err := admin.Get(ctx, key, &s); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			s.Status.LoadBalancer.Ingress = nil
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
			return true, admin.Status().Update(ctx, &s)
		})
	}
	serve(client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(a.Name)}, ip)
	waitHeldByPlaceholder(t, a.Name, ip)
	// The driver's mark of MetalLB's progress (progress.go, fed by its Service informer) moves to
	// the served hold's touch: a placeholder touched before it and still silent is nudged.
	var hold corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(a.Name)}, &hold); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the progress mark to reach the served hold", func() (bool, error) {
		return !testDriver.progress.passed().Passed.Before(plan.LastTouch(&hold)), nil
	})

	s := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// (Taken before the pin is seen: the driver counts from a pass after its pin, so a report on
	// time never looks early here; a clock read after the pin is seen could start after the
	// driver's.)
	pinned := time.Now()
	eventually(t, "the Service to be pinned", func() (bool, error) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		return s.Annotations[plan.AnnotationPinned] == "true" && slices0(plan.PinIPs(s)) == ip, nil
	})
	held := func() *metav1.Condition {
		c, err := addressCondition(a.Name, ipamv1.ConditionHeld)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Unserved for less than NotServedAfter: MetalLB's backlog, nothing said.
	consistently(t, after/2, "Held to stay Attached while MetalLB may be busy", func() (bool, error) {
		c := held()
		return c != nil && c.Reason == plan.ReasonAttached && len(driverEvents(t, ns, string(s.UID), plan.ReasonNotServed)) == 0, nil
	})
	eventuallyWithin(t, after+20*time.Second, "Held=False NotServed", func() (bool, error) {
		c := held()
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == plan.ReasonNotServed, nil
	})
	if waited := time.Since(pinned); waited < after {
		t.Errorf("NotServed after %s, before NotServedAfter (%s)", waited, after)
	}
	eventually(t, "the NotServed Warning on the Service", func() (bool, error) {
		return len(driverEvents(t, ns, string(s.UID), plan.ReasonNotServed)) == 1, nil
	})
	// Said once while it lasts, whatever passes come (a touch of the Service brings one).
	orig := s.DeepCopy()
	s.Annotations["example.com/touched"] = "1"
	if err := admin.Patch(ctx, s, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	settledOn(t, s)
	if n := seriesCount(driverEvents(t, ns, string(s.UID), plan.ReasonNotServed)); n != 1 {
		t.Errorf("%d NotServed Warnings while it lasted, want 1", n)
	}

	// MetalLB serves it: Held=True Attached again.
	serve(client.ObjectKeyFromObject(s), ip)
	eventually(t, "Held=True Attached once served", func() (bool, error) {
		c := held()
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == plan.ReasonAttached, nil
	})
	// A recurrence is said again, after NotServedAfter again (the wait is counted anew).
	serve(client.ObjectKeyFromObject(s))
	again := time.Now()
	eventuallyWithin(t, after+20*time.Second, "Held=False NotServed again", func() (bool, error) {
		c := held()
		return c != nil && c.Reason == plan.ReasonNotServed, nil
	})
	if waited := time.Since(again); waited < after {
		t.Errorf("NotServed again after %s, before NotServedAfter (%s)", waited, after)
	}
	eventually(t, "a second NotServed Warning", func() (bool, error) {
		return seriesCount(driverEvents(t, ns, string(s.UID), plan.ReasonNotServed)) == 2, nil
	})
	if c := meta.FindStatusCondition(getAddress(t, a.Name).Status.Conditions, ipamv1.ConditionHeld); c == nil || c.Message == "" {
		t.Errorf("Held says nothing: %+v", c)
	}
}

func slices0(ips []netip.Addr) string {
	if len(ips) != 1 {
		return ""
	}
	return ips[0].String()
}
