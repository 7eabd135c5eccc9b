package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
)

// The parking policy against the real MetalLB controller: with an autoAssign: true pool in
// place, a tenant's Service that names a claim (here one that does not exist, so the driver never
// pins it) is parked by the apiserver on create and MetalLB gives it no address, its report of
// the parking pool refused by the chart's parking-events policy;
// the same tenant's Service that opts out of everything gets an address of that pool, which
// shows the pool does hand addresses out.
func TestParkedServiceGetsNoAddressFromAnAutoAssignPool(t *testing.T) {
	f := features.New("parking keeps an auto-assigning pool's addresses off a Service naming a claim").
		Assess("parked: nothing; not parked: an address", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			started := time.Now()
			admin := ipamClient(t)
			ns := tenantNamespace(ctx, t, admin, "tenant-parking")
			t.Cleanup(func() {
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			})
			explainOnFailure(t, admin, ns)
			bind(ctx, t, admin, ns, "edit", rbacv1.Subject{Kind: "User", Name: "alice", APIGroup: rbacv1.GroupName})
			alice, _ := as(t, "alice")
			eventually(ctx, t, 30*time.Second, "the edit role to be aggregated", func(ctx context.Context) (bool, error) {
				var l corev1.ServiceList
				return true, alice.List(ctx, &l, client.InNamespace(ns))
			})
			// The pool serves this test's namespace only: MetalLB hands a new autoAssign pool's
			// addresses to every LoadBalancer Service without one, and Services earlier tests
			// left behind would take all four.
			autoPool := newPoolObject("e2e-parking-auto", nil, "198.51.100.240/30")
			autoPool.Object["spec"].(map[string]any)["serviceAllocation"] = map[string]any{"namespaces": []any{ns}}
			createPool(ctx, t, admin, autoPool)
			poolLive(ctx, t, admin, ns, "198.51.100.240/30")

			parked := lbService(ns, "parked", map[string]string{claimAnnotation: "not-there"}, false)
			// The chart's policies reach the apiserver's admission through its informers.
			eventually(ctx, t, 30*time.Second, "the parking policy to take effect", func(ctx context.Context) (bool, error) {
				probe := parked.DeepCopy()
				err := alice.Create(ctx, probe, client.DryRunAll)
				return err == nil && probe.Annotations[autoclaim.ParkingAnnotation] == autoclaim.ParkingPool, err
			})
			if err := alice.Create(ctx, parked); err != nil {
				t.Fatalf("a tenant could not create a Service naming a claim: %v", err)
			}
			if got := parked.Annotations[autoclaim.ParkingAnnotation]; got != autoclaim.ParkingPool {
				t.Fatalf("the Service was not parked on create: %s=%q", autoclaim.ParkingAnnotation, got)
			}
			free := lbService(ns, "free", map[string]string{ipamv1.AnnotationAutoClaim: "false"}, false)
			if err := alice.Create(ctx, free); err != nil {
				t.Fatal(err)
			}
			if _, ok := free.Annotations[autoclaim.ParkingAnnotation]; ok {
				t.Fatalf("a Service that opted out of auto-claim was parked: %v", free.Annotations)
			}
			// MetalLB serves Services one at a time, in its queue's order: after a test that made
			// and deleted hundreds of Services, its queue can take minutes to drain.
			eventually(ctx, t, 3*time.Minute, "MetalLB to serve the Service that is not parked from the autoAssign pool", func(ctx context.Context) (bool, error) {
				var s corev1.Service
				if err := admin.Get(ctx, client.ObjectKeyFromObject(free), &s); err != nil {
					return false, err
				}
				return len(s.Status.LoadBalancer.Ingress) > 0, nil
			})
			// MetalLB has looked at the parked Service (it serves in order, and it served the
			// Service created after it) and refused the parking pool, which the parking-events
			// policy keeps from being recorded as a Warning...
			noParkingWarnings(ctx, t, admin, ns, started, []string{"parked"}, "parked")
			// ...and it stays without an address.
			consistently(ctx, t, 5*time.Second, "the parked Service to show no address", func(ctx context.Context) (bool, error) {
				var s corev1.Service
				if err := admin.Get(ctx, client.ObjectKeyFromObject(parked), &s); err != nil {
					return false, err
				}
				return len(s.Status.LoadBalancer.Ingress) == 0 && s.Annotations[autoclaim.ParkingAnnotation] == autoclaim.ParkingPool, nil
			})
			for _, s := range []client.Object{parked, free} {
				_ = admin.Delete(ctx, s)
			}
			// The auto-assigning pool goes before the next test starts (the smoke test counts on
			// MetalLB having none).
			pool := &metav1.PartialObjectMetadata{}
			pool.SetGroupVersionKind(poolGVK)
			pool.SetNamespace(metallbNamespace)
			pool.SetName("e2e-parking-auto")
			if err := admin.Delete(ctx, pool); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the autoAssign pool to be gone", func(ctx context.Context) (bool, error) {
				err := admin.Get(ctx, client.ObjectKeyFromObject(pool), pool)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// poolLive waits until MetalLB serves a new autoAssign pool: a Service that opted out of
// auto-claim gets an address of it, and is deleted again. MetalLB loads a pool in the background
// and does not look again at a Service it refused for want of one (until something changes it),
// so a Service created before the pool is loaded would wait for ever: the probe is touched every
// 20 s, as an operator would.
func poolLive(ctx context.Context, t *testing.T, c client.Client, ns, cidr string) {
	t.Helper()
	probe := lbService(ns, "pool-live-probe", map[string]string{ipamv1.AnnotationAutoClaim: "false"}, false)
	if err := c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	touched := time.Now()
	eventually(ctx, t, 3*time.Minute, "MetalLB to serve the new autoAssign pool", func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(probe), &s); err != nil {
			return false, err
		}
		if ips := ingressOf(&s); len(ips) > 0 {
			return inRanges(ips[0], []string{cidr}), nil
		}
		if time.Since(touched) > 20*time.Second {
			touched = time.Now()
			v := touched.Format(time.RFC3339Nano)
			patchAnnotations(ctx, t, c, &s, map[string]*string{"example.com/touched": &v})
		}
		return false, nil
	})
	if err := c.Delete(ctx, probe); err != nil {
		t.Fatal(err)
	}
}
