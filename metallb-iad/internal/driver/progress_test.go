package driver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// The mark moves on only for a placeholder of the driver's namespace that MetalLB serves, to its
// last touch, and never back.
func TestMetalLBProgress(t *testing.T) {
	clock := unitT0.Add(time.Hour)
	m := &metallbProgress{namespace: testDriverNS, now: func() time.Time { return clock }}
	placeholder := func(role string, created time.Time, served bool) *corev1.Service {
		s := service(testDriverNS, "p")
		s.CreationTimestamp.Time = created
		s.Labels[plan.LabelRole] = role
		if served {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}
		}
		return s
	}
	tenant := service("t", "web")
	tenant.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.6"}}
	tenant.CreationTimestamp.Time = unitT0.Add(time.Hour)
	release := placeholder(plan.RoleRelease, unitT0.Add(time.Hour), true)
	elsewhere := placeholder(plan.RoleHold, unitT0.Add(time.Hour), true)
	elsewhere.Namespace = "other"
	for _, o := range []any{tenant, release, elsewhere, placeholder(plan.RoleHold, unitT0.Add(time.Hour), false), "not a Service"} {
		m.see(o)
	}
	if got := m.passed(); !got.Passed.IsZero() || !got.MovedAt.IsZero() {
		t.Fatalf("mark %+v from Services that are not served placeholders of the driver", got)
	}
	m.see(placeholder(plan.RoleProvisioning, unitT0.Add(time.Minute), true))
	if got := m.passed(); !got.Passed.Equal(unitT0.Add(time.Minute)) || !got.MovedAt.Equal(clock) {
		t.Fatalf("mark %+v, want the provisioning placeholder's creation, moved now", got)
	}
	clock = clock.Add(time.Minute)
	nudged := placeholder(plan.RoleHold, unitT0, true)
	nudged.Annotations[plan.AnnotationNudge] = unitT0.Add(2 * time.Minute).Format(time.RFC3339Nano)
	m.see(nudged)
	if got := m.passed(); !got.Passed.Equal(unitT0.Add(2*time.Minute)) || !got.MovedAt.Equal(clock) {
		t.Fatalf("mark %+v, want the hold's nudge, moved now", got)
	}
	moved := clock
	clock = clock.Add(time.Minute)
	m.see(placeholder(plan.RoleHold, unitT0.Add(time.Second), true))
	if got := m.passed(); !got.Passed.Equal(unitT0.Add(2*time.Minute)) || !got.MovedAt.Equal(moved) {
		t.Fatalf("mark went back to %+v (or counted as moving)", got)
	}
	// A nudge stamped by a clock ahead of this driver's counts as made now.
	ahead := placeholder(plan.RoleHold, unitT0, true)
	ahead.Annotations[plan.AnnotationNudge] = clock.Add(time.Hour).Format(time.RFC3339Nano)
	m.see(ahead)
	if got := m.passed(); !got.Passed.Equal(clock) {
		t.Fatalf("mark %v from a nudge stamped an hour ahead, want now (%v)", got.Passed, clock)
	}
}
