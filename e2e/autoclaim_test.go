package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

const (
	classAnnotation     = "local.sdn.cozystack.io/ip-address-class"
	autoClaimAnnotation = "local.sdn.cozystack.io/auto-claim"
	autoClaimClassMark  = "ipaddressclass.local.sdn.cozystack.io/is-auto-claim-class"
)

func TestAutoClaim(t *testing.T) {
	f := features.New("auto-claim gives ordinary LoadBalancer Services reserved addresses once an admin opts in").
		Assess("auto-claim", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-autoclaim")
			legacy := tenantNamespace(ctx, t, c, "tenant-legacy")
			poolWithClass(ctx, t, c, "e2e-ac-public", ipamv1.ReclaimRetain, "198.51.100.208/29", "2001:db8:30::/124")
			poolWithClass(ctx, t, c, "e2e-ac-private", ipamv1.ReclaimRetain, "198.51.100.216/29", "2001:db8:31::/124")
			t.Cleanup(func() {
				bg := context.Background()
				_ = c.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				_ = c.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: legacy}})
			})
			// An auto-assigning pool for tenant-legacy only: a Service that has an address
			// before auto-claim is enabled.
			pool := &unstructured.Unstructured{}
			pool.SetGroupVersionKind(poolGVK)
			pool.SetNamespace(metallbNamespace)
			pool.SetName("e2e-ac-legacy")
			pool.Object["spec"] = map[string]any{
				"addresses":         []any{"198.51.100.224/29"},
				"serviceAllocation": map[string]any{"namespaces": []any{legacy}},
			}
			if err := c.Create(ctx, pool); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })
			create := func(svc *corev1.Service) {
				t.Helper()
				if err := c.Create(ctx, svc); err != nil {
					t.Fatal(err)
				}
			}
			hasAddress := lbService(legacy, "has-address", nil, false)
			create(hasAddress)
			waitIngress(ctx, t, c, legacy, "has-address", []string{"198.51.100.224"})

			// Off until an admin opts in: a plain Service gets nothing...
			create(lbService(ns, "before", nil, false))
			// ...but a guest-style Service naming a class gets a reserved address of it.
			create(lbService(ns, "guest", map[string]string{classAnnotation: "e2e-ac-private"}, false))
			guest := waitClaimBound(ctx, t, c, ns, "guest")
			if guest.Status.ClassName != "e2e-ac-private" || guest.Annotations[autoClaimAnnotation] != "true" {
				t.Fatalf("guest claim: class %q annotations %v", guest.Status.ClassName, guest.Annotations)
			}
			waitIngress(ctx, t, c, ns, "guest", claimIPs(guest))
			expectNoClaim(ctx, t, c, ns, "before")

			// The admin marks the public class for auto-claim (and unmarks it first thing in the
			// teardown, so no claim is made for Services that lose their address meanwhile).
			patchAnnotations(ctx, t, c, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ac-public"}},
				map[string]*string{autoClaimClassMark: ptrTo("true")})
			t.Cleanup(func() {
				_ = c.Patch(context.Background(), &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ac-public"}},
					client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"`+autoClaimClassMark+`":null}}}`)))
			})
			before := waitClaimBound(ctx, t, c, ns, "before") // a waiting Service is picked up
			if before.Status.ClassName != "e2e-ac-public" {
				t.Fatalf("claim of class %q, want e2e-ac-public", before.Status.ClassName)
			}

			// Each skip rule, one Service each; "plain" is the control that does get a claim.
			lbClass := "example.org/other"
			skips := map[string]*corev1.Service{
				"opted-out":   lbService(ns, "opted-out", map[string]string{autoClaimAnnotation: "false"}, false),
				"lb-class":    lbService(ns, "lb-class", nil, false),
				"lb-ip":       lbService(ns, "lb-ip", nil, false),
				"pool":        lbService(ns, "pool", map[string]string{"metallb.io/address-pool": "e2e-ac-private"}, false),
				"legacy-pin":  lbService(ns, "legacy-pin", map[string]string{"metallb.universe.tf/loadBalancerIPs": "192.0.2.1"}, false),
				"sharing":     lbService(ns, "sharing", map[string]string{"metallb.io/allow-shared-ip": "k"}, false),
				"names-claim": lbService(ns, "names-claim", map[string]string{claimAnnotation: "elsewhere"}, false),
			}
			skips["lb-class"].Spec.LoadBalancerClass = &lbClass
			skips["lb-ip"].Spec.LoadBalancerIP = "192.0.2.2"
			for _, s := range skips {
				create(s)
			}
			// Dual-stack Services get Dual claims.
			create(lbService(ns, "plain", nil, true))
			plain := waitClaimBound(ctx, t, c, ns, "plain")
			if plain.Spec.Family != ipamv1.Dual || len(plain.OwnerReferences) != 1 || plain.OwnerReferences[0].Kind != "Service" {
				t.Fatalf("plain claim: family %s owners %+v", plain.Spec.Family, plain.OwnerReferences)
			}
			waitIngress(ctx, t, c, ns, "plain", claimIPs(plain))
			consistently(ctx, t, 3*time.Second, "no claim for a skipped Service", func(ctx context.Context) (bool, error) {
				for name := range skips {
					if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ipamv1.IPAddressClaim{}); !apierrors.IsNotFound(err) {
						return false, fmt.Errorf("Service %s got a claim (or the lookup failed: %v)", name, err)
					}
				}
				err := c.Get(ctx, client.ObjectKey{Namespace: legacy, Name: "has-address"}, &ipamv1.IPAddressClaim{})
				if !apierrors.IsNotFound(err) {
					return false, fmt.Errorf("the Service that had an address got a claim (or the lookup failed: %v)", err)
				}
				return true, nil
			})
			waitIngress(ctx, t, c, legacy, "has-address", []string{"198.51.100.224"})

			// Deleting the Service deletes the claim and its addresses, although the class retains.
			var svc corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, &svc); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(ctx, &svc); err != nil {
				t.Fatal(err)
			}
			for _, a := range plain.Status.Addresses {
				eventually(ctx, t, 60*time.Second, "address "+a.Name+" to be deleted with the Service", func(ctx context.Context) (bool, error) {
					err := c.Get(ctx, client.ObjectKey{Name: a.Name}, &ipamv1.IPAddress{})
					return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
				})
			}

			// A Service deleted and at once created again under its name gets a claim of its own
			// once the garbage collector has removed the old one.
			create(lbService(ns, "again", nil, false))
			first := waitClaimBound(ctx, t, c, ns, "again")
			if err := c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again"}}); err != nil {
				t.Fatal(err)
			}
			second := lbService(ns, "again", nil, false)
			eventually(ctx, t, 30*time.Second, "the Service to be created again", func(ctx context.Context) (bool, error) {
				err := c.Create(ctx, second)
				return err == nil, client.IgnoreAlreadyExists(err)
			})
			eventually(ctx, t, 90*time.Second, "a Bound claim owned by the new Service", func(ctx context.Context) (bool, error) {
				var cl ipamv1.IPAddressClaim
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again"}, &cl); err != nil {
					return false, client.IgnoreNotFound(err)
				}
				owner := metav1.GetControllerOf(&cl)
				return owner != nil && owner.UID == second.UID && cl.UID != first.UID && cl.Status.Phase == ipamv1.ClaimBound, nil
			})
			waitIngress(ctx, t, c, ns, "again", claimIPs(waitClaimBound(ctx, t, c, ns, "again")))

			// Removing the owner reference keeps the address, attached while the Service lives
			// and kept after it.
			create(lbService(ns, "keeper", nil, false))
			keeper := waitClaimBound(ctx, t, c, ns, "keeper")
			ips := claimIPs(keeper)
			waitIngress(ctx, t, c, ns, "keeper", ips)
			if err := c.Patch(ctx, keeper, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"ownerReferences":null}}`))); err != nil {
				t.Fatal(err)
			}
			consistently(ctx, t, 3*time.Second, "the Service to keep its address after the owner reference went", func(ctx context.Context) (bool, error) {
				var s corev1.Service
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper"}, &s); err != nil {
					return false, err
				}
				return slices.Equal(ingressOf(&s), ips), nil
			})
			keeperSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keeper"}}
			if err := c.Delete(ctx, keeperSvc); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the keeper Service to be gone", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(keeperSvc), keeperSvc)
				return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
			})
			// The garbage collector has nothing to collect: the claim stays, Bound to its address.
			consistently(ctx, t, 5*time.Second, "the kept claim to stay Bound after its Service went", func(ctx context.Context) (bool, error) {
				var cl ipamv1.IPAddressClaim
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper"}, &cl); err != nil {
					return false, err
				}
				return cl.DeletionTimestamp == nil && cl.Status.Phase == ipamv1.ClaimBound, nil
			})
			kept := waitClaimBound(ctx, t, c, ns, "keeper")
			if got := claimIPs(kept); len(got) != 1 || got[0] != ips[0] {
				t.Fatalf("after the Service went, the claim has %v, want %v", got, ips)
			}
			waitHeld(ctx, t, c, kept.Status.Addresses[0].Name, ips[0])

			// A claim of the Service's name that auto-claim did not make is left alone.
			taken := newTenantClaim(ctx, t, c, ns, "taken", "e2e-ac-private", ipamv1.IPv4)
			create(lbService(ns, "taken", nil, false))
			waitServiceEvent(ctx, t, c, ns, "taken", "ClaimNameTaken")
			if err := c.Get(ctx, client.ObjectKeyFromObject(taken), taken); err != nil {
				t.Fatal(err)
			}
			if len(taken.OwnerReferences) != 0 || taken.Annotations[autoClaimAnnotation] != "" || taken.Spec.ClassName != "e2e-ac-private" {
				t.Fatalf("auto-claim changed a tenant's claim: %+v", taken.ObjectMeta)
			}
			// Neither tenant reads anything naming the other.
			noOtherTenantNamed(ctx, t, c, ns, legacy)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func expectNoClaim(ctx context.Context, t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ipamv1.IPAddressClaim{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Service %s/%s got a claim (or the lookup failed: %v)", ns, name, err)
	}
}
