package driver

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// unitT0 is the creation time of the objects the unit tests of this package build.
var unitT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func testAddress(ip string, finalizers ...string) *ipamv1.IPAddress {
	return &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip)), Finalizers: finalizers,
			CreationTimestamp: metav1.NewTime(unitT0)},
		Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "k",
			ClaimRef: &ipamv1.ClaimReference{Namespace: "t", Name: "c", UID: "claim-uid"}},
	}
}

func svc(ns, name, uid string, ingress ...string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid),
		CreationTimestamp: metav1.NewTime(unitT0), Annotations: map[string]string{}, Labels: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func pinned(s *corev1.Service, pin string) *corev1.Service {
	s.Annotations[metallb.AnnotationLoadBalancerIPs] = pin
	s.Annotations[plan.AnnotationPinned] = "true"
	return s
}
