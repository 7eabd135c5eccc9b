package driver

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func boundClaim(phase ipamv1.ClaimPhase, ips ...string) *ipamv1.IPAddressClaim {
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c", UID: "claim-uid"},
		Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}, Status: ipamv1.IPAddressClaimStatus{Phase: phase}}
	for _, ip := range ips {
		a := testAddress(ip)
		c.Status.Addresses = append(c.Status.Addresses, ipamv1.ClaimedAddress{Name: a.Name, Address: ip, Family: ipamv1.IPv4})
	}
	return c
}

func tenantSvc() *corev1.Service {
	s := svc("t", "web", "web-uid")
	s.Annotations[ipamv1.AnnotationServiceClaim] = "c"
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	return s
}

func attachViewOf(s *corev1.Service, claim *ipamv1.IPAddressClaim, addrs ...*ipamv1.IPAddress) attachView {
	v := attachView{svc: s, claim: claim, addrs: addrs, servable: map[string]bool{}, elsewhere: map[string]bool{}, now: t0}
	for _, a := range addrs {
		v.servable[a.Name] = true
	}
	return v
}

func attachedAddr(ip string, ns, name, uid string) *ipamv1.IPAddress {
	a := testAddress(ip, Finalizer)
	a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: ns, Name: name, UID: types.UID(uid)}
	return a
}

func hasEvent(p attachPlan, reason string) bool {
	for _, e := range p.events {
		if e.reason == reason {
			return true
		}
	}
	return false
}

func TestPlanAttach(t *testing.T) {
	const ip = "203.0.113.5"
	for _, tc := range []struct {
		name  string
		view  attachView
		check func(t *testing.T, p attachPlan)
	}{
		{"bound claim: attach, release the hold, pin — three writes", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 1 || len(p.deleteHolds) != 1 || p.pin != ip || p.detach || len(p.events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 10 defect 10: a parked Service is attached and pinned, no ForeignPin", func() attachView {
			s := tenantSvc()
			s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 1 || p.pin != ip || hasEvent(p, ReasonForeignPin) {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 10 defect 10: an attached Service parked again is pinned again (the patch unparks it)", func() attachView {
			s := pinned(tenantSvc(), ip)
			s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
		}(), func(t *testing.T, p attachPlan) {
			if p.pin != ip || len(p.attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"address deleted by an admin while the core protects it: attaches as before (found by the chaos test)", func() attachView {
			a := testAddress(ip, Finalizer, ipamv1.FinalizerAddress)
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
			v.holds = []*corev1.Service{hold(a.Name, ip, true)}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 1 || len(p.deleteHolds) != 1 || p.pin != ip || p.detach || hasEvent(p, ReasonAddressNotServable) {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned a moment ago, the cache behind: no second write", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.pinned = ip
			v.attached = map[string]bool{v.addrs[0].Name: true}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || p.pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"no claim, requests a reserved IP (an admin's pin): said once, nothing written", func() attachView {
			s := tenantSvc()
			delete(s.Annotations, ipamv1.AnnotationServiceClaim)
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "c"}
			return attachView{svc: s, reserved: []*ipamv1.IPAddress{a}, now: t0}
		}(), func(t *testing.T, p attachPlan) {
			if !hasEvent(p, ReasonReservedAddressRequested) || len(p.events) != 1 || !p.events[0].once || p.pin != "" || len(p.attach) != 0 {
				t.Fatalf("%+v", p)
			}
			if m := p.events[0].message; !strings.Contains(m, ip) || !strings.Contains(m, "t/c") || !strings.Contains(m, ipamv1.AnnotationServiceClaim) {
				t.Fatalf("message %q: want the IP, the claim and how to name it", m)
			}
			if slices.Contains(p.clear, ReasonReservedAddressRequested) {
				t.Fatalf("clears what it says: %v", p.clear)
			}
		}},
		{"no claim, no reserved IP requested: whatever was said is cleared", attachView{svc: func() *corev1.Service {
			s := tenantSvc()
			delete(s.Annotations, ipamv1.AnnotationServiceClaim)
			return s
		}(), now: t0}, func(t *testing.T, p attachPlan) {
			if len(p.events) != 0 || !slices.Contains(p.clear, ReasonReservedAddressRequested) {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned: nothing to write", func() attachView {
			s := pinned(tenantSvc(), ip)
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || len(p.deleteHolds) != 0 || p.pin != "" || p.detach || len(p.unattach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending with the Service and claim just made (an auto-claim): no warning yet, a re-check when it would be due", attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimPending)), func(t *testing.T, p attachPlan) {
			if !p.detach || p.requeue != pendingWarnAfter || hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending, the claim newer than the Service (an auto-claim): the grace runs from the claim", func() attachView {
			claim := boundClaim(ipamv1.ClaimPending)
			claim.CreationTimestamp = metav1.NewTime(t0.Add(10 * time.Second))
			v := attachViewOf(tenantSvc(), claim)
			v.now = t0.Add(20 * time.Second)
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || p.requeue != 5*time.Second || hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending: wait with a re-check, detach", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimPending))
			v.now = t0.Add(pendingWarnAfter)
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || p.requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 8: claim Lost while attached: the pin stays", func() attachView {
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.attachedHere = v.addrs
			return v
		}(), func(t *testing.T, p attachPlan) {
			if p.detach || p.pin != "" || len(p.events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 2: re-linked to a Lost claim from another: the other claim's pin goes, with a re-check", func() attachView {
			const ipB = "203.0.113.6"
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ipB), testAddress(ipB, Finalizer))
			v.attachedHere = []*ipamv1.IPAddress{attachedAddr(ip, "t", "web", "web-uid")}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || p.pin != "" || len(p.attach) != 0 || p.requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 2: Lost while attached to its own and a left-over address: only its own stays", func() attachView {
			const ipB = "203.0.113.6"
			v := attachViewOf(pinned(tenantSvc(), ipB), boundClaim(ipamv1.ClaimLost, ipB), attachedAddr(ipB, "t", "web", "web-uid"))
			v.attachedHere = []*ipamv1.IPAddress{attachedAddr(ip, "t", "web", "web-uid"), v.addrs[0]}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if p.detach || p.pin != "" || len(p.unattach) != 1 || p.unattach[0].Name != testAddress(ip).Name {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 8: Lost, and the core let go of the attached address: detach (the teardown waits for it)", func() attachView {
			a := attachedAddr(ip, "t", "web", "web-uid")
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ip), a)
			v.attachedHere = v.addrs
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 8: Bound, and the core let go of the attached address: detach", func() attachView {
			a := attachedAddr(ip, "t", "web", "web-uid")
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimBound, ip), a)
			v.attachedHere = v.addrs
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || !hasEvent(p, ReasonAddressNotServable) || p.requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 6: an address not bound to the claim: warning and a scheduled re-check", func() attachView {
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "other", UID: "other-uid"}
			return attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
		}(), func(t *testing.T, p attachPlan) {
			if !hasEvent(p, ReasonAddressNotServable) || p.requeue <= 0 || p.requeue > time.Minute || len(p.attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"named claim missing: warning and re-check", attachView{svc: tenantSvc(), why: "IPAddressClaim t/c does not exist", now: t0},
			func(t *testing.T, p attachPlan) {
				if !p.detach || p.requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
					t.Fatalf("%+v", p)
				}
			}},
		{"not a LoadBalancer any more: detach", func() attachView {
			s := pinned(tenantSvc(), ip)
			s.Spec.Type = corev1.ServiceTypeClusterIP
			return attachView{svc: s, now: t0}
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || len(p.events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"family mismatch: event, detach", func() attachView {
			s := tenantSvc()
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || !hasEvent(p, ReasonFamilyMismatch) || len(p.attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"foreign pin: event, nothing written", func() attachView {
			s := tenantSvc()
			s.Annotations[metallb.AnnotationAddressPool] = "other"
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
		}(), func(t *testing.T, p attachPlan) {
			if p.detach || !hasEvent(p, ReasonForeignPin) || len(p.attach) != 0 || p.pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an admin's IPv6 pin in another spelling and order is adopted", func() attachView {
			s := tenantSvc()
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = "2001:0db8:0:0::7, " + ip
			c := boundClaim(ipamv1.ClaimBound, ip)
			c.Spec.Family = ipamv1.Dual
			a6 := testAddress("2001:db8::7", Finalizer)
			c.Status.Addresses = append(c.Status.Addresses, ipamv1.ClaimedAddress{Name: a6.Name, Address: "2001:db8::7", Family: ipamv1.IPv6})
			return attachViewOf(s, c, testAddress(ip, Finalizer), a6)
		}(), func(t *testing.T, p attachPlan) {
			if hasEvent(p, ReasonForeignPin) || len(p.attach) != 2 || p.pin != ip+",2001:db8::7" {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an address the claim lists but not bound to it is not attached", func() attachView {
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef.Name = "someone-else"
			return attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || p.pin != "" || !hasEvent(p, ReasonAddressNotServable) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an address of another driver's class is not attached", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.servable = map[string]bool{}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || p.pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"a second live Service: ClaimInUse, nothing taken", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "other", "other-uid"))
			v.elsewhere[v.addrs[0].Name] = true
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || p.pin != "" || !hasEvent(p, ReasonClaimInUse) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: a re-created Service of the same name takes over, no ClaimInUse", attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip),
			attachedAddr(ip, "t", "web", "old-uid")), func(t *testing.T, p attachPlan) {
			if hasEvent(p, ReasonClaimInUse) || len(p.attach) != 1 || p.pin != ip {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 4: re-link from A to B: B attached and pinned, A's attachment ended, no detach", func() attachView {
			const ipA = "203.0.113.9"
			s := pinned(tenantSvc(), ipA)
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.attachedHere = []*ipamv1.IPAddress{attachedAddr(ipA, "t", "web", "web-uid")}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if p.detach || len(p.attach) != 1 || p.pin != ip || len(p.unattach) != 1 || len(p.events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 29 defect 1: a Service of another load-balancer class: no attach, the hold stays, no pin, a Warning", func() attachView {
			s := tenantSvc()
			class := "example.com/other-lb"
			s.Spec.LoadBalancerClass = &class
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || len(p.deleteHolds) != 0 || p.pin != "" {
				t.Fatalf("attached a Service MetalLB never serves: %+v", p)
			}
			var warned []event
			for _, e := range p.events {
				if e.warning && e.once && e.obj.GetName() == "web" {
					warned = append(warned, e)
				}
			}
			if len(warned) != 1 || !strings.Contains(warned[0].message, "loadBalancerClass") || !strings.Contains(warned[0].message, "example.com/other-lb") {
				t.Fatalf("want one Warning on the Service naming its class: %+v", p.events)
			}
		}},
		{"issue 29 defect 1: a Service of another class attached before the fix: detached, so the address is held again", func() attachView {
			s := pinned(tenantSvc(), ip)
			class := "example.com/other-lb"
			s.Spec.LoadBalancerClass = &class
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.attachedHere = v.addrs
			return v
		}(), func(t *testing.T, p attachPlan) {
			if !p.detach || p.pin != "" || len(p.attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 29 defect 1: a Service the pool's serviceAllocation excludes: no attach, the hold stays, no pin, a Warning and a re-check", func() attachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			v.excluded = map[string]string{testAddress(ip).Name: "IPAddressPool p serves only the namespaces its spec.serviceAllocation lists or selects, not t"}
			return v
		}(), func(t *testing.T, p attachPlan) {
			if len(p.attach) != 0 || len(p.deleteHolds) != 0 || p.pin != "" {
				t.Fatalf("attached a Service MetalLB refuses: %+v", p)
			}
			if !hasEvent(p, ReasonPoolExcludesService) || len(p.events) != 1 || !strings.Contains(p.events[0].message, "not t") {
				t.Fatalf("%+v", p.events)
			}
			if p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("requeue %v: the pool or the namespace may change without an event of the Service", p.requeue)
			}
		}},
		{"a placeholder is not a tenant Service", attachView{svc: hold("x", ip, true), placeholder: true}, func(t *testing.T, p attachPlan) {
			if p.detach || len(p.events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, planAttach(tc.view)) })
	}
}

func TestAutoClaimOf(t *testing.T) {
	s := svc("t", "web", "new-uid")
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web",
		Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}}}
	if !autoClaimOf(c, s) {
		t.Fatal("an auto-claim without an owner (owner reference removed) still links")
	}
	yes := true
	c.OwnerReferences = []metav1.OwnerReference{{Kind: "Service", Name: "web", UID: "old-uid", Controller: &yes}}
	if autoClaimOf(c, s) {
		t.Fatal("defect 11: a re-created Service used the dying claim of the old one")
	}
	c.OwnerReferences[0].UID = "new-uid"
	if !autoClaimOf(c, s) {
		t.Fatal("the Service's own auto-claim does not link")
	}
	delete(c.Annotations, ipamv1.AnnotationAutoClaim)
	if autoClaimOf(c, s) {
		t.Fatal("a claim not made by auto-claim links by name")
	}
}

// An address listed (from the cache) as attached to the Service, whose fresh read no longer has
// attachedTo (cleared since), is not attached here: the Service reconciler must not panic on it
// (seen in the envtest suite: a nil attachedTo in attachSnapshot).
func TestAttachedToWithoutAttachment(t *testing.T) {
	if attachedTo(nil, svc("t", "web", "web-uid")) {
		t.Fatal("no attachment names the Service")
	}
}

// Issue 29, defect 1: which Services a pool's spec.serviceAllocation admits, as MetalLB's
// allocator decides (go.universe.tf/metallb internal/allocator isPoolCompatibleWithService, with
// the namespace set internal/config builds).
func TestAllocationExcludes(t *testing.T) {
	nss := []namespaceLabels{{name: "t", labels: map[string]string{"tier": "gold"}}, {name: "u", labels: map[string]string{"tier": "tin"}}}
	gold := metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	web := metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	for _, tc := range []struct {
		name     string
		alloc    *metallb.ServiceAllocation
		ns       string
		labels   map[string]string
		excluded bool
	}{
		{"no allocation", nil, "t", nil, false},
		{"an empty allocation admits every Service", &metallb.ServiceAllocation{Priority: 5}, "t", nil, false},
		{"listed namespace", &metallb.ServiceAllocation{Namespaces: []string{"t"}}, "t", nil, false},
		{"namespace not listed", &metallb.ServiceAllocation{Namespaces: []string{"u"}}, "t", nil, true},
		{"selected namespace", &metallb.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{gold}}, "t", nil, false},
		{"namespace not selected", &metallb.ServiceAllocation{NamespaceSelectors: []metav1.LabelSelector{gold}}, "u", nil, true},
		{"listed or selected", &metallb.ServiceAllocation{Namespaces: []string{"u"}, NamespaceSelectors: []metav1.LabelSelector{gold}}, "t", nil, false},
		{"selectors that match no namespace admit every namespace (MetalLB's empty set)", &metallb.ServiceAllocation{
			NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"tier": "none"}}}}, "t", nil, false},
		{"service selector matches", &metallb.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{web}}, "t", map[string]string{"app": "web"}, false},
		{"service selector does not match", &metallb.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{web}}, "t", map[string]string{"app": "db"}, true},
		{"namespace admitted, service not", &metallb.ServiceAllocation{Namespaces: []string{"t"}, ServiceSelectors: []metav1.LabelSelector{web}}, "t", nil, true},
		{"service admitted, namespace not", &metallb.ServiceAllocation{Namespaces: []string{"u"}, ServiceSelectors: []metav1.LabelSelector{web}}, "t", map[string]string{"app": "web"}, true},
		{"an invalid selector: MetalLB rejects the pool", &metallb.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}}}, "t", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool("203.0.113.0/28")
			pool.Spec.ServiceAllocation = tc.alloc
			s := svc(tc.ns, "web", "web-uid")
			s.Labels = tc.labels
			why := allocationExcludes(pool, nss, s)
			if (why != "") != tc.excluded {
				t.Fatalf("excluded: %q, want %v", why, tc.excluded)
			}
		})
	}
}
