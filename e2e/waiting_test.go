package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// provisioningOf lists the driver's provisioning placeholders that ask the pool.
func provisioningOf(ctx context.Context, c client.Client, pool string) ([]string, error) {
	var list corev1.ServiceList
	if err := c.List(ctx, &list, client.InNamespace(driverNamespace),
		client.MatchingLabels{"metallb.drivers.local.sdn.cozystack.io/role": "provisioning"}); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		if s.Annotations["metallb.io/address-pool"] == pool && s.DeletionTimestamp == nil {
			out = append(out, s.Name)
		}
	}
	return out, nil
}

// Claims waiting on a full pool cost the cluster nothing per claim, with the real MetalLB: ten
// claims of a pool of two addresses leave eight waiting, which share one provisioning placeholder
// (not eight LoadBalancer Services with a cluster IP each), and the driver writes nothing while
// the pool stays full (no nudges every minute). When an address is freed, the oldest waiting
// claim gets it.
func TestClaimsWaitingOnAFullPoolCostNothing(t *testing.T) {
	f := features.New("waiting claims on a full pool").
		Assess("share one placeholder, make no writes, and bind when an address frees", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			local := localCluster(t, "it counts writes in the local apiserver's audit log")
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-fullpool")
			t.Cleanup(func() {
				_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			})
			const pool = "e2e-fullpool"
			poolWithClass(ctx, t, c, pool, ipamv1.ReclaimDelete, "192.0.2.16-192.0.2.17")
			const n = 10
			for i := range n {
				newTenantClaim(ctx, t, c, ns, fmt.Sprintf("w%02d", i), pool, ipamv1.IPv4)
				time.Sleep(20 * time.Millisecond) // a creation order to serve them in
			}
			bound := func(ctx context.Context) ([]string, error) {
				var claims ipamv1.IPAddressClaimList
				if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
					return nil, err
				}
				var out []string
				for _, cl := range claims.Items {
					if cl.Status.Phase == ipamv1.ClaimBound {
						out = append(out, cl.Name)
					}
				}
				return out, nil
			}
			eventually(ctx, t, 90*time.Second, "two claims to be Bound, the pool full", func(ctx context.Context) (bool, error) {
				b, err := bound(ctx)
				return len(b) == 2, err
			})
			// MetalLB refuses what it cannot serve; the eight waiting claims share one placeholder.
			eventually(ctx, t, 30*time.Second, "one provisioning placeholder for the eight waiting claims", func(ctx context.Context) (bool, error) {
				p, err := provisioningOf(ctx, c, pool)
				if err == nil && len(p) != 1 {
					err = fmt.Errorf("%d provisioning placeholders: %v", len(p), p)
				}
				return err == nil, err
			})
			// The class's capacity, which the driver writes at most every 30 s, shows the pool full
			// before the quiet stretch starts: its last write for the two bindings is not a write
			// "while the pool stayed full".
			eventually(ctx, t, 60*time.Second, "the class's capacity to show the pool full", func(ctx context.Context) (bool, error) {
				var class ipamv1.IPAddressClass
				if err := c.Get(ctx, client.ObjectKey{Name: pool}, &class); err != nil {
					return false, err
				}
				for _, fc := range class.Status.Capacity {
					if fc.Family == ipamv1.IPv4 {
						return fc.Reserved == 2 && fc.Free == 0, nil
					}
				}
				return false, nil
			})
			from := time.Now()
			consistently(ctx, t, 90*time.Second, "one placeholder, and no write of the driver", func(ctx context.Context) (bool, error) {
				p, err := provisioningOf(ctx, c, pool)
				if err != nil || len(p) != 1 {
					return false, fmt.Errorf("provisioning placeholders %v (%v)", p, err)
				}
				var driver []string
				for _, w := range projectWrites(t, local.AuditLog, from) {
					if strings.HasPrefix(w, "driver ") {
						driver = append(driver, w)
					}
				}
				if len(driver) > 0 {
					return false, fmt.Errorf("the driver wrote while the pool stayed full:\n%s", strings.Join(driver, "\n"))
				}
				return true, nil
			})

			// An address is freed (a Bound claim deleted, its class's policy Delete): the oldest
			// waiting claim (by creation, then name, as the driver orders them) gets it, at once
			// rather than at its next minute's look, and no other claim binds.
			b, err := bound(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var claims ipamv1.IPAddressClaimList
			if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			var oldest *ipamv1.IPAddressClaim
			for i := range claims.Items {
				cl := &claims.Items[i]
				if slices.Contains(b, cl.Name) {
					continue
				}
				if oldest == nil || cl.CreationTimestamp.Before(&oldest.CreationTimestamp) ||
					cl.CreationTimestamp.Equal(&oldest.CreationTimestamp) && cl.Name < oldest.Name {
					oldest = cl
				}
			}
			if oldest == nil {
				t.Fatalf("no claim waits: bound %v", b)
			}
			if err := c.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: b[0]}}); err != nil {
				t.Fatal(err)
			}
			want := []string{b[1], oldest.Name}
			slices.Sort(want)
			eventually(ctx, t, 30*time.Second, "the oldest waiting claim, "+oldest.Name+", to take the freed address", func(ctx context.Context) (bool, error) {
				now, err := bound(ctx)
				if err == nil && len(now) > 1 && !slices.Equal(now, want) {
					err = fmt.Errorf("bound %v, want %v", now, want)
				}
				return err == nil && slices.Equal(now, want), err
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
