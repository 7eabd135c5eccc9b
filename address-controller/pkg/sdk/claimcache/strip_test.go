package claimcache

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestStripKeepsWhatTheControllersRead(t *testing.T) {
	yes := true
	in := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c", UID: "u", ResourceVersion: "7", Generation: 2,
			Labels: map[string]string{"l": "1"},
			Annotations: map[string]string{"example.com/blob": strings.Repeat("x", 200<<10),
				ipamv1.AnnotationProvisioner: "d", ipamv1.AnnotationResolvedClass: strings.Repeat("c", 300), ipamv1.AnnotationAutoClaim: "true"},
			OwnerReferences: []metav1.OwnerReference{{Name: "other"}, {APIVersion: "v1", Kind: "Service", Name: "web", UID: "s", Controller: &yes}},
			Finalizers:      []string{"example.com/a", ipamv1.FinalizerClaim, "example.com/b"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "x"}}},
		Spec:   ipamv1.IPAddressClaimSpec{ClassName: "k", Family: ipamv1.Dual},
		Status: ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "k"},
	}
	out, _ := Strip(in)
	c := out.(*ipamv1.IPAddressClaim)
	if len(in.Annotations) != 4 || len(in.Finalizers) != 3 {
		t.Fatalf("Strip changed the object it was given")
	}
	if c.Name != "c" || c.UID != "u" || c.ResourceVersion != "7" || c.Generation != 2 || c.Spec != in.Spec || c.Status.ClassName != "k" ||
		c.Annotations[ipamv1.AnnotationProvisioner] != "d" || c.Annotations[ipamv1.AnnotationResolvedClass] != TooLong ||
		c.Annotations[ipamv1.AnnotationAutoClaim] != "true" || metav1.GetControllerOf(c) == nil || metav1.GetControllerOf(c).Name != "web" {
		t.Fatalf("lost what the controllers read: %+v", c.ObjectMeta)
	}
	if len(c.Annotations) != 3 || c.Labels != nil || len(c.OwnerReferences) != 1 || c.ManagedFields != nil {
		t.Fatalf("kept what the controllers never read: %+v", c.ObjectMeta)
	}
	if len(c.Finalizers) != 2 || c.Finalizers[0] != ipamv1.FinalizerClaim || !Trimmed(c) {
		t.Fatalf("finalizers %v: want the core's and the marker of others", c.Finalizers)
	}
	plain := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{ipamv1.FinalizerClaim}}}
	if out, _ := Strip(plain); Trimmed(out.(*ipamv1.IPAddressClaim)) {
		t.Fatal("a claim with only the core's finalizer reads as trimmed")
	}
}
