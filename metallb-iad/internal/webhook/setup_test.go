package webhook

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A namespace the cache does not hold yet (created just before its Service) is read live: its
// labels decide whether a class restricted to some namespaces serves the Service.
func TestNamespaceLabelsReadLiveOnACacheMiss(t *testing.T) {
	cache := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	live := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(&corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "fresh", Labels: map[string]string{"tier": "gold"}}}).Build()
	got, err := NamespaceLabels(cache, live)(context.Background(), "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"tier": "gold"}; !maps.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	if got, err := NamespaceLabels(cache, live)(context.Background(), "absent"); err != nil || got != nil {
		t.Fatalf("an absent namespace: labels %v, %v", got, err)
	}
}
