package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// With auto-claim on, a large number of Services that a skip rule excludes costs the core no
// write at all; one eligible Service beside them gets its claim (so the core did look).
func TestAutoClaimSkippedServicesCauseNoWrites(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "auto-skip", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	lbClass := "example.org/other"
	skipped := func(i int) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("skip-%d", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		switch i % 4 {
		case 0:
			s.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "false"}
		case 1:
			s.Spec.LoadBalancerClass = &lbClass
		case 2:
			s.Annotations = map[string]string{"metallb.io/address-pool": "elsewhere"}
		case 3:
			s.Spec.Type = corev1.ServiceTypeClusterIP
		}
		return s
	}
	since := time.Now()
	const n = 1000
	parallel(n, func(i int) error { return admin.Create(ctx, skipped(i)) })
	newSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "eligible"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	create(t, newSvc)
	eventually(t, "the eligible Service's claim", func() (bool, error) {
		var c ipamv1.IPAddressClaim
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "eligible"}, &c)
		return err == nil, client.IgnoreNotFound(err)
	})
	time.Sleep(2 * time.Second)
	var others []string
	for _, w := range auditedWrites(t, coreUser, since) {
		// The eligible Service's claim: its creation (a POST to the collection, counted by the
		// claim list below), its finalizer and status, and the class's finalizer.
		if !strings.Contains(w, "/eligible") && !strings.Contains(w, "/events") && !strings.Contains(w, "auto-skip") &&
			w != "create /apis/local.sdn.cozystack.io/v1alpha1/namespaces/"+ns+"/ipaddressclaims" {
			others = append(others, w)
		}
	}
	if len(others) != 0 {
		t.Fatalf("the core wrote %d times for %d skipped Services:\n%s", len(others), n, strings.Join(others, "\n"))
	}
	// Events are writes too: none about a skipped Service.
	for i := 0; i < n; i += 97 {
		if evs := eventsFor(t, ns, fmt.Sprintf("skip-%d", i), ""); len(evs) != 0 {
			t.Fatalf("the core reported on a skipped Service: %+v", evs[0])
		}
	}
	var list ipamv1.IPAddressClaimList
	if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d claims in the namespace (%v), want only the eligible Service's", len(list.Items), err)
	}
}
