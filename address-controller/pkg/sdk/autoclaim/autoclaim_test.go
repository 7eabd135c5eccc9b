package autoclaim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestSkipAsked(t *testing.T) {
	lb := func(mutate func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		mutate(s)
		return s
	}
	lbClass := "internal"
	now := metav1.NewTime(time.Now())
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		skip bool
	}{
		{"plain LoadBalancer", lb(func(*corev1.Service) {}), false},
		{"an address in status is not something its author asked for", lb(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}}
		}), false},
		{"class annotation", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationServiceClass] = "x" }), false},
		{"ClusterIP", lb(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), true},
		{"being deleted", lb(func(s *corev1.Service) { s.DeletionTimestamp = &now }), true},
		{"names a claim", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationServiceClaim] = "c" }), true},
		{"opted out", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationAutoClaim] = "False" }), true},
		{"a driver's own Service (its label, whatever the value)", lb(func(s *corev1.Service) { s.Labels = map[string]string{ipamv1.LabelDriverService: ""} }), true},
		{"loadBalancerClass", lb(func(s *corev1.Service) { s.Spec.LoadBalancerClass = &lbClass }), true},
		{"loadBalancerIP", lb(func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.1" }), true},
		{"MetalLB pool", lb(func(s *corev1.Service) { s.Annotations["metallb.io/address-pool"] = "p" }), true},
		{"MetalLB pin, legacy prefix", lb(func(s *corev1.Service) { s.Annotations["metallb.universe.tf/loadBalancerIPs"] = "x" }), true},
		{"MetalLB sharing", lb(func(s *corev1.Service) { s.Annotations["metallb.io/allow-shared-ip"] = "k" }), true},
		{"parked by a driver's admission policy: auto-claim still serves it", lb(func(s *corev1.Service) { s.Annotations[ParkingAnnotation] = ParkingPool }), false},
		{"the parking value under the legacy prefix is an admin's pool choice", lb(func(s *corev1.Service) { s.Annotations["metallb.universe.tf/address-pool"] = ParkingPool }), true},
		{"parked and pinned", lb(func(s *corev1.Service) {
			s.Annotations[ParkingAnnotation] = ParkingPool
			s.Annotations["metallb.io/loadBalancerIPs"] = "203.0.113.1"
		}), true},
	} {
		if got := SkipAsked(tc.svc) != ""; got != tc.skip {
			t.Errorf("%s: skip=%v (%q), want %v", tc.name, got, SkipAsked(tc.svc), tc.skip)
		}
	}
}

func TestHadAddressBefore(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	svc := func(created time.Time, withAddress bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		if withAddress {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.9"}}
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		enabled time.Time
		want    bool
	}{
		{"older Service with an address", svc(t0.Add(-time.Hour), true), t0, true},
		{"older Service without an address", svc(t0.Add(-time.Hour), false), t0, false},
		{"newer Service that won an address in a race", svc(t0.Add(time.Second), true), t0, false},
		{"created in the second auto-claim was enabled: the older one", svc(t0, true), t0.Add(300 * time.Millisecond), true},
		{"no enabling time (the Service names its class)", svc(t0.Add(-time.Hour), true), time.Time{}, false},
	} {
		if got := HadAddressBefore(tc.svc, tc.enabled); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
