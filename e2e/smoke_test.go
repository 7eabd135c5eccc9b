package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
)

// The smoke features prove that the parts the project relies on are real: MetalLB allocates,
// the garbage collector follows ownerReferences, and namespaces finish deleting.

func TestSmokeMetalLBAssignsFromManualPool(t *testing.T) {
	f := features.New("MetalLB assigns an address from an autoAssign: false pool to a Service naming it").
		Assess("the Service gets an address from 203.0.113.0/26", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			c := crClient(t, cfg)
			applyExample(ctx, t, "metallb-pool.yaml")
			applyExample(ctx, t, "service-in-pool.yaml")
			t.Cleanup(func() {
				_ = c.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "tenant-example"}})
			})
			pool := netip.MustParsePrefix("203.0.113.0/26")
			var svc corev1.Service
			eventually(ctx, t, 60*time.Second, "an ingress IP on tenant-example/demo", func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, client.ObjectKey{Namespace: "tenant-example", Name: "demo"}, &svc); err != nil {
					return false, err
				}
				return len(svc.Status.LoadBalancer.Ingress) > 0, nil
			})
			ip, err := netip.ParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
			if err != nil || !pool.Contains(ip) {
				t.Fatalf("MetalLB assigned %q, want an address in %s", svc.Status.LoadBalancer.Ingress[0].IP, pool)
			}
			return ctx
		}).
		Assess("a Service that names no pool gets nothing from it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			c := crClient(t, cfg)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "no-pool", Namespace: "tenant-example"},
				Spec: corev1.ServiceSpec{
					Type:  corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Port: 80}},
				},
			}
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), svc) })
			// MetalLB records a failed allocation as an event on the Service; wait for that,
			// then check that no address was handed out.
			eventually(ctx, t, 60*time.Second, "MetalLB to process tenant-example/no-pool", func(ctx context.Context) (bool, error) {
				var evs corev1.EventList
				if err := c.List(ctx, &evs, client.InNamespace("tenant-example")); err != nil {
					return false, err
				}
				for _, e := range evs.Items {
					if e.InvolvedObject.Name == "no-pool" && e.Reason == "AllocationFailed" {
						return true, nil
					}
				}
				return false, nil
			})
			if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
				t.Fatal(err)
			}
			if len(svc.Status.LoadBalancer.Ingress) != 0 {
				t.Fatalf("a Service without the pool annotation got %v from an autoAssign: false pool", svc.Status.LoadBalancer.Ingress)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestSmokeGarbageCollection(t *testing.T) {
	f := features.New("the garbage collector deletes an object whose owner is gone").
		Assess("owned ConfigMap disappears", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			c := crClient(t, cfg)
			owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gc-owner", Namespace: "default"}}
			if err := c.Create(ctx, owner); err != nil {
				t.Fatal(err)
			}
			owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: "gc-owned", Namespace: "default",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
			}}
			if err := c.Create(ctx, owned); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(ctx, owner); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "default/gc-owned to be collected", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(owned), &corev1.ConfigMap{})
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestSmokeNamespaceDeletion(t *testing.T) {
	f := features.New("a namespace with content finishes deleting").
		Assess("namespace is gone", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			c := crClient(t, cfg)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke-ns-deletion"}}
			if err := c.Create(ctx, ns); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content", Namespace: ns.Name}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(ctx, ns); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 90*time.Second, "namespace smoke-ns-deletion to be deleted", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
