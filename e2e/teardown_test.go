package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/policycel"
)

// leftovers says what is left of a class's objects: claims in ns, addresses of the class, the
// class itself, placeholders serving the IPs, and driver pins on Services in ns.
func leftovers(ctx context.Context, c client.Client, ns, class string, ips []string) (string, error) {
	var out []string
	var claims ipamv1.IPAddressClaimList
	if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, cl := range claims.Items {
		out = append(out, "claim "+cl.Name)
	}
	var addrs ipamv1.IPAddressList
	if err := c.List(ctx, &addrs); err != nil {
		return "", err
	}
	for _, a := range addrs.Items {
		if a.Spec.ClassName == class {
			out = append(out, "address "+a.Name)
		}
	}
	err := c.Get(ctx, client.ObjectKey{Name: class}, &ipamv1.IPAddressClass{})
	if err == nil {
		out = append(out, "class "+class)
	} else if !apierrors.IsNotFound(err) {
		return "", err
	}
	for _, ip := range ips {
		holders, err := servicesServing(ctx, c, ip)
		if err != nil {
			return "", err
		}
		for _, h := range holders {
			if h.Namespace == driverNamespace {
				out = append(out, "placeholder "+h.Name+" for "+ip)
			}
		}
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, s := range svcs.Items {
		if s.Annotations[pinnedMarker] != "" {
			out = append(out, "pin on Service "+s.Name)
		}
	}
	if len(out) == 0 {
		return "", nil
	}
	return fmt.Sprint(out), nil
}

// The feature removed in the documented order, for one class and namespace of this test's own,
// leaves nothing of them behind: no claim, address, class, placeholder, pin or stuck finalizer.
// It does not depend on running last: other tests' objects are not touched or counted.
func TestTeardownInDocumentedOrder(t *testing.T) {
	f := features.New("teardown in the documented order leaves nothing behind").
		Assess("teardown", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-teardown")
			t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
			const class = "e2e-teardown"
			poolWithClass(ctx, t, c, class, ipamv1.ReclaimRetain, "198.51.100.248/30")
			// Something of every kind first: an attached address, a Released one, an Available one.
			web := newTenantClaim(ctx, t, c, ns, "web", class, ipamv1.IPv4)
			web = waitClaimBound(ctx, t, c, ns, web.Name)
			if err := c.Create(ctx, lbService(ns, "web", map[string]string{claimAnnotation: "web"}, false)); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "web", claimIPs(web))
			gone := newTenantClaim(ctx, t, c, ns, "gone", class, ipamv1.IPv4)
			gone = waitClaimBound(ctx, t, c, ns, gone.Name)
			if err := c.Delete(ctx, gone); err != nil {
				t.Fatal(err)
			}
			ips := append(claimIPs(web), claimIPs(gone)...)
			eventually(ctx, t, 30*time.Second, "the deleted claim's address to be Released", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: gone.Status.Addresses[0].Name}, &a)
				return a.Status.Phase == ipamv1.AddressReleased, err
			})
			avail := &ipamv1.IPAddress{}
			avail.Name, avail.Spec = "ip-198-51-100-251", ipamv1.IPAddressSpec{Address: "198.51.100.251", ClassName: class}
			if err := c.Create(ctx, avail); err != nil {
				t.Fatal(err)
			}
			ips = append(ips, avail.Spec.Address)

			// 1. Remove the claim annotation from the Services.
			var svcs corev1.ServiceList
			if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for i := range svcs.Items {
				if _, ok := svcs.Items[i].Annotations[claimAnnotation]; ok {
					patchAnnotations(ctx, t, c, &svcs.Items[i], map[string]*string{claimAnnotation: nil})
				}
			}
			// 2. Delete the claims.
			if err := c.DeleteAllOf(ctx, &ipamv1.IPAddressClaim{}, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "the claims to be gone", func(ctx context.Context) (bool, error) {
				var l ipamv1.IPAddressClaimList
				err := c.List(ctx, &l, client.InNamespace(ns))
				return len(l.Items) == 0, err
			})
			// 3. Delete the remaining addresses of the class.
			var addrs ipamv1.IPAddressList
			if err := c.List(ctx, &addrs); err != nil {
				t.Fatal(err)
			}
			for i := range addrs.Items {
				if addrs.Items[i].Spec.ClassName == class {
					if err := c.Delete(ctx, &addrs.Items[i]); client.IgnoreNotFound(err) != nil {
						t.Fatal(err)
					}
				}
			}
			// 4. Delete the class.
			if err := c.Delete(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: class}}); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "nothing of the class to be left", func(ctx context.Context) (bool, error) {
				left, err := leftovers(ctx, c, ns, class, ips)
				if left != "" {
					return false, fmt.Errorf("left: %s", left)
				}
				return err == nil, err
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// With both controllers gone, objects being deleted hang on their finalizers; the operating
// guide's script (docs/clear-finalizers.sh) clears them. The script works on the whole cluster,
// as an operator runs it; the controllers are started again afterwards, and the assertions cover
// this test's own objects only.
func TestClearFinalizersByHand(t *testing.T) {
	f := features.New("the documented finalizer-clearing commands work without the controllers").
		Assess("clear", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-orphans")
			t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
			const class = "e2e-orphans"
			poolWithClass(ctx, t, c, class, ipamv1.ReclaimRetain, "198.51.100.244/30")
			newTenantClaim(ctx, t, c, ns, "orphan", class, ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "orphan")
			if err := c.Create(ctx, lbService(ns, "orphan", map[string]string{claimAnnotation: "orphan"}, false)); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "orphan", claimIPs(claim))

			startCore := stopProcess(t, "address-controller")
			startDriver := stopProcess(t, "metallb-iad")
			restarted := false
			start := func() {
				if !restarted {
					restarted = true
					startDriver()
					startCore()
				}
			}
			t.Cleanup(start)
			for _, o := range []client.Object{claim, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: claim.Status.Addresses[0].Name}},
				&ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: class}}} {
				if err := c.Delete(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			consistently(ctx, t, 2*time.Second, "the claim to hang on its finalizer without its controller", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim)
				return err == nil && claim.DeletionTimestamp != nil, err
			})

			// Below Kubernetes 1.36 the script also removes the driver's parking webhook
			// registration, which an uninstall of the driver's chart would have taken; it is put
			// back, as a reinstall would, before the driver starts again.
			cs, err := kubernetes.NewForConfig(cluster.Config())
			if err != nil {
				t.Fatal(err)
			}
			mwcs := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
			webhook, err := mwcs.Get(ctx, policycel.ParkingWebhookConfiguration, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				webhook = nil
			case err != nil:
				t.Fatal(err)
			default:
				webhook = &admissionregistrationv1.MutatingWebhookConfiguration{
					ObjectMeta: metav1.ObjectMeta{Name: webhook.Name, Labels: webhook.Labels, Annotations: webhook.Annotations},
					Webhooks:   webhook.Webhooks,
				}
				startBoth := start
				start = func() {
					if !restarted {
						if _, err := mwcs.Create(context.Background(), webhook, metav1.CreateOptions{}); client.IgnoreAlreadyExists(err) != nil {
							t.Error(err)
						}
					}
					startBoth()
				}
				t.Cleanup(start)
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
			eventually(ctx, t, 30*time.Second, "the claim, address, class, placeholder and pin to be gone", func(ctx context.Context) (bool, error) {
				left, err := leftovers(ctx, c, ns, class, claimIPs(claim))
				if left != "" {
					return false, fmt.Errorf("left: %s", left)
				}
				return err == nil, err
			})
			var svc corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orphan"}, &svc); err != nil {
				t.Fatal(err)
			}
			if svc.Annotations[pinnedMarker] != "" || svc.Annotations[pinAnnotation] != "" {
				t.Fatalf("the driver's pin survived: %v", svc.Annotations)
			}
			if webhook != nil {
				if _, err := mwcs.Get(ctx, webhook.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("the parking webhook's registration outlived the driver: %v", err)
				}
			}
			// Back to a working system for the tests that follow: the controllers restore their
			// finalizers and holds on everything else.
			start()
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{class}, Namespaces: []string{ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
