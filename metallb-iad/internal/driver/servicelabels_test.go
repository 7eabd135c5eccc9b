package driver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The Service cache keeps the driver's own labels and those a pool's service selectors read,
// and marks a Service it cut; a Service cut before a pool selected by one of its labels is stale
// (read again when matched), one cut under the keys named now is not.
func TestServiceCacheKeepsTheLabelsPoolsSelectBy(t *testing.T) {
	l := NewServiceLabels()
	l.namespace = testMetalLBNS
	pool := func(keys ...string) *metallb.IPAddressPool {
		sel := metav1.LabelSelector{MatchLabels: map[string]string{}}
		for _, k := range keys {
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpExists})
		}
		return &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: "p"},
			Spec: metallb.IPAddressPoolSpec{ServiceAllocation: &metallb.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{sel}}}}
	}
	h := l.poolHandler()
	h.OnAdd(pool("tier"), false)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web",
		Labels: map[string]string{"tier": "gold", "app": "web", plan.LabelRole: plan.RoleHold, "example.com/blob": "x"}}}
	out, err := l.Transform()(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Service)
	if len(got.Labels) != 2 || got.Labels["tier"] != "gold" || got.Labels[plan.LabelRole] != plan.RoleHold {
		t.Fatalf("cached labels %v, want tier and the driver's role", got.Labels)
	}
	if l.Stale(got) {
		t.Fatal("a Service cut under the keys the pools name now is stale")
	}
	// A pool selects by app too: the Service cut without it is read again when matched.
	h.OnUpdate(nil, pool("tier", "app"))
	if !l.Stale(got) {
		t.Fatal("a Service cut before a pool selected by app is not stale")
	}
	again, _ := l.Transform()(svc)
	if s := again.(*corev1.Service); s.Labels["app"] != "web" || l.Stale(s) {
		t.Fatalf("recached labels %v (stale %v)", s.Labels, l.Stale(s))
	}
	// Only the driver's labels: nothing cut, no mark.
	own := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, Name: "h", Labels: map[string]string{plan.LabelRole: plan.RoleHold}}}
	if o, _ := l.Transform()(own); o.(*corev1.Service).Annotations[annotationLabelKeys] != "" {
		t.Fatal("a Service with nothing cut is marked")
	}
	// A pool of another namespace is not MetalLB's.
	other := pool("zone")
	other.Namespace = "elsewhere"
	h.OnAdd(other, false)
	if l.keep("zone") {
		t.Fatal("keeps a key a pool outside MetalLB's namespace selects by")
	}
}

// The cache keeps neither ports nor selectors; whether a Service could share its IP with a hold
// is kept in their stead, and a tenant cannot write that mark.
func TestServiceCacheKeepsWhetherAServiceCanShare(t *testing.T) {
	tr := NewServiceLabels().Transform()
	for _, tc := range []struct {
		name  string
		spec  corev1.ServiceSpec
		annot map[string]string
		share bool
	}{
		{"Cluster", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}, nil, true},
		{"Local with a selector", corev1.ServiceSpec{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "web"}}, nil, false},
		{"Local, selectorless", corev1.ServiceSpec{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}, nil, true},
		{"the hold's port", corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: plan.HoldPort, Protocol: corev1.ProtocolTCP}}}, nil, false},
		{"the mark written by a tenant", corev1.ServiceSpec{}, map[string]string{plan.AnnotationCannotShare: "x"}, true},
	} {
		in := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web", Annotations: tc.annot}, Spec: tc.spec}
		out, err := tr(in)
		if err != nil {
			t.Fatal(err)
		}
		cached := out.(*corev1.Service)
		if len(cached.Spec.Ports) != 0 || len(cached.Spec.Selector) != 0 {
			t.Fatalf("%s: the cache kept ports or a selector: %+v", tc.name, cached.Spec)
		}
		if got := plan.CannotShare(cached) == ""; got != tc.share || got != (plan.CannotShare(in) == "" || tc.annot != nil) {
			t.Errorf("%s: cached Service shares %v (%q), want %v", tc.name, got, plan.CannotShare(cached), tc.share)
		}
	}
}
