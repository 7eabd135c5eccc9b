package driverkit

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestMarkAutoClaim(t *testing.T) {
	yes := true
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "s", Controller: &yes}}
	class := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	for _, tc := range []struct {
		name   string
		claim  metav1.ObjectMeta
		marked bool
	}{
		{"auto-claim", metav1.ObjectMeta{Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}, OwnerReferences: owner}, true},
		{"owner reference removed by an admin", metav1.ObjectMeta{Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}}, false},
		{"plain claim", metav1.ObjectMeta{}, false},
	} {
		claim := &ipamv1.IPAddressClaim{ObjectMeta: tc.claim}
		claim.Namespace, claim.Name = "ns", "web"
		a := MarkAutoClaim(PreBoundAddress(netip.MustParseAddr("203.0.113.1"), class, claim, "fin"), claim)
		if got := a.Annotations[ipamv1.AnnotationAutoClaim] == "true"; got != tc.marked {
			t.Errorf("%s: marked %v, want %v", tc.name, got, tc.marked)
		}
	}
}
