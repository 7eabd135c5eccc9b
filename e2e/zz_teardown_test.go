package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/binaries"
)

// TestTeardownInDocumentedOrder runs last (file order) and removes the whole feature from the
// cluster the way the product page says, then checks that nothing is left: no claim, address,
// class, placeholder, pin or stuck finalizer.
func TestTeardownInDocumentedOrder(t *testing.T) {
	f := features.New("teardown in the documented order leaves nothing behind").
		Assess("teardown", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			// Something of every kind first: an attached address, a Released one, an Available one.
			applyExample(ctx, t, "metallb-pool.yaml")
			applyExample(ctx, t, "class-public.yaml")
			applyExample(ctx, t, "claim-web.yaml")
			applyExample(ctx, t, "service-web.yaml")
			claim := waitClaimBound(ctx, t, c, "tenant-example", "web")
			waitIngress(ctx, t, c, "tenant-example", "web", claimIPs(claim))
			gone := newTenantClaim(ctx, t, c, "tenant-example", "gone", "public", ipamv1.IPv4)
			waitClaimBound(ctx, t, c, "tenant-example", "gone")
			if err := c.Delete(ctx, gone); err != nil {
				t.Fatal(err)
			}
			avail := &ipamv1.IPAddress{}
			avail.Name, avail.Spec = "ip-203-0-113-60", ipamv1.IPAddressSpec{Address: "203.0.113.60", ClassName: "public"}
			if err := c.Create(ctx, avail); err != nil {
				t.Fatal(err)
			}

			// 1. Remove the claim annotation from Services (or delete them).
			var svcs corev1.ServiceList
			if err := c.List(ctx, &svcs); err != nil {
				t.Fatal(err)
			}
			for i := range svcs.Items {
				s := &svcs.Items[i]
				if _, ok := s.Annotations[claimAnnotation]; ok {
					patchAnnotations(ctx, t, c, s, map[string]*string{claimAnnotation: nil})
				}
			}
			// 2. Delete every IPAddressClaim.
			if err := c.DeleteAllOf(ctx, &ipamv1.IPAddressClaim{}, client.InNamespace("tenant-example")); err != nil {
				t.Fatal(err)
			}
			var claims ipamv1.IPAddressClaimList
			_ = c.List(ctx, &claims)
			for i := range claims.Items {
				_ = c.Delete(ctx, &claims.Items[i])
			}
			eventually(ctx, t, 60*time.Second, "every claim to be gone", func(ctx context.Context) (bool, error) {
				var l ipamv1.IPAddressClaimList
				err := c.List(ctx, &l)
				return len(l.Items) == 0, err
			})
			// 3. Delete the remaining IPAddress objects.
			if err := c.DeleteAllOf(ctx, &ipamv1.IPAddress{}); err != nil {
				t.Fatal(err)
			}
			// 4. Delete the classes.
			if err := c.DeleteAllOf(ctx, &ipamv1.IPAddressClass{}); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "no address, class or placeholder left", func(ctx context.Context) (bool, error) {
				var addrs ipamv1.IPAddressList
				var classes ipamv1.IPAddressClassList
				var placeholders corev1.ServiceList
				if err := c.List(ctx, &addrs); err != nil {
					return false, err
				}
				if err := c.List(ctx, &classes); err != nil {
					return false, err
				}
				if err := c.List(ctx, &placeholders, client.InNamespace(driverNamespace)); err != nil {
					return false, err
				}
				return len(addrs.Items) == 0 && len(classes.Items) == 0 && len(placeholders.Items) == 0, nil
			})
			// No Service keeps a pin the driver wrote.
			if err := c.List(ctx, &svcs); err != nil {
				t.Fatal(err)
			}
			for _, s := range svcs.Items {
				if s.Annotations[pinnedMarker] != "" {
					t.Errorf("Service %s/%s still carries the driver's pin", s.Namespace, s.Name)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// TestZZClearFinalizersByHand: with both controllers gone, objects being deleted hang on their
// finalizers; the operating guide's script (docs/clear-finalizers.sh) clears them.
func TestZZClearFinalizersByHand(t *testing.T) {
	f := features.New("the documented finalizer-clearing commands work without the controllers").
		Assess("clear", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-orphans")
			poolWithClass(ctx, t, c, "e2e-orphans", ipamv1.ReclaimRetain, "198.51.100.244/30")
			newTenantClaim(ctx, t, c, ns, "orphan", "e2e-orphans", ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "orphan")
			if err := c.Create(ctx, lbService(ns, "orphan", map[string]string{claimAnnotation: "orphan"}, false)); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "orphan", claimIPs(claim))

			startCore := stopProcess(t, "address-controller")
			startDriver := stopProcess(t, "metallb-iad")
			t.Cleanup(func() { startDriver(); startCore() })
			for _, o := range []client.Object{claim, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: claim.Status.Addresses[0].Name}},
				&ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-orphans"}}} {
				if err := c.Delete(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Second)
			if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				t.Fatalf("without its controller the claim should hang on its finalizer: %v", err)
			}

			kubectl, err := binaries.Tool("kubectl")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, "bash", "../docs/clear-finalizers.sh")
			cmd.Env = append(os.Environ(), "KUBECTL="+kubectl, "KUBECONFIG="+cluster.Kubeconfig())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("clear-finalizers.sh: %v\n%s", err, out)
			}
			eventually(ctx, t, 30*time.Second, "the claim, address and class to be gone", func(ctx context.Context) (bool, error) {
				var claims ipamv1.IPAddressClaimList
				var addrs ipamv1.IPAddressList
				var classes ipamv1.IPAddressClassList
				var holds corev1.ServiceList
				for _, l := range []client.ObjectList{&claims, &addrs, &classes} {
					if err := c.List(ctx, l); err != nil {
						return false, err
					}
				}
				if err := c.List(ctx, &holds, client.InNamespace(driverNamespace)); err != nil {
					return false, err
				}
				return len(claims.Items)+len(addrs.Items)+len(classes.Items)+len(holds.Items) == 0, nil
			})
			var svc corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orphan"}, &svc); err != nil {
				t.Fatal(err)
			}
			if svc.Annotations[pinnedMarker] != "" || svc.Annotations[pinAnnotation] != "" {
				t.Fatalf("the driver's pin survived: %v", svc.Annotations)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
