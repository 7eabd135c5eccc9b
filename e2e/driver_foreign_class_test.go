package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Issue 29, defect 1, on the real MetalLB. A Service that names claim A but hands itself to
// another load-balancer implementation (spec.loadBalancerClass) is one MetalLB never serves. The
// driver used to attach it all the same: it deleted A's hold and pinned the Service, which left
// A's IP free in MetalLB. In a pool of two addresses, the next claim's placeholder then got A's
// IP (MetalLB hands out the lowest free one), the driver made that placeholder A's hold, deleted
// the hold again because the Service was pinned to the IP, and so on: a write loop, and the
// second claim never bound. Now the Service gets a Warning and A's address stays held.
func TestDriverForeignLoadBalancerClassKeepsTheHold(t *testing.T) {
	f := features.New("a Service of another load-balancer class that names a claim").
		Assess("is not attached: the address stays held and another claim of the class binds", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-foreign-class")
			t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
			const class = "e2e-foreign-class"
			poolWithClass(ctx, t, c, class, ipamv1.ReclaimDelete, "192.0.2.10-192.0.2.11")

			newTenantClaim(ctx, t, c, ns, "a", class, ipamv1.IPv4)
			a := waitClaimBound(ctx, t, c, ns, "a")
			ipA, addrA := claimIPs(a)[0], a.Status.Addresses[0].Name
			waitHeld(ctx, t, c, addrA, ipA)

			svc := lbService(ns, "other-lb", map[string]string{claimAnnotation: "a"}, false)
			svc.Spec.LoadBalancerClass = ptrTo("example.com/other-lb")
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), svc) })
			ev := waitServiceEvent(ctx, t, c, ns, "other-lb", "ForeignLoadBalancerClass")
			if ev.Type != corev1.EventTypeWarning {
				t.Errorf("ForeignLoadBalancerClass is %s, want Warning", ev.Type)
			}

			newTenantClaim(ctx, t, c, ns, "b", class, ipamv1.IPv4)
			start := time.Now()
			var b ipamv1.IPAddressClaim
			eventually(ctx, t, 30*time.Second, "claim b to be Bound", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, &b)
				return b.Status.Phase == ipamv1.ClaimBound, err
			})
			t.Logf("claim b bound to %v in %s", claimIPs(&b), time.Since(start).Round(time.Millisecond))
			if slices.Contains(claimIPs(&b), ipA) {
				t.Fatalf("claim b got claim a's address %s", ipA)
			}

			// A's address stays held by its placeholder, attached to nothing, and the Service is
			// never pinned.
			waitHeld(ctx, t, c, addrA, ipA)
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if err := stillHeld(ctx, c, addrA, svc); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// stillHeld says what is wrong when the address is not Held=True and unattached, or the Service
// carries a pin.
func stillHeld(ctx context.Context, c client.Client, addr string, svc *corev1.Service) error {
	var a ipamv1.IPAddress
	if err := c.Get(ctx, client.ObjectKey{Name: addr}, &a); err != nil {
		return err
	}
	if a.Status.AttachedTo != nil {
		return fmt.Errorf("address %s attached to %s/%s", addr, a.Status.AttachedTo.Namespace, a.Status.AttachedTo.Name)
	}
	if !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionHeld) {
		return fmt.Errorf("address %s not Held: %+v", addr, meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld))
	}
	var s corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		return err
	}
	if _, ok := s.Annotations[pinAnnotation]; ok || s.Annotations[pinnedMarker] != "" {
		return fmt.Errorf("the Service %s/%s is pinned: %v", s.Namespace, s.Name, s.Annotations)
	}
	return nil
}
