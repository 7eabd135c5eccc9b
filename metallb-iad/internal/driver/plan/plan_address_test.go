package plan

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func testClass(pool string) *ipamv1.IPAddressClass {
	return &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "k"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: Provisioner, Parameters: map[string]string{ClassParameterPool: pool}}}
}

func testPool(addresses ...string) *metallb.IPAddressPool {
	no := false
	return &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: metallb.IPAddressPoolSpec{Addresses: addresses, AutoAssign: &no}}
}

func testAddress(ip string, finalizers ...string) *ipamv1.IPAddress {
	return &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip)), Finalizers: finalizers,
			CreationTimestamp: metav1.NewTime(t0)},
		Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "k",
			ClaimRef: &ipamv1.ClaimReference{Namespace: "t", Name: "c", UID: "claim-uid"}},
	}
}

func svc(ns, name, uid string, ingress ...string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid),
		CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{}, Labels: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func hold(addr, ip string, served bool) *corev1.Service {
	var ingress []string
	if served {
		ingress = []string{ip}
	}
	s := svc(testDriverNS, HoldName(addr), "hold-"+addr, ingress...)
	s.Labels = map[string]string{LabelRole: RoleHold, LabelAddress: addr}
	s.Annotations = map[string]string{metallb.AnnotationLoadBalancerIPs: ip, metallb.AnnotationAllowSharedIP: testKey}
	return s
}

// testKey is the sharing key of the claim testAddress and boundClaim name.
var testKey = SharingKey("claim-uid")

// unkeyed is a hold made before holds carried the driver's sharing key.
func unkeyed(s *corev1.Service) *corev1.Service {
	delete(s.Annotations, metallb.AnnotationAllowSharedIP)
	return s
}

// pinned is the Service as the driver pins it: the pin, its marker, and the driver's sharing
// key (the Service can share its IP with the hold).
func pinned(s *corev1.Service, pin string) *corev1.Service {
	s.Annotations[metallb.AnnotationLoadBalancerIPs] = pin
	s.Annotations[AnnotationPinned] = "true"
	s.Annotations[metallb.AnnotationAllowSharedIP] = testKey
	return s
}

// pinnedUnkeyed is a Service pinned without the driver's sharing key (pinned before holds
// shared their IP, or one that cannot share it).
func pinnedUnkeyed(s *corev1.Service, pin string) *corev1.Service {
	s = pinned(s, pin)
	delete(s.Annotations, metallb.AnnotationAllowSharedIP)
	return s
}

// requesting makes a Service request ip through MetalLB's pin annotation, as an admin would.
func requesting(s *corev1.Service, ip string) *corev1.Service {
	s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip
	return s
}

func view(a *ipamv1.IPAddress, mods ...func(*AddressView)) AddressView {
	v := AddressView{Addr: a, IP: netip.MustParseAddr(a.Spec.Address), Class: testClass("p"), Pool: testPool("203.0.113.0/28"),
		Namespace: testDriverNS, Now: t0.Add(10 * time.Second), NudgeAfter: 3 * time.Second}
	for _, m := range mods {
		m(&v)
	}
	return v
}

func cond(p AddressPlan, typ string) *metav1.Condition {
	if p.Status == nil {
		return nil
	}
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

func TestPlanAddress(t *testing.T) {
	const ip = "203.0.113.5"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	now := metav1.NewTime(t0)
	deleting := func(finalizers ...string) *ipamv1.IPAddress {
		a := testAddress(ip, finalizers...)
		a.DeletionTimestamp = &now
		return a
	}
	tenant := pinned(svc("t", "web", "web-uid", ip), ip)
	for _, tc := range []struct {
		name  string
		view  AddressView
		check func(t *testing.T, p AddressPlan)
	}{
		{"new address: finalizer, a hold, waiting for MetalLB", view(testAddress(ip)), func(t *testing.T, p AddressPlan) {
			if !p.AddFinalizer || p.CreateHold == nil || p.CreateHold.Annotations[metallb.AnnotationLoadBalancerIPs] != ip ||
				p.CreateHold.Annotations[metallb.AnnotationAddressPool] != "p" || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
				t.Fatalf("held %+v", c)
			}
			if cond(p, ipamv1.ConditionConflict) != nil || cond(p, ipamv1.ConditionLost) != nil {
				t.Fatal("a settled address should not carry Conflict=False or Lost=False it never had (a write per address)")
			}
		}},
		{"hold created, not in the cache yet: no second create", view(testAddress(ip, Finalizer), func(v *AddressView) { v.HoldExpected = true }),
			func(t *testing.T, p AddressPlan) {
				if p.CreateHold != nil || p.Requeue == 0 {
					t.Fatalf("%+v", p)
				}
			}},
		{"served hold: Held", view(testAddress(ip, Finalizer), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }),
			func(t *testing.T, p AddressPlan) {
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonHeld {
					t.Fatalf("%+v", c)
				}
				if p.CreateHold != nil || len(p.DeleteHolds) != 0 || p.PinHold != nil || p.Nudge != nil || p.Requeue != 0 {
					t.Fatalf("%+v", p)
				}
			}},
		{"two holds: the served one stays", view(testAddress(ip, Finalizer), func(v *AddressView) {
			a, b := hold(name, ip, false), hold(name, ip, true)
			a.Name, a.UID = "older", "older"
			v.Holds = []*corev1.Service{a, b}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 1 || p.DeleteHolds[0].Name != "older" {
				t.Fatalf("%+v", p.DeleteHolds)
			}
		}},
		{"unpinned hold gets pinned", view(testAddress(ip, Finalizer), func(v *AddressView) {
			h := hold(name, ip, true)
			delete(h.Annotations, metallb.AnnotationLoadBalancerIPs)
			v.Holds = []*corev1.Service{h}
		}), func(t *testing.T, p AddressPlan) {
			if p.PinHold == nil {
				t.Fatal("not pinned")
			}
		}},
		{"hold refused by MetalLB for long: nudged", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.FailedAt = map[types.UID]time.Time{v.Holds[0].UID: v.Holds[0].CreationTimestamp.Time}
		}),
			func(t *testing.T, p AddressPlan) {
				if p.Nudge == nil || p.Requeue <= 0 || p.Requeue > time.Minute {
					t.Fatalf("%+v", p)
				}
			}},
		{"hold refused for a deleted tenant Service MetalLB keeps the IP for: the admin is told to restart MetalLB", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.FailedAt = map[types.UID]time.Time{v.Holds[0].UID: v.Holds[0].CreationTimestamp.Time}
			v.KeptBy = []string{"tenant-a/web"}
		}),
			func(t *testing.T, p AddressPlan) {
				c := cond(p, ipamv1.ConditionHeld)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonKeptByMetalLB ||
					!strings.Contains(c.Message, "tenant-a/web") || !strings.Contains(c.Message, "restart MetalLB's controller") {
					t.Fatalf("held %+v", c)
				}
				if len(p.Events) != 1 || p.Events[0].Reason != ReasonKeptByMetalLB || !p.Events[0].Warning || !p.Events[0].Once ||
					p.Events[0].Message != c.Message {
					t.Fatalf("events %+v", p.Events)
				}
				if p.Nudge != nil || p.Requeue != time.Minute {
					t.Fatalf("nudged (only a restart of MetalLB's controller helps) or not looked at again a minute from now: %+v", p)
				}
			}},
		{"kept, said before, MetalLB's report gone: the condition stays, nothing written, no nudge", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.FailedAt = map[types.UID]time.Time{v.Holds[0].UID: v.Holds[0].CreationTimestamp.Time}
			// What the pass that concluded it wrote.
			first := *v
			first.Addr, first.KeptBy = v.Addr.DeepCopy(), []string{"tenant-a/web"}
			v.Addr.Status = *PlanAddress(first).Status
		}),
			func(t *testing.T, p AddressPlan) {
				if p.Status != nil || len(p.Events) != 0 || p.Nudge != nil || len(p.Unsay) != 0 {
					t.Fatalf("%+v", p)
				}
			}},
		{"kept said before, and MetalLB's latest report names a Service that exists: waiting for MetalLB again", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			SetCondition(v.Addr, &v.Addr.Status, ipamv1.ConditionHeld, false, ReasonKeptByMetalLB, keptByMessage(v.IP, []string{"tenant-a/web"}))
			v.Reported = true
		}),
			func(t *testing.T, p AddressPlan) {
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.Unsay, func(u Unsay) bool { return u.Topic == ReasonKeptByMetalLB }) {
					t.Fatalf("unsay %+v", p.Unsay)
				}
			}},
		{"a named Service only just gone: waiting, looked at again when it would be due", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Reported, v.KeptRecheck = true, 25*time.Second
		}),
			func(t *testing.T, p AddressPlan) {
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
					t.Fatalf("held %+v", c)
				}
				if p.Requeue <= 0 || p.Requeue > 25*time.Second {
					t.Fatalf("requeue %s", p.Requeue)
				}
			}},
		{"the kept IP freed: held again, and a recurrence would be said again", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, true)}
			v.Addr.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: ReasonKeptByMetalLB}}
		}),
			func(t *testing.T, p AddressPlan) {
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonHeld {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.Unsay, func(u Unsay) bool { return u.Topic == ReasonKeptByMetalLB }) {
					t.Fatalf("unsay %+v", p.Unsay)
				}
			}},
		{"finding 12: hold waiting, not refused by MetalLB: no nudge, a re-check", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
		}),
			func(t *testing.T, p AddressPlan) {
				if p.Nudge != nil || p.Requeue <= 0 || p.Requeue > time.Minute {
					t.Fatalf("%+v", p)
				}
			}},
		{"attached, not pinned yet: the hold is the Service reconciler's to delete", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Attached = svc("t", "web", "web-uid")
			v.Holds = []*corev1.Service{hold(name, ip, true)}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 0 || p.CreateHold != nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"attached with the driver's key: the hold it shares stays, a second one goes, Held Attached", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Attached = tenant
			second := hold(name, ip, false)
			second.Name += "-2"
			v.Holds = []*corev1.Service{second, hold(name, ip, true)}
			v.Holders = []Holder{{Svc: tenant, InIngress: true, LinksToClaim: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 1 || p.DeleteHolds[0].Name != HoldName(name)+"-2" || p.CreateHold != nil || p.PinHold != nil {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAttached {
				t.Fatalf("%+v", c)
			}
		}},
		{"attached without the driver's key: leftover hold goes, Held Attached", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Attached = pinnedUnkeyed(svc("t", "web", "web-uid", ip), ip)
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Holders = []Holder{{Svc: tenant, InIngress: true, LinksToClaim: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 1 || p.CreateHold != nil {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAttached {
				t.Fatalf("%+v", c)
			}
			if cond(p, ipamv1.ConditionConflict) != nil {
				t.Fatal("the attached Service is no conflict")
			}
		}},
		{"issue 29 defect 1: a Service of another load-balancer class showing the IP and naming the claim is not adopted: the address is held, a Conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			other := svc("t", "other-lb", "other-lb", ip)
			class := "example.com/other-lb"
			other.Spec.LoadBalancerClass = &class
			v.Holders = []Holder{{Svc: other, InIngress: true, LinksToClaim: true}}
		}), func(t *testing.T, p AddressPlan) {
			if p.CreateHold == nil {
				t.Fatalf("no hold: %+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason == ReasonAdopting {
				t.Fatalf("%+v", c)
			}
			if c := cond(p, ipamv1.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("%+v", c)
			}
		}},
		{"attached Service gone: attachment cleared, hold again", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "old"}
			return a
		}(), func(v *AddressView) { v.AttachedGone = true }), func(t *testing.T, p AddressPlan) {
			if p.Status == nil || p.Status.AttachedTo != nil || p.CreateHold == nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 1: deleted while the core protects it: keeps holding, nothing torn down", view(deleting(ipamv1.FinalizerAddress, Finalizer),
			func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if p.RemoveFinalizer || len(p.DeleteHolds) != 0 || p.AddFinalizer {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 1: deleted while attached and protected: the Service keeps its pin", view(deleting(ipamv1.FinalizerAddress, Finalizer),
			func(v *AddressView) { v.Attached = tenant }), func(t *testing.T, p AddressPlan) {
			if p.RemoveFinalizer {
				t.Fatalf("%+v", p)
			}
		}},
		{"teardown once the core let go: holds go, finalizer goes", view(deleting(Finalizer),
			func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if !p.RemoveFinalizer || len(p.DeleteHolds) != 1 {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 8: teardown of an attached address waits for the Service reconciler's detach, with a re-check", view(deleting(Finalizer), func(v *AddressView) { v.Attached = tenant }),
			func(t *testing.T, p AddressPlan) {
				if p.RemoveFinalizer || len(p.DeleteHolds) != 0 || p.Requeue <= 0 || p.Requeue > time.Minute {
					t.Fatalf("%+v", p)
				}
			}},
		{"teardown leaves a pin that does not name the IP", view(deleting(Finalizer), func(v *AddressView) {
			v.Attached = pinned(svc("t", "web", "web-uid"), "203.0.113.9")
		}), func(t *testing.T, p AddressPlan) {
			if !p.RemoveFinalizer {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 2: deleted without our finalizer once the core let go: leftover holds go", view(deleting(),
			func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 1 || p.Status != nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"our finalizer removed by hand while the core protects it: keeps holding", view(deleting(ipamv1.FinalizerAddress),
			func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if len(p.DeleteHolds) != 0 || p.RemoveFinalizer {
				t.Fatalf("%+v", p)
			}
		}},
		{"another driver's address: nothing", view(testAddress(ip), func(v *AddressView) { v.Class.Spec.Provisioner = "other" }),
			func(t *testing.T, p AddressPlan) {
				if p.AddFinalizer || p.CreateHold != nil || p.Status != nil {
					t.Fatalf("%+v", p)
				}
			}},
		{"defect 6: pool gone: Lost, no new hold", view(testAddress(ip, Finalizer), func(v *AddressView) { v.Pool = nil }),
			func(t *testing.T, p AddressPlan) {
				c := cond(p, ipamv1.ConditionLost)
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonPoolNotFound || p.CreateHold != nil {
					t.Fatalf("%+v %+v", c, p)
				}
				if len(p.Events) != 1 || p.Events[0].Reason != ReasonLost || !p.Events[0].Warning {
					t.Fatalf("%+v", p.Events)
				}
			}},
		{"defect 6: pool shrunk past the IP: Lost", view(testAddress(ip, Finalizer), func(v *AddressView) { v.Pool = testPool("203.0.113.8/29") }),
			func(t *testing.T, p AddressPlan) {
				if c := cond(p, ipamv1.ConditionLost); c == nil || c.Reason != ReasonOutsidePool {
					t.Fatalf("%+v", c)
				}
			}},
		{"defect 6: a range that still includes the IP: not Lost", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = testPool("203.0.113.5-203.0.113.6")
			v.Holds = []*corev1.Service{hold(name, ip, true)}
		}), func(t *testing.T, p AddressPlan) {
			if cond(p, ipamv1.ConditionLost) != nil {
				t.Fatal("Lost")
			}
		}},
		{"defect 6: Lost clears when servable again", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionLost, Status: metav1.ConditionTrue, Reason: ReasonPoolNotFound}}
			return a
		}(), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if c := cond(p, ipamv1.ConditionLost); c == nil || c.Status != metav1.ConditionFalse {
				t.Fatalf("%+v", c)
			}
		}},
		{"finding 6: Lost (held): a scheduled re-check, capped", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = nil
			v.Holds = []*corev1.Service{hold(name, ip, true)}
		}), func(t *testing.T, p AddressPlan) {
			if c := cond(p, ipamv1.ConditionLost); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatal("not Lost")
			}
			if p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("requeue %v", p.Requeue)
			}
		}},
		{"finding 6: Lost while attached: a scheduled re-check too", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = nil
			v.Attached = tenant
		}), func(t *testing.T, p AddressPlan) {
			if p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("requeue %v", p.Requeue)
			}
		}},
		{"finding 5: Lost that ends forgets the say-once memory", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionLost, Status: metav1.ConditionTrue, Reason: ReasonOutsidePool}}
			return a
		}(), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if len(p.Unsay) != 1 || p.Unsay[0].Obj == nil || p.Unsay[0].Topic != ReasonLost {
				t.Fatalf("%+v", p.Unsay)
			}
		}},
		{"finding 5: a Conflict that resolves forgets what was said on the address and the Services", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionConflict, Status: metav1.ConditionTrue, Reason: ReasonHeldByOther}}
			return a
		}(), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			var onAddr, onSvcs bool
			for _, u := range p.Unsay {
				onAddr = onAddr || (u.Obj != nil && u.Topic == ipamv1.ConditionConflict)
				onSvcs = onSvcs || (u.Obj == nil && u.Topic == ReasonServiceConflict+"/"+name && len(u.Keep) == 0)
			}
			if !onAddr || !onSvcs {
				t.Fatalf("%+v", p.Unsay)
			}
		}},
		{"finding 5: a Conflict that goes on keeps the memory of the Services still wrongful", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionConflict, Status: metav1.ConditionTrue, Reason: ReasonHeldByOther}}
			return a
		}(), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, true)}
			v.Holders = []Holder{{Svc: requesting(svc("t", "thief", "thief-uid", ip), ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.Unsay) != 1 || len(p.Unsay[0].Keep) != 1 || p.Unsay[0].Keep[0].Name != "thief" {
				t.Fatalf("%+v", p.Unsay)
			}
		}},
		{"defect 8: Lost while attached: the pin stays", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = nil
			v.Attached = tenant
		}), func(t *testing.T, p AddressPlan) {
			if p.Status != nil && p.Status.AttachedTo != nil && p.Status.AttachedTo.Name != "web" {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionLost); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatal("not Lost")
			}
		}},
		{"a wrongful holder: Conflict and warnings on both", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Holders = []Holder{{Svc: requesting(svc("x", "thief", "thief", ip), ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			c := cond(p, ipamv1.ConditionConflict)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonHeldByOther {
				t.Fatalf("%+v", c)
			}
			if len(p.Events) != 2 {
				t.Fatalf("%+v", p.Events)
			}
		}},
		{"issue 13: a MetalLB Service that requests nothing and shows the IP is cleared, no conflict, the hold waits", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holders = []Holder{{Svc: svc("x", "former", "former", ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 1 || p.ClearIngress[0].Svc.Name != "former" {
				t.Fatalf("clearIngress %+v", p.ClearIngress)
			}
			if cond(p, ipamv1.ConditionConflict) != nil || p.CreateHold != nil {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonReleasing {
				t.Fatalf("%+v", c)
			}
			// Said once the clear succeeded, not before.
			if e := p.ClearIngress[0].Said; e.Reason != ReasonStaleIngressCleared || !e.Warning || len(p.Events) != 0 {
				t.Fatalf("%+v %+v", e, p.Events)
			}
		}},
		{"issue 13: a parked Service (the chart's parking pool) showing the IP is stale too", view(testAddress(ip, Finalizer), func(v *AddressView) {
			s := svc("x", "parked", "parked", ip)
			s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
			v.Holders = []Holder{{Svc: s, InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 1 || cond(p, ipamv1.ConditionConflict) != nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 29 defect 2: the class's pool shrunk past the IP, which an auto-assigning pool now serves: never cleared (Lost), a Conflict that says so", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = testPool("203.0.113.8/29") // no longer includes .5; autoAssign: false still
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Holders = []Holder{{Svc: svc("x", "plain", "plain", ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatalf("cleared the status of %s, which MetalLB serves from another pool", p.ClearIngress[0].Svc.Name)
			}
			for _, e := range p.Events {
				if e.Reason == ReasonStaleIngressCleared {
					t.Fatalf("said %+v", e)
				}
			}
			if c := cond(p, ipamv1.ConditionLost); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonOutsidePool {
				t.Fatalf("lost %+v", c)
			}
			c := cond(p, ipamv1.ConditionConflict)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "x/plain") {
				t.Fatalf("conflict %+v", c)
			}
			for _, e := range p.Events {
				if e.Reason == ReasonServiceConflict && (strings.Contains(e.Message, "annotation") || !strings.Contains(e.Message, "pool")) {
					t.Errorf("the Warning on the Service blames a request it does not make: %q", e.Message)
				}
			}
		}},
		{"issue 29 defect 2: the class's pool gone: never cleared", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Pool = nil
			v.Holders = []Holder{{Svc: svc("x", "plain", "plain", ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatal("cleared")
			}
		}},
		{"issue 13 review: with an auto-assigning pool MetalLB may hand the IP out unasked: a Conflict, not a clear", view(testAddress(ip, Finalizer), func(v *AddressView) {
			yes := true
			v.Pool.Spec.AutoAssign = &yes
			v.Holders = []Holder{{Svc: svc("x", "former", "former", ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatal("cleared")
			}
			if c := cond(p, ipamv1.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("%+v", c)
			}
		}},
		{"issue 13 review: cleared a moment ago: wait (no write, no Conflict), look again when due", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holders = []Holder{{Svc: svc("x", "former", "former", ip), InIngress: true}}
			v.Cleared = map[types.UID][]time.Time{"former": {v.Now.Add(-10 * time.Second)}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 || cond(p, ipamv1.ConditionConflict) != nil || p.CreateHold != nil {
				t.Fatalf("%+v", p)
			}
			if p.Requeue <= 0 || p.Requeue > clearEvery-10*time.Second {
				t.Fatalf("requeue %v", p.Requeue)
			}
		}},
		{"a stale holder cleared a moment ago beside a hold MetalLB has not served: look again when the clear is due, not at the hold's later schedule", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Now = t0.Add(5 * time.Minute)
			h := hold(name, ip, false) // five minutes old: its own look is a minute away
			h.Annotations[AnnotationNudge] = v.Now.Add(-10 * time.Second).Format(time.RFC3339Nano)
			v.Holds = []*corev1.Service{h}
			v.Holders = []Holder{{Svc: svc("x", "former", "former", ip), InIngress: true}}
			v.Cleared = map[types.UID][]time.Time{"former": {v.Now.Add(-10 * time.Second)}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 || p.Nudge != nil {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
				t.Fatalf("%+v", c)
			}
			if p.Requeue <= 0 || p.Requeue > clearEvery-10*time.Second {
				t.Fatalf("requeue %v: the clear is due in %v", p.Requeue, clearEvery-10*time.Second)
			}
		}},
		{"issue 13 review: cleared clearLimit times and back again: something keeps writing it, a Conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Holders = []Holder{{Svc: svc("x", "former", "former", ip), InIngress: true}}
			v.Cleared = map[types.UID][]time.Time{"former": {v.Now.Add(-3 * time.Minute), v.Now.Add(-2 * time.Minute), v.Now.Add(-time.Minute)}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatal("cleared")
			}
			if c := cond(p, ipamv1.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("%+v", c)
			}
		}},
		{"issue 13 review: the attached Service showing the IP without the marker is never cleared", view(testAddress(ip, Finalizer), func(v *AddressView) {
			web := svc("t", "web", "web-uid", ip)
			v.Attached = web
			v.Holders = []Holder{{Svc: web, InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 || cond(p, ipamv1.ConditionConflict) != nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"issue 13: a Service that requests the IP, or that another implementation serves, stays a conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			lbIP := svc("x", "lbip", "lbip", ip)
			lbIP.Spec.LoadBalancerIP = ip
			pool := svc("x", "pool", "pool", ip)
			pool.Annotations[metallb.LegacyPrefix+"address-pool"] = "other"
			shared := svc("x", "shared", "shared", ip)
			shared.Annotations[metallb.AnnotationAllowSharedIP] = "k"
			other := svc("x", "other", "other", ip)
			class := "example.com/lb"
			other.Spec.LoadBalancerClass = &class
			nodePort := svc("x", "np", "np", ip)
			nodePort.Spec.Type = corev1.ServiceTypeNodePort
			for _, s := range []*corev1.Service{requesting(svc("x", "pin", "pin", ip), ip), lbIP, pool, shared, other, nodePort} {
				v.Holders = append(v.Holders, Holder{Svc: s, InIngress: true})
			}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatalf("cleared %s", p.ClearIngress[0].Svc.Name)
			}
			c := cond(p, ipamv1.ConditionConflict)
			if c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("%+v", c)
			}
			for _, n := range []string{"pin", "lbip", "pool", "shared", "other", "np"} {
				if !strings.Contains(c.Message, "x/"+n) {
					t.Errorf("Conflict does not name %s: %s", n, c.Message)
				}
			}
		}},
		{"issue 13: the attached Service, an adopting one, one being unpinned and the driver's own are never cleared", view(testAddress(ip, Finalizer), func(v *AddressView) {
			adopter := svc("t", "adopter", "adopter", ip)
			unpinning := svc("t", "unpinning", "unpinning", ip)
			unpinning.Annotations[AnnotationReleasing] = "203.0.113.9"
			release := svc(testDriverNS, "release", "release", ip)
			release.Labels[LabelRole] = RoleRelease
			v.Holders = []Holder{{Svc: adopter, InIngress: true, LinksToClaim: true}, {Svc: unpinning, InIngress: true},
				{Svc: release, InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if len(p.ClearIngress) != 0 {
				t.Fatalf("cleared %s", p.ClearIngress[0].Svc.Name)
			}
		}},
		{"issue 16: an external IP is a conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, true)}
			v.Holders = []Holder{{Svc: svc("x", "mitm", "mitm"), InExternalIPs: true}}
		}), func(t *testing.T, p AddressPlan) {
			if c := cond(p, ipamv1.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue {
				t.Fatalf("%+v", c)
			}
		}},
		{"conflict resolved", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionConflict, Status: metav1.ConditionTrue, Reason: ReasonHeldByOther}}
			return a
		}(), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if c := cond(p, ipamv1.ConditionConflict); c == nil || c.Status != metav1.ConditionFalse {
				t.Fatalf("%+v", c)
			}
		}},
		{"defect 4/5: a Service re-pinned elsewhere or being unpinned is no conflict, and the hold waits", view(testAddress(ip, Finalizer), func(v *AddressView) {
			moved := pinned(svc("t", "web", "web-uid", ip), "203.0.113.9")
			v.Holders = []Holder{{Svc: moved, InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if cond(p, ipamv1.ConditionConflict) != nil || p.CreateHold != nil || p.Requeue == 0 {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonReleasing {
				t.Fatalf("%+v", c)
			}
		}},
		{"defect 5: a Service still pinned to the IP in a lagging view, not attached: no conflict, the hold waits", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holders = []Holder{{Svc: pinned(svc("t", "web", "web-uid", ip), ip), InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if cond(p, ipamv1.ConditionConflict) != nil || p.CreateHold != nil {
				t.Fatalf("%+v", p)
			}
		}},
		{"released record: no conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			s := svc("t", "web", "web-uid", ip)
			s.Annotations[AnnotationReleasing] = ip
			v.Holders = []Holder{{Svc: s, InIngress: true}}
		}), func(t *testing.T, p AddressPlan) {
			if cond(p, ipamv1.ConditionConflict) != nil {
				t.Fatal("conflict")
			}
		}},
		{"adopting an admin pin: no hold, no conflict", view(testAddress(ip, Finalizer), func(v *AddressView) {
			s := svc("t", "web", "web-uid", ip)
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip
			v.Holders = []Holder{{Svc: s, InIngress: true, LinksToClaim: true}}
		}), func(t *testing.T, p AddressPlan) {
			if p.CreateHold != nil || cond(p, ipamv1.ConditionConflict) != nil {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAdopting {
				t.Fatalf("%+v", c)
			}
			// finding 6: nothing waits on an event alone.
			if p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("adopting without a re-check: %v", p.Requeue)
			}
		}},
		{"settled: no writes", view(func() *ipamv1.IPAddress {
			a := testAddress(ip, Finalizer)
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: ReasonHeld,
				Message: "held by placeholder " + testDriverNS + "/" + HoldName(name)}}
			return a
		}(), func(v *AddressView) { v.Holds = []*corev1.Service{hold(name, ip, true)} }), func(t *testing.T, p AddressPlan) {
			if p.Status != nil || p.AddFinalizer || p.CreateHold != nil || p.PinHold != nil || len(p.Events) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, PlanAddress(tc.view)) })
	}
}

func TestPoolAddresses(t *testing.T) {
	p := testPool("203.0.113.0/30", "198.51.100.10-198.51.100.19", "2001:db8::/126")
	if sizes := PoolSizes(p); len(sizes) != 2 || sizes[ipamv1.IPv4].Int64() != 4+10 || sizes[ipamv1.IPv6].Int64() != 4 {
		t.Fatalf("sizes %v", sizes)
	}
	for ip, want := range map[string]bool{"203.0.113.3": true, "203.0.113.4": false, "198.51.100.19": true, "198.51.100.20": false,
		"2001:db8::3": true, "2001:db8::4": false} {
		if poolContains(p, netip.MustParseAddr(ip)) != want {
			t.Errorf("%s: want %v", ip, want)
		}
	}
	if poolContains(testPool("bogus"), netip.MustParseAddr("203.0.113.1")) {
		t.Fatal("an unparsable pool contains nothing")
	}
}

// A class's capacity: per family, the pool's size, the class's addresses and the rest, never
// below 0; an IPv6 range larger than an int64 reads as the largest int64; a family only the
// class's addresses have is shown with size 0.
func TestPoolCapacity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pool     *metallb.IPAddressPool
		reserved map[ipamv1.IPFamily]int64
		want     []ipamv1.FamilyCapacity
	}{
		{"both families", testPool("203.0.113.0/30", "198.51.100.10-198.51.100.19", "2001:db8::/126"),
			map[ipamv1.IPFamily]int64{ipamv1.IPv4: 3},
			[]ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: 14, Reserved: 3, Free: 11}, {Family: ipamv1.IPv6, Size: 4, Free: 4}}},
		{"more reserved than the pool holds", testPool("203.0.113.0/31"), map[ipamv1.IPFamily]int64{ipamv1.IPv4: 5},
			[]ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: 2, Reserved: 5}}},
		{"a huge IPv6 range", testPool("2001:db8::/56"), nil,
			[]ipamv1.FamilyCapacity{{Family: ipamv1.IPv6, Size: math.MaxInt64, Free: math.MaxInt64}}},
		{"an address outside the pool's families", testPool("203.0.113.0/30"), map[ipamv1.IPFamily]int64{ipamv1.IPv6: 1},
			[]ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: 4, Free: 4}, {Family: ipamv1.IPv6, Reserved: 1}}},
		{"an unparsable pool", testPool("bogus"), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PoolCapacity(tc.pool, tc.reserved); !slices.Equal(got, tc.want) {
				t.Fatalf("capacity %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNudgeDue(t *testing.T) {
	const every = 3 * time.Second
	nudged := func(at time.Time) *corev1.Service {
		s := svc(testDriverNS, "p", "p")
		s.Annotations[AnnotationNudge] = at.Format(time.RFC3339Nano)
		return s
	}
	var none time.Time
	for _, tc := range []struct {
		name     string
		s        *corev1.Service
		now      time.Time
		failedAt time.Time
		// passed is how far MetalLB has got (metallbProgress).
		passed MetallbMark
		due    bool
		wait   time.Duration // 0: any positive wait up to a minute
	}{
		{"young: wait for nudgeAfter", svc(testDriverNS, "p", "p"), t0.Add(time.Second), t0, MetallbMark{}, false, 2 * time.Second},
		{"refused by MetalLB, nudgeAfter passed: nudge", svc(testDriverNS, "p", "p"), t0.Add(4 * time.Second), t0, MetallbMark{}, true, 0},
		{"finding 12: not refused, merely waiting: no nudge, look again", svc(testDriverNS, "p", "p"), t0.Add(4 * time.Second), none, MetallbMark{Passed: t0.Add(time.Second)}, false, 0},
		{"finding 12: a refusal older than the last nudge does not count", nudged(t0.Add(10 * time.Second)), t0.Add(20 * time.Second), t0, MetallbMark{}, false, 0},
		{"refused again after the last nudge: nudge", nudged(t0.Add(10 * time.Second)), t0.Add(20 * time.Second), t0.Add(11 * time.Second), MetallbMark{}, true, 0},
		{"silent for a minute, MetalLB went past it (an event dropped): nudge anyway", svc(testDriverNS, "p", "p"), t0.Add(time.Minute), none, MetallbMark{Passed: t0.Add(time.Second)}, true, 0},
		{"issue 12: silent for a minute, MetalLB has not got to it yet (its backlog): no nudge", svc(testDriverNS, "p", "p"), t0.Add(time.Minute), none, MetallbMark{Passed: t0.Add(-time.Second)}, false, 0},
		{"issue 12: silent for a minute, MetalLB served nothing yet: no nudge", svc(testDriverNS, "p", "p"), t0.Add(time.Minute), none, MetallbMark{}, false, 0},
		{"issue 12: MetalLB served only placeholders touched with it: not past it", svc(testDriverNS, "p", "p"), t0.Add(2 * time.Minute), none, MetallbMark{Passed: t0}, false, 0},
		{"silent for silenceCap, MetalLB never seen serving: nudge", svc(testDriverNS, "p", "p"), t0.Add(silenceCap), none, MetallbMark{}, true, 0},
		{"silent for a minute, MetalLB went past it while still busy: nudge (the minute path is not held back by a moving mark)",
			svc(testDriverNS, "p", "p"), t0.Add(time.Minute), none, MetallbMark{Passed: t0.Add(time.Second), MovedAt: t0.Add(time.Minute)}, true, 0},
		{"silent for silenceCap, MetalLB stalled exactly silenceCap ago: nudge",
			svc(testDriverNS, "p", "p"), t0.Add(silenceCap + time.Minute), none, MetallbMark{Passed: t0.Add(-time.Second), MovedAt: t0.Add(time.Minute)}, true, 0},
		{"nudged, then silent for a minute while MetalLB went past the nudge: nudge again", nudged(t0.Add(time.Hour)), t0.Add(time.Hour + time.Minute), none, MetallbMark{Passed: t0.Add(time.Hour + time.Second)}, true, 0},
		{"waiting its turn at 40 s: look again when its age has doubled", svc(testDriverNS, "p", "p"), t0.Add(40 * time.Second), none, MetallbMark{}, false, 40 * time.Second},
		{"old: backoff capped at a minute", nudged(t0.Add(time.Hour)), t0.Add(time.Hour + time.Second), t0.Add(time.Hour), MetallbMark{}, false, 0},
		{"issue 12: silent past silenceCap while MetalLB keeps serving the placeholders before it (its backlog): no nudge",
			svc(testDriverNS, "p", "p"), t0.Add(6 * time.Minute), none, MetallbMark{Passed: t0.Add(-time.Second), MovedAt: t0.Add(6*time.Minute - 10*time.Second)}, false, 0},
		{"silent past silenceCap, and MetalLB has served nothing for silenceCap: nudge",
			svc(testDriverNS, "p", "p"), t0.Add(6 * time.Minute), none, MetallbMark{Passed: t0.Add(-time.Second), MovedAt: t0.Add(30 * time.Second)}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, wait := nudgeDue(tc.s, tc.now, every, tc.failedAt, tc.passed)
			if due != tc.due || wait <= 0 || wait > time.Minute || (tc.wait != 0 && wait != tc.wait) {
				t.Fatalf("nudgeDue = %v, %v; want %v, %v", due, wait, tc.due, tc.wait)
			}
		})
	}
}

func TestPlanAddressWhileItsPlaceholderSettles(t *testing.T) {
	const ip = "203.0.113.5"
	p := provisioning("claim-uid", ipamv1.IPv4, ip)
	pl := PlanAddress(view(testAddress(ip, Finalizer), func(v *AddressView) {
		v.Holders = []Holder{{Svc: p, InIngress: true}}
	}))
	if pl.CreateHold != nil || pl.Status != nil || len(pl.Events) != 0 || pl.Requeue == 0 {
		t.Fatalf("the provisioning placeholder becoming the hold is no conflict and needs no second hold: %+v", pl)
	}
}

func TestOrphaned(t *testing.T) {
	const ip = "203.0.113.5"
	now := metav1.NewTime(t0)
	deletingAddr := func(finalizers ...string) *ipamv1.IPAddress {
		a := testAddress(ip, finalizers...)
		a.DeletionTimestamp = &now
		return a
	}
	for _, tc := range []struct {
		name   string
		label  string
		addr   *ipamv1.IPAddress
		orphan bool
	}{
		{"no address of that name", testAddress(ip).Name, nil, true},
		{"no address label at all", "", nil, true},
		{"a live address", testAddress(ip).Name, testAddress(ip, Finalizer), false},
		{"deleted while the core protects it", testAddress(ip).Name, deletingAddr(ipamv1.FinalizerAddress, Finalizer), false},
		{"deleted, core let go, teardown not done yet: the address's pass does it", testAddress(ip).Name, deletingAddr(Finalizer), false},
		{"deleted past teardown (another finalizer keeps it)", testAddress(ip).Name, deletingAddr("example.com/other"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Orphaned(tc.label, tc.addr); got != tc.orphan {
				t.Fatalf("orphaned = %v, want %v", got, tc.orphan)
			}
		})
	}
}
