package controlplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// MetalLB's controller runs as Cozystack runs it: as the ServiceAccount of its chart's release,
// with that chart's RBAC and nothing more (not system:masters, which API Priority and Fairness
// exempts), with a Pod object of its own, and (v0.16 on) metrics that answer only an
// authenticated and authorized scraper, over TLS the cluster's CA vouches for.
func TestMetalLBRunsAsItsChartsServiceAccount(t *testing.T) {
	ctx := context.Background()
	cp, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	user := MetalLBUser(cp.MetalLBNamespace)

	// It serves a Service, and its writes are its ServiceAccount's.
	pool := "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: " + cp.MetalLBNamespace +
		"}\nspec: {addresses: [203.0.113.0/30], autoAssign: false}\n"
	if _, err := kubeapply.Apply(ctx, cp.Config, "test", []byte(pool)); err != nil {
		t.Fatal(err)
	}
	svc, err := cp.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", Annotations: map[string]string{"metallb.io/address-pool": "p"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: new(false),
			Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		writes, err := AuditWrites(cp.AuditLog, func(e AuditEvent) bool {
			return e.User.Username == user && e.ObjectRef != nil && e.ObjectRef.Resource == "services" &&
				e.ObjectRef.Subresource == "status" && e.ObjectRef.Namespace == "default" && e.ObjectRef.Name == svc.Name &&
				e.ResponseStatus != nil && e.ResponseStatus.Code == 200
		})
		return len(writes) > 0, err
	})
	if err != nil {
		t.Fatalf("MetalLB wrote no status of the Service as %s: %v", user, err)
	}

	// Its identity has the chart's RBAC, not more.
	sa := "system:serviceaccount:" + cp.MetalLBNamespace + ":" + MetalLBServiceAccount
	for _, c := range []struct {
		verb, resource, sub, ns string
		allowed                 bool
	}{
		{"update", "services", "status", "default", true},
		{"list", "services", "", "", true},
		{"get", "pods", "", cp.MetalLBNamespace, true}, // its own Pod, read at start
		{"update", "services", "", "default", false},
		{"delete", "services", "", "default", false},
		{"list", "secrets", "", "default", false},
		{"create", "namespaces", "", "", false},
	} {
		if got := can(ctx, t, cp, sa, c.verb, c.resource, c.sub, c.ns); got != c.allowed {
			t.Errorf("%s %s/%s in %q: allowed=%v, want %v", c.verb, c.resource, c.sub, c.ns, got, c.allowed)
		}
	}
	if pod, err := cp.Client.CoreV1().Pods(cp.MetalLBNamespace).Get(ctx, MetalLBPod, metav1.GetOptions{}); err != nil {
		t.Errorf("MetalLB's Pod object: %v", err)
	} else if got, want := pod.Spec.Containers[0].Image, MetalLBImage(cp.MetalLBVersion); got != want {
		t.Errorf("MetalLB's Pod runs %q, want %q (the version in use, %s)", got, want, cp.MetalLBVersion)
	}

	if !MetalLBSecureMetrics(cp.MetalLBVersion) {
		t.Logf("MetalLB %s serves plain HTTP metrics; the rest applies from v0.16", cp.MetalLBVersion)
		return
	}
	ep := cp.MetalLBMetrics
	if ep == nil || !strings.HasPrefix(ep.URL, "https://") {
		t.Fatalf("MetalLB's metrics endpoint %+v is not HTTPS", ep)
	}
	body, err := ep.Scrape(ctx)
	if err != nil {
		t.Fatalf("scraping with the reader's token: %v", err)
	}
	if !strings.Contains(string(body), "controller_runtime_reconcile_total") {
		t.Fatal("MetalLB's metrics have no controller-runtime reconcile counts")
	}
	anonymous := *ep
	anonymous.Token = ""
	if _, err := anonymous.Scrape(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a scrape without a token was not refused with 401: %v", err)
	}
}

// can asks the apiserver whether user may do verb on resource (subresource sub) in ns.
func can(ctx context.Context, t *testing.T, cp *ControlPlane, user, verb, resource, sub, ns string) bool {
	t.Helper()
	review, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sarFor(user, verb, resource, sub, ns), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

func sarFor(user, verb, resource, sub, ns string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(user, ":")[2], "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: resource, Subresource: sub,
			Namespace: ns},
	}}
}

// The Pod object's image is a reference a registry would take for every MetalLB build,
// the patched one included (a tag has no "+").
func TestMetalLBImageIsAValidReference(t *testing.T) {
	for _, v := range append(slices.Clone(binaries.MetalLBVersions), binaries.PatchedMetalLBVersion) {
		img := MetalLBImage(v)
		if _, err := name.NewTag(img, name.StrictValidation); err != nil {
			t.Errorf("MetalLB %s: image %q is not a valid reference: %v", v, img, err)
		}
	}
	if got, want := MetalLBImage("v0.16.1+patched"), "quay.io/metallb/controller:v0.16.1-patched"; got != want {
		t.Errorf("MetalLBImage(v0.16.1+patched) = %q, want %q", got, want)
	}
}
