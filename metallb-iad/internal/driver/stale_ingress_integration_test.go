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
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
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

// Defect 2: an admin shrinks the class's pool past a reserved IP and gives that range to an
// auto-assigning pool; MetalLB serves the IP from there to a tenant's plain Service. The address
// is Lost, and the Service shows the IP rightly: its status is never cleared (the driver used to
// clear it as a "stale holder" three times every ten minutes, with a Warning that blamed MetalLB's
// memory), and the Conflict that names it does not tell it to remove a request it never made.
func TestStaleHolderClearSparesAServiceOfAnotherPool(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "d29-shrink", "203.0.113.129"
	newPoolClass(t, class, "203.0.113.128/28")
	ns := newNamespace(t, class)
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	holdKey := client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr.Name)}
	eventually(t, "the hold", func() (bool, error) {
		var s corev1.Service
		err := admin.Get(ctx, holdKey, &s)
		return err == nil, client.IgnoreNotFound(err)
	})
	serveAs(t, holdKey, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)

	// The admin's change: the class's pool no longer includes the IP; an auto-assigning pool does.
	var pool metallb.IPAddressPool
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testMetalLBNS, Name: class}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Addresses = []string{"203.0.113.136/29"}
	if err := admin.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	yes := true
	auto := &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: class + "-auto"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.128/29"}, AutoAssign: &yes}}
	if err := admin.Create(ctx, auto); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), auto) })
	eventually(t, "the address to be Lost (OutsidePool)", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionLost)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == plan.ReasonOutsidePool, err
	})
	// MetalLB: the hold's pool no longer includes the IP, so the hold loses it, and a tenant's
	// plain Service gets it from the auto-assigning pool.
	plain := tenantService(ns, "plain", map[string]string{ipamv1.AnnotationAutoClaim: "false"})
	if err := admin.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), plain) })
	serveAs(t, client.ObjectKeyFromObject(plain), ip)
	serveAs(t, holdKey)

	consistently(t, 3*time.Second, "the plain Service to keep the IP MetalLB served it, with no StaleAddressCleared", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(plain), &s); err != nil {
			return false, err
		}
		if evs := driverEvents(t, ns, string(s.UID), plan.ReasonStaleIngressCleared); len(evs) > 0 {
			t.Errorf("the driver said %s: %s", plan.ReasonStaleIngressCleared, evs[0].Note)
			return false, nil
		}
		return len(ingress(&s)) == 1 && ingress(&s)[0] == ip, nil
	})
	eventually(t, "a Conflict naming the plain Service", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, ns+"/plain"), err
	})
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(plain), &s); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Warning on the plain Service", func() (bool, error) {
		return len(driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict)) > 0, nil
	})
	for _, e := range driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict) {
		if strings.Contains(e.Note, "annotation") || !strings.Contains(e.Note, "another pool") {
			t.Errorf("the Warning blames a request the Service does not make: %q", e.Note)
		}
	}
}
