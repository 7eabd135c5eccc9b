package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// autoClaimSkip is the author's asking (autoclaim.SkipAsked, whose table is in pkg/sdk/autoclaim)
// or an address from before auto-claim was enabled (autoclaim.HadAddressBefore, likewise); this
// checks only how the two combine.
func TestAutoClaimSkipCombinesAskedAndEarlierAddress(t *testing.T) {
	svc := func(created time.Time, withAddress bool, ann map[string]string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: metav1.NewTime(created), Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		if withAddress {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.9"}}
		}
		return s
	}
	optOut := map[string]string{ipamv1.AnnotationAutoClaim: "false"}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		enabled time.Time
		want    string // a substring of the reason; "" for no skip
	}{
		{"plain LoadBalancer", svc(t0, false, nil), t0, ""},
		{"asked to be left alone", svc(t0.Add(time.Hour), false, optOut), t0, "opted out"},
		{"asked, and an older address: the asking is the reason", svc(t0.Add(-time.Hour), true, optOut), t0, "opted out"},
		{"an address from before enabling", svc(t0.Add(-time.Hour), true, nil), t0, "before auto-claim was enabled"},
		{"an address won in a race after enabling", svc(t0.Add(time.Second), true, nil), t0, ""},
	} {
		got := autoClaimSkip(tc.svc, tc.enabled)
		if (tc.want == "") != (got == "") || (tc.want != "" && !strings.Contains(got, tc.want)) {
			t.Errorf("%s: skip reason %q, want one saying %q", tc.name, got, tc.want)
		}
	}
}
