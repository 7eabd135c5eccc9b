package driver

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// A namespace made just before its first Service may be missing from the driver's cache while the
// admission rules, which read it from the apiserver, park the Service for a class that serves
// only labelled namespaces: the driver reads the namespace from the apiserver instead of taking
// it for one without labels (which would unpark the Service). The race cannot be timed on a real
// apiserver, so the cache and the apiserver are stand-ins here.
func TestParkingWantedReadsANamespaceTheCacheLacks(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	class := &ipamv1.IPAddressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gold", Annotations: map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
	}
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Labels: map[string]string{"tier": "gold"}}}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(class).Build()
	svc := tenantService("fresh", "web", nil)

	d := &Driver{client: cache, reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(fresh).Build()}
	if got, err := d.parkingWanted(context.Background(), svc, false); err != nil || !got {
		t.Fatalf("a namespace the cache lacks and the apiserver labels gold: parking wanted %v (%v), want true", got, err)
	}
	d.reader = fake.NewClientBuilder().WithScheme(scheme).Build()
	if got, err := d.parkingWanted(context.Background(), svc, false); err != nil || got {
		t.Fatalf("a namespace neither has: parking wanted %v (%v), want false", got, err)
	}
}
