package plan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func TestParkingWanted(t *testing.T) {
	ours := ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "ours"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: Provisioner}}
	oursAuto := ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "ours-auto",
		Annotations: map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}}, Spec: ipamv1.IPAddressClassSpec{Provisioner: Provisioner}}
	theirsAuto := ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "theirs",
		Annotations: map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "other"}}
	accepted := []metav1.Condition{{Type: ipamv1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}
	notAccepted := oursAuto
	oursAuto.Status.Conditions, theirsAuto.Status.Conditions = accepted, accepted
	lb := func(ann map[string]string, mod ...func(*corev1.Service)) *corev1.Service {
		s := svc("t", "web", "web-uid")
		for k, v := range ann {
			s.Annotations[k] = v
		}
		for _, m := range mod {
			m(s)
		}
		return s
	}
	deleting := func(c ipamv1.IPAddressClass) ipamv1.IPAddressClass {
		now := metav1.NewTime(t0)
		c.DeletionTimestamp = &now
		return c
	}
	withAddress := func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}}
	}
	gold := func(c ipamv1.IPAddressClass) ipamv1.IPAddressClass {
		c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
		return c
	}
	servedElsewhere := func(c ipamv1.IPAddressClass) ipamv1.IPAddressClass {
		c.Status.ServedNamespaces = &ipamv1.NamespaceSet{Names: []string{"another-tenant"}}
		return c
	}
	class := "x"
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		linked  bool
		classes []ipamv1.IPAddressClass
		want    bool
	}{
		{"names a claim (even one that does not exist)", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}), false, nil, true},
		{"has its auto-claim", lb(nil), true, nil, true},
		{"already parked and naming a claim", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c", autoclaim.ParkingAnnotation: autoclaim.ParkingPool}), false, nil, true},
		{"names its class, of this driver", lb(map[string]string{ipamv1.AnnotationServiceClass: "ours"}), false, []ipamv1.IPAddressClass{ours}, true},
		{"names a class of another driver", lb(map[string]string{ipamv1.AnnotationServiceClass: "theirs"}), false, []ipamv1.IPAddressClass{ours, theirsAuto}, false},
		{"names a class that does not exist", lb(map[string]string{ipamv1.AnnotationServiceClass: "gone"}), false, []ipamv1.IPAddressClass{oursAuto}, false},
		{"no class named, an auto-claim class of this driver", lb(nil), false, []ipamv1.IPAddressClass{ours, oursAuto}, true},
		{"no class named, only another driver's auto-claim class", lb(nil), false, []ipamv1.IPAddressClass{ours, theirsAuto}, false},
		{"opted out", lb(map[string]string{ipamv1.AnnotationAutoClaim: "FALSE"}), false, []ipamv1.IPAddressClass{oursAuto}, false},
		{"opted out but naming a claim", lb(map[string]string{ipamv1.AnnotationAutoClaim: "false", ipamv1.AnnotationServiceClaim: "c"}), false, nil, true},
		{"had an address before auto-claim", lb(nil, withAddress), false, []ipamv1.IPAddressClass{oursAuto}, false},
		{"shows the address this driver is releasing", lb(map[string]string{AnnotationReleasing: "198.51.100.7"}, withAddress), false, []ipamv1.IPAddressClass{oursAuto}, true},
		{"auto-claimed and pinned by this driver, its claim just deleted (the unpin parks it)", pinned(lb(map[string]string{ipamv1.AnnotationServiceClass: "ours"}, withAddress), "198.51.100.7"), false, []ipamv1.IPAddressClass{ours}, true},
		{"no class named, the only marked class of this driver is being deleted", lb(nil), false, []ipamv1.IPAddressClass{deleting(oursAuto)}, false},
		{"no class named, the only marked class of this driver not accepted yet", lb(nil), false, []ipamv1.IPAddressClass{notAccepted}, true},
		{"names its class, being deleted: the core still claims from it", lb(map[string]string{ipamv1.AnnotationServiceClass: "ours"}), false, []ipamv1.IPAddressClass{deleting(ours)}, true},
		{"pinned by this driver", pinned(lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}, withAddress), "198.51.100.7"), true, nil, true},
		{"an admin's pin", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c", metallb.AnnotationLoadBalancerIPs: "198.51.100.7"}), true, nil, false},
		{"another pool", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c", autoclaim.ParkingAnnotation: "p"}), true, nil, false},
		{"a loadBalancerClass", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}, func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }), true, nil, false},
		{"spec.loadBalancerIP", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}, func(s *corev1.Service) { s.Spec.LoadBalancerIP = "198.51.100.7" }), true, nil, false},
		{"not a LoadBalancer", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), true, nil, false},
		{"the driver's own", lb(nil, func(s *corev1.Service) { s.Labels[LabelRole] = RoleHold }), true, nil, false},
	} {
		if got := ParkingWanted(tc.svc, tc.linked, tc.classes, nil); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// Auto-claim makes no claim from a class for a namespace it does not serve: no parking for one.
	for _, tc := range []struct {
		name     string
		svc      *corev1.Service
		classes  []ipamv1.IPAddressClass
		nsLabels map[string]string
		want     bool
	}{
		{"the auto-claim class does not select the namespace", lb(nil), []ipamv1.IPAddressClass{gold(oursAuto)}, nil, false},
		{"the auto-claim class selects the namespace", lb(nil), []ipamv1.IPAddressClass{gold(oursAuto)}, map[string]string{"tier": "gold"}, true},
		{"the named class's pool serves other namespaces only", lb(map[string]string{ipamv1.AnnotationServiceClass: "ours"}), []ipamv1.IPAddressClass{servedElsewhere(ours)}, nil, false},
		{"naming a claim, whatever the classes serve", lb(map[string]string{ipamv1.AnnotationServiceClaim: "c"}), []ipamv1.IPAddressClass{gold(oursAuto)}, nil, true},
	} {
		if got := ParkingWanted(tc.svc, false, tc.classes, tc.nsLabels); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPlanAttachParks(t *testing.T) {
	const ip = "203.0.113.5"
	parked := func(s *corev1.Service) *corev1.Service {
		s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
		return s
	}
	for _, tc := range []struct {
		name         string
		view         AttachView
		park, unpark bool
		leftAsItIs   bool
	}{
		{"a Pending claim: parked (with the detach, in the unpin's write when pinned)", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimPending))
			v.Park = true
			return v
		}(), true, false, false},
		{"a Pending claim, already parked: nothing", func() AttachView {
			v := attachViewOf(parked(tenantSvc()), boundClaim(ipamv1.ClaimPending))
			v.Park = true
			return v
		}(), false, false, false},
		{"parked, linked to nothing, no auto-claim of this driver: unparked", func() AttachView {
			s := parked(svc("t", "web", "web-uid"))
			return AttachView{Svc: s, Now: t0}
		}(), false, true, false},
		{"a Bound claim: the pin unparks, no write of its own", func() AttachView {
			v := attachViewOf(parked(tenantSvc()), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Park = true
			return v
		}(), false, false, true},
		{"attached to a Lost claim: keeps its pin, never parked", func() AttachView {
			v := attachViewOf(pinned(tenantSvc(), ip), boundClaim(ipamv1.ClaimLost, ip), attachedAddr(ip, "t", "web", "web-uid"))
			v.AttachedHere = v.Addrs
			v.Park = true
			return v
		}(), false, false, true},
		{"a plain Service: nothing", AttachView{Svc: svc("t", "web", "web-uid"), Now: t0}, false, false, false},
		{"parked and being deleted: left as it is (the policy might park it again)", func() AttachView {
			s := parked(svc("t", "web", "web-uid"))
			now := metav1.NewTime(t0)
			s.DeletionTimestamp = &now
			return AttachView{Svc: s, Now: t0}
		}(), false, false, true},
		{"parked, carrying the driver's role label in a tenant's namespace: left as it is", func() AttachView {
			s := parked(svc("t", "web", "web-uid"))
			s.Labels[LabelRole] = RoleHold
			return AttachView{Svc: s, Now: t0}
		}(), false, false, true},
	} {
		p := PlanAttach(tc.view)
		if p.Park != tc.park || p.unpark != tc.unpark {
			t.Errorf("%s: park %v unpark %v, want %v %v (%+v)", tc.name, p.Park, p.unpark, tc.park, tc.unpark, p)
		}
		if (tc.park || tc.unpark) && (p.Parked == nil || *p.Parked != tc.park) {
			t.Errorf("%s: the wanted state %v does not say %v", tc.name, p.Parked, tc.park)
		}
		if tc.leftAsItIs && p.Parked != nil {
			t.Errorf("%s: wants parked=%v, should leave it as it is", tc.name, *p.Parked)
		}
	}
}
