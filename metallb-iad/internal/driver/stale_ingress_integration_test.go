package driver

import (
	"context"
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

// Issue 13, chaos seed 212695508: while MetalLB's passes kept failing, it wrote a reserved IP
// back into the status of a Service the driver had already unpinned and cleared. Nothing on the
// Service requested the IP any more (MetalLB's memory was the only source), yet the address said
// Conflict and its hold stayed refused until the end. The driver now clears such an ingress
// itself (MetalLB then lets go), with a Warning on the Service; a Service that does request the
// IP, or that another load-balancer implementation serves, is still a Conflict for an admin.
func TestStaleIngressOfAServiceThatRequestsNothingIsCleared(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "stale", "203.0.113.208/28")
	startFakeMetalLB(t, "stale", netip.MustParsePrefix("203.0.113.208/28"))
	ns := newNamespace(t, "stale")
	const ip = "203.0.113.209"
	_, addr := boundClaimWithAddress(t, ns, "c", "stale", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)

	show := func(s *corev1.Service) {
		t.Helper()
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the status of "+s.Name+" to be written", func() (bool, error) {
			var cur corev1.Service
			if err := admin.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
				return false, err
			}
			cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			return admin.Status().Update(ctx, &cur) == nil, nil
		})
	}
	// Another implementation's Service: MetalLB never served it, so the driver leaves it alone.
	other := tenantService(ns, "other-lb", nil)
	class := "example.com/other-lb"
	other.Spec.LoadBalancerClass = &class
	show(other)
	// MetalLB's stale write: a Service with no pin, no pool and no loadBalancerIP.
	former := tenantService(ns, "former", nil)
	show(former)

	eventually(t, "the stale ingress of the Service that requests nothing to be cleared", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(former), &s); err != nil {
			return false, err
		}
		return len(s.Status.LoadBalancer.Ingress) == 0, nil
	})
	eventually(t, "a Warning on the cleared Service", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(former), &s); err != nil {
			return false, err
		}
		return len(driverEvents(t, ns, string(s.UID), plan.ReasonStaleIngressCleared)) > 0, nil
	})
	conflictNames := func(want string, not string) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
			if err != nil || c == nil || c.Status != metav1.ConditionTrue {
				return false, err
			}
			return strings.Contains(c.Message, want) && !strings.Contains(c.Message, not), nil
		}
	}
	eventually(t, "Conflict naming only the other implementation's Service", conflictNames(ns+"/other-lb", ns+"/former"))
	consistently(t, 2*time.Second, "the other implementation's ingress kept", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(other), &s); err != nil {
			return false, err
		}
		return len(s.Status.LoadBalancer.Ingress) == 1, nil
	})
	if err := admin.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Conflict to clear", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
		return c == nil || c.Status == metav1.ConditionFalse, err
	})
	waitHeldByPlaceholder(t, addr.Name, ip)
}
