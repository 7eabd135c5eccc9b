package index

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A waiting claim is found under the class it waits for, as recorded by the tenant (spec), by
// the core's status, or by the core's stamp before it wrote a status; "" for one waiting for a
// default class; a Bound or deleted claim waits for nothing.
func TestClaimWaitingForClass(t *testing.T) {
	now := metav1.Now()
	claim := func(spec, status, stamped string, phase ipamv1.ClaimPhase) *ipamv1.IPAddressClaim {
		c := &ipamv1.IPAddressClaim{Spec: ipamv1.IPAddressClaimSpec{ClassName: spec},
			Status: ipamv1.IPAddressClaimStatus{ClassName: status, Phase: phase}}
		if stamped != "" {
			c.Annotations = map[string]string{ipamv1.AnnotationResolvedClass: stamped}
		}
		return c
	}
	deleting := claim("k", "", "", ipamv1.ClaimPending)
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		name  string
		claim *ipamv1.IPAddressClaim
		want  []string
	}{
		{"spec", claim("k", "other", "third", ipamv1.ClaimPending), []string{"k"}},
		{"status", claim("", "k", "other", ipamv1.ClaimPending), []string{"k"}},
		{"the stamp, before any status", claim("", "", "k", ipamv1.ClaimPending), []string{"k"}},
		{"nothing resolved: a default class", claim("", "", "", ipamv1.ClaimPending), []string{""}},
		{"Lost waits too", claim("k", "", "", ipamv1.ClaimLost), []string{"k"}},
		{"Bound", claim("k", "k", "", ipamv1.ClaimBound), nil},
		{"being deleted", deleting, nil},
	} {
		if got := claimWaitingForClass(tc.claim); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
