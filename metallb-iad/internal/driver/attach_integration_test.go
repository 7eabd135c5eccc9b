package driver

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Attaching a Service to its claim's addresses: within the write budget, and only a Service
// MetalLB is going to serve (docs/design.md#only-services-metallb-will-serve-are-attached).

// Attaching a Service that can share its IP with the hold takes 2 driver writes (AttachedTo with
// Held, the pin with the driver's sharing key), none refused; the hold stays.
func TestAttachWriteBudget(t *testing.T) {
	needAPIServer(t)
	newPoolClass(t, "budget", "198.51.100.160/28")
	startFakeMetalLB(t, "budget", netip.MustParsePrefix("198.51.100.160/28"))
	ns := newNamespace(t, "budget")
	const ip = "198.51.100.161"
	_, addr := boundClaimWithAddress(t, ns, "c", "budget", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	settled(t, ns)
	before := writesSnapshot()
	attachedService(t, ns, "web", "c", ip)
	eventually(t, "the address to say Attached", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionHeld)
		return c != nil && c.Reason == plan.ReasonAttached, err
	})
	settled(t, ns)
	total, refused := writesSince(t, "attach", before)
	if total > 2 {
		t.Errorf("the attach took %d driver writes, want at most 2", total)
	}
	if len(refused) > 0 {
		t.Errorf("the apiserver refused driver writes: %v", refused)
	}
	if !meta.IsStatusConditionTrue(getAddress(t, addr.Name).Status.Conditions, ipamv1.ConditionHeld) {
		t.Fatal("not Held after the attach")
	}
	_ = metallb.AnnotationLoadBalancerIPs
}

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
