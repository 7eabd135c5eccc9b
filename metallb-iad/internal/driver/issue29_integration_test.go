package driver

import (
	"context"
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

// Defects of issue 29 on a real apiserver; each test failed on the driver before its fix.

// serveAs plays MetalLB's controller: it writes ips as the Service's load-balancer status.
func serveAs(t *testing.T, key client.ObjectKey, ips ...string) {
	t.Helper()
	eventually(t, "the status of "+key.String()+" to be written", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(context.Background(), key, &s); err != nil {
			return false, err
		}
		s.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return admin.Status().Update(context.Background(), &s) == nil, nil
	})
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

// noAttachment checks, for a while, that the address stays held by its placeholder and that the
// Service is neither attached nor pinned.
func noAttachment(t *testing.T, addr, ip string, svc client.ObjectKey, d time.Duration) {
	t.Helper()
	consistently(t, d, "the address to stay held and "+svc.String()+" unpinned", func() (bool, error) {
		a := getAddress(t, addr)
		if a.Status.AttachedTo != nil {
			t.Errorf("attached to %+v", *a.Status.AttachedTo)
			return false, nil
		}
		var hold, s corev1.Service
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr)}, &hold); err != nil {
			return false, err
		}
		if err := admin.Get(context.Background(), svc, &s); err != nil {
			return false, err
		}
		if _, ok := s.Annotations[metallb.AnnotationLoadBalancerIPs]; ok {
			t.Errorf("pinned: %v", s.Annotations)
			return false, nil
		}
		return hold.DeletionTimestamp == nil && len(ingress(&hold)) == 1 && ingress(&hold)[0] == ip, nil
	})
}

// Defect 1: a Service of another load-balancer class that names a claim is not attached: the
// driver used to record the attachment, delete the hold and pin the Service, which MetalLB never
// serves, leaving the IP free in MetalLB for any other Service of the pool (on a real MetalLB,
// another claim's placeholder took it, and the class went into a write loop). The hold stays and
// the Service is told why.
func TestServiceOfAnotherLoadBalancerClassIsNotAttached(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "d29-foreign", "198.51.100.97"
	ns := fakeMetalLBClass(t, class, "198.51.100.96/28")
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)

	other := "example.com/other-lb"
	s := tenantService(ns, "foreign", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	s.Spec.LoadBalancerClass = &other
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), s) })
	noAttachment(t, addr.Name, ip, client.ObjectKeyFromObject(s), 3*time.Second)
	eventually(t, "a ForeignLoadBalancerClass Warning on the Service", func() (bool, error) {
		return len(driverEvents(t, ns, string(s.UID), plan.ReasonForeignLoadBalancerClass)) == 1, nil
	})
}

// Defect 1, the same for a Service in a namespace the pool's spec.serviceAllocation does not
// admit (MetalLB refuses it the pool's addresses): not attached, the hold stays, a Warning. Once
// the namespace gets the label the pool selects, the Service is attached; once the pool stops
// selecting it, the Service is detached and the address held again.
func TestServiceThePoolDoesNotAdmitIsNotAttached(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "d29-alloc", "198.51.100.113"
	ns := fakeMetalLBClass(t, class, "198.51.100.112/28")
	setAllocation := func(alloc *metallb.ServiceAllocation) {
		t.Helper()
		eventually(t, "the pool's serviceAllocation to be set", func() (bool, error) {
			var pool metallb.IPAddressPool
			if err := admin.Get(ctx, client.ObjectKey{Namespace: testMetalLBNS, Name: class}, &pool); err != nil {
				return false, err
			}
			pool.Spec.ServiceAllocation = alloc
			return admin.Update(ctx, &pool) == nil, nil
		})
	}
	selected := metav1.LabelSelector{MatchLabels: map[string]string{"example.com/d29": "admitted"}}
	setAllocation(&metallb.ServiceAllocation{Namespaces: []string{testDriverNS}, NamespaceSelectors: []metav1.LabelSelector{selected}})
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)

	s := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), s) })
	noAttachment(t, addr.Name, ip, client.ObjectKeyFromObject(s), 3*time.Second)
	eventually(t, "a PoolExcludesService Warning on the Service", func() (bool, error) {
		evs := driverEvents(t, ns, string(s.UID), plan.ReasonPoolExcludesService)
		return len(evs) == 1 && strings.Contains(evs[0].Note, "not "+ns), nil
	})

	// The admin labels the namespace: the pool now admits the Service, which is attached.
	eventually(t, "the namespace to be labelled", func() (bool, error) {
		var n corev1.Namespace
		if err := admin.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			return false, err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["example.com/d29"] = "admitted"
		return admin.Update(ctx, &n) == nil, nil
	})
	waitServiceIngress(t, ns, "web", ip)
	eventually(t, "the address to be attached to the Service", func() (bool, error) {
		a := getAddress(t, addr.Name)
		return a.Status.AttachedTo != nil && a.Status.AttachedTo.Name == "web", nil
	})

	// The admin narrows the pool to the driver's namespace: the Service is detached and the
	// address held again.
	setAllocation(&metallb.ServiceAllocation{Namespaces: []string{testDriverNS}})
	waitHeldByPlaceholder(t, addr.Name, ip)
	eventually(t, "the Service to be unpinned", func() (bool, error) {
		var cur corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
			return false, err
		}
		_, pinned := cur.Annotations[metallb.AnnotationLoadBalancerIPs]
		return !pinned, nil
	})
}
