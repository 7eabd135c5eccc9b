package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// annotationKeys a fuzzed Service may carry: every key a skip rule reads, look-alikes in
// another case or prefix (which are other keys, and must not skip), and unrelated ones.
var annotationKeys = []string{
	ipamv1.AnnotationServiceClaim, ipamv1.AnnotationAutoClaim, "local.sdn.cozystack.io/ip-address-class",
	"metallb.io/address-pool", "metallb.io/loadBalancerIPs", "metallb.io/allow-shared-ip",
	"metallb.universe.tf/address-pool", "metallb.universe.tf/loadBalancerIPs", "metallb.universe.tf/allow-shared-ip",
	"Metallb.io/address-pool", "metallb.io/loadbalancerips", "metallb.example/address-pool", "example.com/anything",
}

var annotationValues = []string{"", "false", "FALSE", "False", "true", "web", "203.0.113.7", " false", "pool-a"}

// skipModel is the product page's (and docs/design.md#auto-claim-and-the-link-rule) list of reasons
// not to auto-claim, written independently of the code: not a LoadBalancer, being deleted, names a
// claim, opted out, a loadBalancerClass, spec.loadBalancerIP, a MetalLB pool/pin/sharing annotation
// under either prefix, or an address already in status that the Service had before auto-claim
// applied to it (created before enabledAt; a zero enabledAt — the Service names its class — never
// skips).
func skipModel(svc *corev1.Service, enabledAt time.Time) bool {
	ann := svc.Annotations
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil || ann[ipamv1.AnnotationServiceClaim] != "" ||
		strings.ToLower(ann[ipamv1.AnnotationAutoClaim]) == "false" ||
		(svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != "") || svc.Spec.LoadBalancerIP != "" ||
		(len(svc.Status.LoadBalancer.Ingress) > 0 && !enabledAt.IsZero() && svc.CreationTimestamp.Time.Before(enabledAt)) {
		return true
	}
	for _, prefix := range []string{"metallb.io/", "metallb.universe.tf/"} {
		for _, name := range []string{"address-pool", "loadBalancerIPs", "allow-shared-ip"} {
			if _, ok := ann[prefix+name]; ok {
				return true
			}
		}
	}
	return false
}

// fuzzService builds a Service from fuzz input: each byte of choices picks an annotation key
// and value; flags pick the type and the other fields the rules read.
func fuzzService(choices []byte, flags uint8, lbClass, lbIP string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web"}}
	switch flags & 3 {
	case 0, 1:
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	case 2:
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	case 3:
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}
	if flags&4 != 0 {
		svc.DeletionTimestamp = &metav1.Time{}
	}
	if flags&8 != 0 {
		svc.Spec.LoadBalancerClass = &lbClass
	}
	if flags&16 != 0 {
		svc.Spec.LoadBalancerIP = lbIP
	}
	if flags&32 != 0 {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}}
	}
	for i := 0; i+1 < len(choices); i += 2 {
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[annotationKeys[int(choices[i])%len(annotationKeys)]] = annotationValues[int(choices[i+1])%len(annotationValues)]
	}
	return svc
}

// Random Services: auto-claim skips exactly those the skip rules name, and always says why.
func FuzzAutoClaimSkip(f *testing.F) {
	f.Add([]byte{}, uint8(0), "", "")
	f.Add([]byte{0, 5}, uint8(0), "", "")
	f.Add([]byte{1, 1}, uint8(0), "", "")
	f.Add([]byte{1, 2}, uint8(1), "", "")
	f.Add([]byte{3, 0, 12, 4}, uint8(0), "", "")
	f.Add([]byte{9, 4}, uint8(0), "", "")
	f.Add([]byte{}, uint8(8), "", "")
	f.Add([]byte{}, uint8(8), "example.com/lb", "")
	f.Add([]byte{}, uint8(16), "", "203.0.113.7")
	f.Add([]byte{}, uint8(32), "", "")
	f.Add([]byte{}, uint8(32|64), "", "")
	f.Add([]byte{}, uint8(32|128), "", "")
	f.Add([]byte{}, uint8(2), "", "")
	f.Fuzz(func(t *testing.T, choices []byte, flags uint8, lbClass, lbIP string) {
		svc := fuzzService(choices, flags, lbClass, lbIP)
		// The Service was created at created; auto-claim was enabled an hour after it (it had its
		// address before), an hour before it (an address in status is MetalLB's race), or the
		// Service names its class itself (zero).
		created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		svc.CreationTimestamp = metav1.NewTime(created)
		enabledAt := created.Add(-time.Hour)
		switch {
		case flags&128 != 0:
			enabledAt = time.Time{}
		case flags&64 != 0:
			enabledAt = created.Add(time.Hour)
		}
		got := autoClaimSkip(svc, enabledAt)
		if want := skipModel(svc, enabledAt); (got != "") != want {
			t.Fatalf("autoClaimSkip = %q, the skip rules say skip=%v, for type=%s deleting=%v annotations=%v lbClass=%v lbIP=%q ingress=%v",
				got, want, svc.Spec.Type, svc.DeletionTimestamp != nil, svc.Annotations, svc.Spec.LoadBalancerClass, svc.Spec.LoadBalancerIP,
				svc.Status.LoadBalancer.Ingress)
		}
		if fam := claimFamily(svc); fam != ipamv1.IPv4 && fam != ipamv1.IPv6 && fam != ipamv1.Dual {
			t.Fatalf("claimFamily = %q", fam)
		}
	})
}
