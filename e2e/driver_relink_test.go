package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Issue 10 defects 4 and 5 with the real MetalLB: a Service moved from claim A to claim B ends
// with B's address, A's is held again, and neither address is ever in Conflict nor is a driver
// Warning said on the way; detaching leaves no false Conflict.
func TestDriverRelinkWithoutConflict(t *testing.T) {
	f := features.New("re-linking a Service from one claim to another").
		Assess("A to B, then detach", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-relink")
			poolWithClass(ctx, t, c, "e2e-relink", ipamv1.ReclaimDelete, "198.51.100.144/29")
			newTenantClaim(ctx, t, c, ns, "a", "e2e-relink", ipamv1.IPv4)
			newTenantClaim(ctx, t, c, ns, "b", "e2e-relink", ipamv1.IPv4)
			a, b := waitClaimBound(ctx, t, c, ns, "a"), waitClaimBound(ctx, t, c, ns, "b")
			ipA, ipB := claimIPs(a)[0], claimIPs(b)[0]
			nameA, nameB := a.Status.Addresses[0].Name, b.Status.Addresses[0].Name
			waitHeld(ctx, t, c, nameA, ipA)
			waitHeld(ctx, t, c, nameB, ipB)
			svc := lbService(ns, "web", map[string]string{claimAnnotation: "a"}, false)
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "web", []string{ipA})

			watchNoConflict := func(d time.Duration) {
				t.Helper()
				deadline := time.Now().Add(d)
				for time.Now().Before(deadline) {
					for _, n := range []string{nameA, nameB} {
						var addr ipamv1.IPAddress
						if err := c.Get(ctx, client.ObjectKey{Name: n}, &addr); err != nil {
							t.Fatal(err)
						}
						if meta.IsStatusConditionTrue(addr.Status.Conditions, ipamv1.ConditionConflict) {
							t.Fatalf("%s turned Conflict: %+v", n, meta.FindStatusCondition(addr.Status.Conditions, ipamv1.ConditionConflict))
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			b2 := "b"
			patchAnnotations(ctx, t, c, svc, map[string]*string{claimAnnotation: &b2})
			watchNoConflict(5 * time.Second)
			waitIngress(ctx, t, c, ns, "web", []string{ipB})
			waitHeld(ctx, t, c, nameA, ipA)
			noDriverWarnings(ctx, t, c, ns, "web")

			patchAnnotations(ctx, t, c, svc, map[string]*string{claimAnnotation: nil})
			watchNoConflict(5 * time.Second)
			waitHeld(ctx, t, c, nameB, ipB)
			noDriverWarnings(ctx, t, c, ns, "web")
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-relink"}, Namespaces: []string{ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// Issue 16 item 2: an admin Service listing a reserved address in spec.externalIPs turns the
// address Conflict (condition naming it, Warning events on both) and back once it lets go.
func TestDriverExternalIPConflict(t *testing.T) {
	f := features.New("a reserved address in another Service's externalIPs").
		Assess("Conflict and back", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-extip")
			poolWithClass(ctx, t, c, "e2e-extip", ipamv1.ReclaimDelete, "198.51.100.152/30")
			newTenantClaim(ctx, t, c, ns, "kept", "e2e-extip", ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "kept")
			ip, name := claim.Status.Addresses[0].Address, claim.Status.Addresses[0].Name
			waitHeld(ctx, t, c, name, ip)

			admin := &corev1.Service{}
			admin.Namespace, admin.Name = "default", "e2e-extip-admin"
			admin.Spec.ExternalIPs = []string{ip}
			admin.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
			if err := c.Create(ctx, admin); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), admin) })
			eventually(ctx, t, 30*time.Second, "Conflict naming the admin Service", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: name}, &a)
				cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionConflict)
				return a.Status.Phase == ipamv1.AddressConflict && cond != nil && strings.Contains(cond.Message, "default/e2e-extip-admin"), err
			})
			waitServiceEvent(ctx, t, c, "default", "e2e-extip-admin", "ReservedAddressConflict")
			waitServiceEvent(ctx, t, c, "default", name, "Conflict")

			if err := c.Get(ctx, client.ObjectKeyFromObject(admin), admin); err != nil {
				t.Fatal(err)
			}
			admin.Spec.ExternalIPs = nil
			if err := c.Update(ctx, admin); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "Conflict to clear", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: name}, &a)
				return a.Status.Phase == ipamv1.AddressBound && !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict), err
			})
			waitHeld(ctx, t, c, name, ip)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// driverWarningReasons are the Warning reasons the driver says about Services.
var driverWarningReasons = map[string]bool{"ClaimNotReady": true, "FamilyMismatch": true, "ForeignPin": true,
	"ClaimInUse": true, "AddressNotServable": true, "ReservedAddressConflict": true}

// noDriverWarnings fails when the driver said a Warning about the Service.
func noDriverWarnings(ctx context.Context, t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && driverWarningReasons[e.Reason] {
			t.Fatalf("driver Warning on %s/%s: %s %s", ns, name, e.Reason, e.Note)
		}
	}
}
