package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestAutoClaimSkipRules(t *testing.T) {
	lb := func(mutate func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		mutate(s)
		return s
	}
	class := "internal"
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		skip bool
	}{
		{"plain LoadBalancer", lb(func(*corev1.Service) {}), false},
		{"class annotation alone", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationServiceClass] = "x" }), false},
		{"ClusterIP", lb(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), true},
		{"names a claim", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationServiceClaim] = "c" }), true},
		{"opted out", lb(func(s *corev1.Service) { s.Annotations[ipamv1.AnnotationAutoClaim] = "false" }), true},
		{"loadBalancerClass", lb(func(s *corev1.Service) { s.Spec.LoadBalancerClass = &class }), true},
		{"loadBalancerIP", lb(func(s *corev1.Service) { s.Spec.LoadBalancerIP = "203.0.113.1" }), true},
		{"address in status, no class known", lb(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}
		}), false},
		{"MetalLB pool", lb(func(s *corev1.Service) { s.Annotations["metallb.io/address-pool"] = "p" }), true},
		{"MetalLB pin, legacy prefix", lb(func(s *corev1.Service) { s.Annotations["metallb.universe.tf/loadBalancerIPs"] = "x" }), true},
		{"MetalLB sharing", lb(func(s *corev1.Service) { s.Annotations["metallb.io/allow-shared-ip"] = "k" }), true},
	} {
		if got := autoClaimSkip(tc.svc, nil) != ""; got != tc.skip {
			t.Errorf("%s: skip=%v (%q), want %v", tc.name, got, autoClaimSkip(tc.svc, nil), tc.skip)
		}
	}
}

// An address in status skips a Service only when it predates the auto-claim class: a newer
// Service's address came from a race with MetalLB, and a Service naming its class asked.
func TestAutoClaimSkipForAnAddress(t *testing.T) {
	cls := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "auto", CreationTimestamp: metav1.NewTime(t0)}}
	svc := func(created time.Time, withAddress bool, annotations map[string]string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: metav1.NewTime(created), Annotations: annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		if withAddress {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.9"}}
		}
		return s
	}
	named := map[string]string{ipamv1.AnnotationServiceClass: "auto"}
	for _, tc := range []struct {
		name  string
		svc   *corev1.Service
		class *ipamv1.IPAddressClass
		skip  bool
	}{
		{"older Service with an address", svc(t0.Add(-time.Hour), true, nil), cls, true},
		{"older Service without an address", svc(t0.Add(-time.Hour), false, nil), cls, false},
		{"newer Service that won an address in a race", svc(t0.Add(time.Second), true, nil), cls, false},
		{"created in the same second", svc(t0, true, nil), cls, false},
		{"older Service naming its class", svc(t0.Add(-time.Hour), true, named), nil, false},
	} {
		if got := autoClaimSkip(tc.svc, tc.class) != ""; got != tc.skip {
			t.Errorf("%s: skip=%v (%q), want %v", tc.name, got, autoClaimSkip(tc.svc, tc.class), tc.skip)
		}
	}
}

func TestClaimFamily(t *testing.T) {
	for fams, want := range map[string]ipamv1.IPFamily{"": ipamv1.IPv4, "IPv4": ipamv1.IPv4, "IPv6": ipamv1.IPv6, "IPv6,IPv4": ipamv1.Dual} {
		svc := &corev1.Service{}
		if fams != "" {
			for _, f := range splitComma(fams) {
				svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPFamily(f))
			}
		}
		if got := claimFamily(svc); got != want {
			t.Errorf("claimFamily(%s) = %s, want %s", fams, got, want)
		}
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
