package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
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

func attachViewOf(s *corev1.Service, claim *ipamv1.IPAddressClaim, addrs ...*ipamv1.IPAddress) AttachView {
	v := AttachView{Svc: s, Claim: claim, Addrs: addrs, Servable: map[string]bool{}, Elsewhere: map[string]bool{}, Now: t0}
	for _, a := range addrs {
		v.Servable[a.Name] = true
	}
	return v
}

func attachedAddr(ip string, ns, name, uid string) *ipamv1.IPAddress {
	a := testAddress(ip, Finalizer)
	a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: ns, Name: name, UID: types.UID(uid)}
	return a
}

func hasEvent(p AttachPlan, reason string) bool {
	for _, e := range p.Events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

func TestPlanAttach(t *testing.T) {
	const ip = "203.0.113.5"
	for _, tc := range []struct {
		name  string
		view  AttachView
		check func(t *testing.T, p AttachPlan)
	}{
		{"bound claim: attach and pin with the driver's sharing key, the hold stays — two writes", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 1 || len(p.DeleteHolds) != 0 || p.Pin != ip || p.Key != testKey || p.Detach || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"a hold made before holds shared their IP: it goes before the pin", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{unkeyed(hold(testAddress(ip).Name, ip, true))}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 1 || len(p.DeleteHolds) != 1 || p.Pin != ip || p.Key != testKey {
				t.Fatalf("%+v", p)
			}
		}},
		{"externalTrafficPolicy Local with a selector: MetalLB would not share, the hold goes, no key", func() AttachView {
			s := tenantSvc()
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.Selector = map[string]string{"app": "web"}
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 1 || p.Pin != ip || p.Key != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"externalTrafficPolicy Local without a selector (a tenant cluster's host Service): shares", func() AttachView {
			s := tenantSvc()
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 0 || p.Pin != ip || p.Key != testKey {
				t.Fatalf("%+v", p)
			}
		}},
		{"the hold's port TCP/1 in use: the hold goes, no key", func() AttachView {
			s := tenantSvc()
			s.Spec.Ports = []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}, {Port: HoldPort, Protocol: corev1.ProtocolTCP}}
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 1 || p.Pin != ip || p.Key != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"UDP/1 does not collide with the hold's TCP/1: shares", func() AttachView {
			s := tenantSvc()
			s.Spec.Ports = []corev1.ServicePort{{Port: HoldPort, Protocol: corev1.ProtocolUDP}}
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 0 || p.Key != testKey {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned with the key, the hold shared: nothing to write", func() AttachView {
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || len(p.DeleteHolds) != 0 || p.Pin != "" || p.Detach {
				t.Fatalf("%+v", p)
			}
		}},
		{"pinned with the key a moment ago, the cache behind: the hold it shares stays", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.Pinned = ip
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 0 || p.Pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned without the key (before holds shared): a hold there goes", func() AttachView {
			v := attachViewOf(pinnedUnkeyed(tenantSvc(), ip), boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.DeleteHolds) != 1 || p.Pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 10 defect 10: a parked Service is attached and pinned, no ForeignPin", func() AttachView {
			s := tenantSvc()
			s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 1 || p.Pin != ip || hasEvent(p, ReasonForeignPin) {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 10 defect 10: an attached Service parked again is pinned again (the patch unparks it)", func() AttachView {
			s := pinned(tenantSvc(), ip)
			s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
		}(), func(t *testing.T, p AttachPlan) {
			if p.Pin != ip || len(p.Attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"address deleted by an admin while the core protects it: attaches as before (found by the chaos test)", func() AttachView {
			a := testAddress(ip, Finalizer, ipamv1.FinalizerAddress)
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
			v.Holds = []*corev1.Service{hold(a.Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 1 || len(p.DeleteHolds) != 0 || p.Pin != ip || p.Detach || hasEvent(p, ReasonAddressNotServable) {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned a moment ago, the cache behind: no second write", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Pinned = ip
			v.Attached = map[string]bool{v.Addrs[0].Name: true}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || p.Pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"no claim, requests a reserved IP (an admin's pin): said once, nothing written", func() AttachView {
			s := tenantSvc()
			delete(s.Annotations, ipamv1.AnnotationServiceClaim)
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "c"}
			return AttachView{Svc: s, Reserved: []*ipamv1.IPAddress{a}, Now: t0}
		}(), func(t *testing.T, p AttachPlan) {
			if !hasEvent(p, ReasonReservedAddressRequested) || len(p.Events) != 1 || !p.Events[0].Once || p.Pin != "" || len(p.Attach) != 0 {
				t.Fatalf("%+v", p)
			}
			if m := p.Events[0].Message; !strings.Contains(m, ip) || !strings.Contains(m, "t/c") || !strings.Contains(m, ipamv1.AnnotationServiceClaim) {
				t.Fatalf("message %q: want the IP, the claim and how to name it", m)
			}
			if slices.Contains(p.Clear, ReasonReservedAddressRequested) {
				t.Fatalf("clears what it says: %v", p.Clear)
			}
		}},
		{"no claim, no reserved IP requested: whatever was said is cleared", AttachView{Svc: func() *corev1.Service {
			s := tenantSvc()
			delete(s.Annotations, ipamv1.AnnotationServiceClaim)
			return s
		}(), Now: t0}, func(t *testing.T, p AttachPlan) {
			if len(p.Events) != 0 || !slices.Contains(p.Clear, ReasonReservedAddressRequested) {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached and pinned: nothing to write", func() AttachView {
			s := pinned(tenantSvc(), ip)
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || len(p.DeleteHolds) != 0 || p.Pin != "" || p.Detach || len(p.Unattach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending with the Service and claim just made (an auto-claim): no warning yet, a re-check when it would be due", attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimPending)), func(t *testing.T, p AttachPlan) {
			if !p.Detach || p.Requeue != pendingWarnAfter || hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending, the claim newer than the Service (an auto-claim): the grace runs from the claim", func() AttachView {
			claim := boundClaim(ipamv1.ClaimPending)
			claim.CreationTimestamp = metav1.NewTime(t0.Add(10 * time.Second))
			v := attachViewOf(tenantSvc(), claim)
			v.Now = t0.Add(20 * time.Second)
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || p.Requeue != 5*time.Second || hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim pending: wait with a re-check, detach", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimPending))
			v.Now = t0.Add(pendingWarnAfter)
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || p.Requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 8: claim Lost while attached: the pin stays", func() AttachView {
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.AttachedHere = v.Addrs
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if p.Detach || p.Pin != "" || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 2: re-linked to a Lost claim from another: the other claim's pin goes, with a re-check", func() AttachView {
			const ipB = "203.0.113.6"
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ipB), testAddress(ipB, Finalizer))
			v.AttachedHere = []*ipamv1.IPAddress{attachedAddr(ip, "t", "web", "web-uid")}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || p.Pin != "" || len(p.Attach) != 0 || p.Requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 2: Lost while attached to its own and a left-over address: only its own stays", func() AttachView {
			const ipB = "203.0.113.6"
			v := attachViewOf(pinned(tenantSvc(), ipB), boundClaim(ipamv1.ClaimLost, ipB), attachedAddr(ipB, "t", "web", "web-uid"))
			v.AttachedHere = []*ipamv1.IPAddress{attachedAddr(ip, "t", "web", "web-uid"), v.Addrs[0]}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if p.Detach || p.Pin != "" || len(p.Unattach) != 1 || p.Unattach[0].Name != testAddress(ip).Name {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 8: Lost, and the core let go of the attached address: detach (the teardown waits for it)", func() AttachView {
			a := attachedAddr(ip, "t", "web", "web-uid")
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ip), a)
			v.AttachedHere = v.Addrs
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 8: Bound, and the core let go of the attached address: detach", func() AttachView {
			a := attachedAddr(ip, "t", "web", "web-uid")
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimBound, ip), a)
			v.AttachedHere = v.Addrs
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || !hasEvent(p, ReasonAddressNotServable) || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 6: an address not bound to the claim: warning and a scheduled re-check", func() AttachView {
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "other", UID: "other-uid"}
			return attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
		}(), func(t *testing.T, p AttachPlan) {
			if !hasEvent(p, ReasonAddressNotServable) || p.Requeue <= 0 || p.Requeue > time.Minute || len(p.Attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"named claim missing: warning and re-check", AttachView{Svc: tenantSvc(), Why: "IPAddressClaim t/c does not exist", Now: t0},
			func(t *testing.T, p AttachPlan) {
				if !p.Detach || p.Requeue <= 0 || !hasEvent(p, ReasonClaimNotReady) {
					t.Fatalf("%+v", p)
				}
			}},
		{"not a LoadBalancer any more: detach", func() AttachView {
			s := pinned(tenantSvc(), ip)
			s.Spec.Type = corev1.ServiceTypeClusterIP
			return AttachView{Svc: s, Now: t0}
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"family mismatch: event, detach", func() AttachView {
			s := tenantSvc()
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || !hasEvent(p, ReasonFamilyMismatch) || len(p.Attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"foreign pin: event, nothing written", func() AttachView {
			s := tenantSvc()
			s.Annotations[metallb.AnnotationAddressPool] = "other"
			return attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
		}(), func(t *testing.T, p AttachPlan) {
			if p.Detach || !hasEvent(p, ReasonForeignPin) || len(p.Attach) != 0 || p.Pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an admin's IPv6 pin in another spelling and order is adopted", func() AttachView {
			s := tenantSvc()
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = "2001:0db8:0:0::7, " + ip
			c := boundClaim(ipamv1.ClaimBound, ip)
			c.Spec.Family = ipamv1.Dual
			a6 := testAddress("2001:db8::7", Finalizer)
			c.Status.Addresses = append(c.Status.Addresses, ipamv1.ClaimedAddress{Name: a6.Name, Address: "2001:db8::7", Family: ipamv1.IPv6})
			return attachViewOf(s, c, testAddress(ip, Finalizer), a6)
		}(), func(t *testing.T, p AttachPlan) {
			if hasEvent(p, ReasonForeignPin) || len(p.Attach) != 2 || p.Pin != ip+",2001:db8::7" {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an address the claim lists but not bound to it is not attached", func() AttachView {
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef.Name = "someone-else"
			return attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), a)
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || p.Pin != "" || !hasEvent(p, ReasonAddressNotServable) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: an address of another driver's class is not attached", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Servable = map[string]bool{}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || p.Pin != "" {
				t.Fatalf("%+v", p)
			}
		}},
		{"a second live Service: ClaimInUse, nothing taken", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "other", "other-uid"))
			v.Elsewhere[v.Addrs[0].Name] = true
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || p.Pin != "" || !hasEvent(p, ReasonClaimInUse) {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 11: a re-created Service of the same name takes over, no ClaimInUse", attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip),
			attachedAddr(ip, "t", "web", "old-uid")), func(t *testing.T, p AttachPlan) {
			if hasEvent(p, ReasonClaimInUse) || len(p.Attach) != 1 || p.Pin != ip {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 4: re-link from A to B: B attached and pinned, A's attachment ended, no detach", func() AttachView {
			const ipA = "203.0.113.9"
			s := pinned(tenantSvc(), ipA)
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.AttachedHere = []*ipamv1.IPAddress{attachedAddr(ipA, "t", "web", "web-uid")}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if p.Detach || len(p.Attach) != 1 || p.Pin != ip || len(p.Unattach) != 1 || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 29 defect 1: a Service of another load-balancer class: no attach, the hold stays, no pin, a Warning", func() AttachView {
			s := tenantSvc()
			class := "example.com/other-lb"
			s.Spec.LoadBalancerClass = &class
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || len(p.DeleteHolds) != 0 || p.Pin != "" {
				t.Fatalf("attached a Service MetalLB never serves: %+v", p)
			}
			var warned []Event
			for _, e := range p.Events {
				if e.Warning && e.Once && e.Obj.GetName() == "web" {
					warned = append(warned, e)
				}
			}
			if len(warned) != 1 || !strings.Contains(warned[0].Message, "loadBalancerClass") || !strings.Contains(warned[0].Message, "example.com/other-lb") {
				t.Fatalf("want one Warning on the Service naming its class: %+v", p.Events)
			}
		}},
		{"issue 29 defect 1: a Service of another class attached before the fix: detached, so the address is held again", func() AttachView {
			s := pinned(tenantSvc(), ip)
			class := "example.com/other-lb"
			s.Spec.LoadBalancerClass = &class
			v := attachViewOf(s, boundClaim(ipamv1.ClaimBound, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.AttachedHere = v.Addrs
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if !p.Detach || p.Pin != "" || len(p.Attach) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 29 defect 1: a Service the pool's serviceAllocation excludes: no attach, the hold stays, no pin, a Warning and a re-check", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			v.Excluded = map[string]string{testAddress(ip).Name: "IPAddressPool p serves only the namespaces its spec.serviceAllocation lists or selects, not t"}
			return v
		}(), func(t *testing.T, p AttachPlan) {
			if len(p.Attach) != 0 || len(p.DeleteHolds) != 0 || p.Pin != "" {
				t.Fatalf("attached a Service MetalLB refuses: %+v", p)
			}
			if !hasEvent(p, ReasonPoolExcludesService) || len(p.Events) != 1 || !strings.Contains(p.Events[0].Message, "not t") {
				t.Fatalf("%+v", p.Events)
			}
			if p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("requeue %v: the pool or the namespace may change without an event of the Service", p.Requeue)
			}
		}},
		{"a placeholder is not a tenant Service", AttachView{Svc: hold("x", ip, true), Placeholder: true}, func(t *testing.T, p AttachPlan) {
			if p.Detach || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, PlanAttach(tc.view)) })
	}
}

func TestAutoClaimOf(t *testing.T) {
	s := svc("t", "web", "new-uid")
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web",
		Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}}}
	if !AutoClaimOf(c, s) {
		t.Fatal("an auto-claim without an owner (owner reference removed) still links")
	}
	yes := true
	c.OwnerReferences = []metav1.OwnerReference{{Kind: "Service", Name: "web", UID: "old-uid", Controller: &yes}}
	if AutoClaimOf(c, s) {
		t.Fatal("defect 11: a re-created Service used the dying claim of the old one")
	}
	c.OwnerReferences[0].UID = "new-uid"
	if !AutoClaimOf(c, s) {
		t.Fatal("the Service's own auto-claim does not link")
	}
	delete(c.Annotations, ipamv1.AnnotationAutoClaim)
	if AutoClaimOf(c, s) {
		t.Fatal("a claim not made by auto-claim links by name")
	}
}

// An address listed (from the cache) as attached to the Service, whose fresh read no longer has
// AttachedTo (cleared since), is not attached here: the Service reconciler must not panic on it
// (seen in the envtest suite: a nil AttachedTo in attachSnapshot).
func TestAttachedToWithoutAttachment(t *testing.T) {
	if AttachedTo(nil, svc("t", "web", "web-uid")) {
		t.Fatal("no attachment names the Service")
	}
}

// Issue 29, defect 1: which Services a pool's spec.serviceAllocation admits, as MetalLB's
// allocator decides (go.universe.tf/metallb internal/allocator isPoolCompatibleWithService, with
// the namespace set internal/config builds).
func TestAllocationExcludes(t *testing.T) {
	nss := []NamespaceLabels{{Name: "t", Labels: map[string]string{"tier": "gold"}}, {Name: "u", Labels: map[string]string{"tier": "tin"}}}
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
			why := AllocationExcludes(pool, nss, s)
			if (why != "") != tc.excluded {
				t.Fatalf("excluded: %q, want %v", why, tc.excluded)
			}
		})
	}
}
