package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// autoClaimClassOf waits for the auto-claim of a Service and returns its class.
func autoClaimClassOf(t *testing.T, ns, name string) string {
	t.Helper()
	var claim ipamv1.IPAddressClaim
	eventually(t, "the Service's auto-claim", func() (bool, error) {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &claim)
		return err == nil, client.IgnoreNotFound(err)
	})
	return claim.Spec.ClassName
}

// A newer marked class that refuses the namespace does not hide an older marked class that
// serves it: the admission rules park the Service for the older one, so it must get a claim.
func TestAutoClaimUsesTheNewestMarkedClassServingTheNamespace(t *testing.T) {
	ns := newNamespace(t)
	mark := func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	}
	older := newClass(t, "ac-all-tenants", noDriver, mark)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision
	newer := newClass(t, "ac-gold-tenants", noDriver, mark, func(c *ipamv1.IPAddressClass) {
		c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	})
	t.Cleanup(func() { del(t, older); del(t, newer) })
	svc := lbService(ns, "plain", nil)
	create(t, svc)
	t.Cleanup(func() { del(t, svc) })
	if got := autoClaimClassOf(t, ns, "plain"); got != older.Name {
		t.Fatalf("the auto-claim of a Service in an unlabelled namespace uses class %q, want %q", got, older.Name)
	}

	// In a namespace both serve, the newer one wins.
	gold := newNamespace(t)
	setNamespaceLabels(t, gold, map[string]string{"tier": "gold"})
	goldSvc := lbService(gold, "golden", nil)
	create(t, goldSvc)
	t.Cleanup(func() { del(t, goldSvc) })
	if got := autoClaimClassOf(t, gold, "golden"); got != newer.Name {
		t.Fatalf("the auto-claim of a Service in a gold namespace uses class %q, want %q", got, newer.Name)
	}
}

// A namespace that gains the labels a marked class's namespaceSelector matches wakes the
// Services there that wait for an auto-claim.
func TestAutoClaimFollowsNamespaceLabels(t *testing.T) {
	ns := newNamespace(t)
	cls := newClass(t, "ac-labelled-tenants", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
		c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"auto-claim-test": "on"}}
	})
	t.Cleanup(func() { del(t, cls) })
	eventually(t, "the class's auto-claim stamp", func() (bool, error) {
		var c ipamv1.IPAddressClass
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(cls), &c)
		return err == nil && c.Annotations[ipamv1.AnnotationAutoClaimEnabledAt] != "", err
	})
	before := reconciles(t, "autoclaim")
	svc := lbService(ns, "waits", nil)
	create(t, svc)
	t.Cleanup(func() { del(t, svc) })
	eventually(t, "a pass over the Service", func() (bool, error) { return reconciles(t, "autoclaim") > before, nil })
	consistently(t, "no claim while the class refuses the namespace", time.Second, func() (bool, error) {
		var c ipamv1.IPAddressClaim
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "waits"}, &c)
		return err != nil, client.IgnoreNotFound(err)
	})
	setNamespaceLabels(t, ns, map[string]string{"auto-claim-test": "on"})
	if got := autoClaimClassOf(t, ns, "waits"); got != cls.Name {
		t.Fatalf("the auto-claim uses class %q, want %q", got, cls.Name)
	}
}

func setNamespaceLabels(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	var ns corev1.Namespace
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels = labels
	if err := admin.Patch(context.Background(), &ns, patch); err != nil {
		t.Fatal(err)
	}
}
