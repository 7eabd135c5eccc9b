package plan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The link rule (docs/design.md#auto-claim-and-the-link-rule) for any Service: the claim its
// ip-address-claim annotation names, else the auto-claim of its own name; never another name, never
// an empty one.
func FuzzLinkedClaim(f *testing.F) {
	f.Add("web", "", false, "")
	f.Add("web", "db", true, "")
	f.Add("web", "", true, "true")
	f.Add("web", "web", true, "false")
	f.Add("a", " ", true, "")
	f.Fuzz(func(t *testing.T, name, claim string, annotated bool, autoClaim string) {
		if name == "" {
			return // the apiserver never stores a Service without a name
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name,
			Annotations: map[string]string{ipamv1.AnnotationAutoClaim: autoClaim}}}
		if annotated {
			svc.Annotations[ipamv1.AnnotationServiceClaim] = claim
		}
		got, auto := LinkedClaim(svc)
		switch {
		case annotated && claim != "":
			if got != claim || auto {
				t.Fatalf("annotated with %q: linked to %q (auto-claim %v), want the named claim", claim, got, auto)
			}
		default:
			if got != name || !auto {
				t.Fatalf("no claim named: linked to %q (auto-claim %v), want the auto-claim %q", got, auto, name)
			}
		}
		if got == "" {
			t.Fatal("linked to an empty claim name")
		}
	})
}
