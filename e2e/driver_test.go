package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/binaries"
)

// The product page's walk-through, with its own manifests and its own jsonpath.
func TestDriverWalkThrough(t *testing.T) {
	f := features.New("a tenant reserves an address and a Service that names the claim gets it").
		Assess("walk-through", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			for _, f := range []string{"metallb-pool.yaml", "class-public.yaml", "claim-web.yaml"} {
				applyExample(ctx, t, f)
			}
			claim := waitClaimBound(ctx, t, c, "tenant-example", "web")
			kubectl, err := binaries.Tool("kubectl")
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cluster.Kubeconfig(), "-n", "tenant-example",
				"get", "ipaddressclaim", "web", "-o", "jsonpath={.status.addresses[*].address}").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl: %v\n%s", err, out)
			}
			ip := strings.TrimSpace(string(out))
			if ip == "" || ip != claimIPs(claim)[0] || !mustPrefix("203.0.113.0/26").Contains(mustAddr(ip)) {
				t.Fatalf("jsonpath printed %q; the claim has %v", ip, claimIPs(claim))
			}
			// Held silently by a placeholder until a Service names the claim.
			waitHeld(ctx, t, c, claim.Status.Addresses[0].Name, ip)
			applyExample(ctx, t, "service-web.yaml")
			svc := waitIngress(ctx, t, c, "tenant-example", "web", []string{ip})
			if svc.Annotations[pinnedMarker] != "true" {
				t.Fatalf("the Service lacks the pinned marker: %v", svc.Annotations)
			}
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"public"}, Namespaces: []string{"tenant-example"}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestDriverRefusesPools(t *testing.T) {
	f := features.New("a class is refused unless it names a pool of its own with autoAssign: false").
		Assess("each refusal, then acceptance once fixed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-refusals")
			newPool(ctx, t, c, "e2e-auto", nil, "198.51.100.64/28")
			newPool(ctx, t, c, "e2e-shared", ptrTo(false), "198.51.100.80/28")
			older := newDriverClass(ctx, t, c, "e2e-shared-first", "e2e-shared", ipamv1.ReclaimDelete)
			t.Cleanup(func() { deleteClassAndAddresses(t, c, older.Name) })
			waitAccepted(ctx, t, c, older.Name, metav1.ConditionTrue)
			time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second precision

			for _, tc := range []struct{ class, pool, reason string }{
				{"e2e-no-pool", "", "PoolNotSet"},
				{"e2e-missing-pool", "e2e-nonexistent", "PoolNotFound"},
				{"e2e-auto-pool", "e2e-auto", "PoolAutoAssigns"},
				{"e2e-shared-second", "e2e-shared", "PoolClaimedByOtherClass"},
			} {
				cls := newDriverClass(ctx, t, c, tc.class, tc.pool, ipamv1.ReclaimDelete)
				t.Cleanup(func() { deleteClassAndAddresses(t, c, cls.Name) })
				cond := waitAccepted(ctx, t, c, tc.class, metav1.ConditionFalse)
				if cond.Reason != tc.reason {
					t.Errorf("class %s refused with %s, want %s (%s)", tc.class, cond.Reason, tc.reason, cond.Message)
				}
				ev := waitServiceEvent(ctx, t, c, "default", tc.class, "PoolRefused")
				if ev.Type != corev1.EventTypeWarning {
					t.Errorf("PoolRefused is %s, want Warning", ev.Type)
				}
			}
			// A claim of a refused class stays Pending and says why.
			newTenantClaim(ctx, t, c, ns, "waits", "e2e-missing-pool", ipamv1.IPv4)
			eventually(ctx, t, 30*time.Second, "the claim to report ClassNotAccepted", func(ctx context.Context) (bool, error) {
				var claim ipamv1.IPAddressClaim
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "waits"}, &claim)
				cond := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.ConditionBound)
				return cond != nil && cond.Reason == ipamv1.ReasonClassNotAccepted && strings.Contains(cond.Message, "PoolNotFound"), err
			})
			// Creating the pool is re-checked: the class is accepted and the claim binds.
			newPool(ctx, t, c, "e2e-nonexistent", ptrTo(false), "198.51.100.96/28")
			waitAccepted(ctx, t, c, "e2e-missing-pool", metav1.ConditionTrue)
			waitClaimBound(ctx, t, c, ns, "waits")
			// Deleting the older class hands the shared pool to the other one.
			deleteClassAndAddresses(t, c, older.Name)
			waitAccepted(ctx, t, c, "e2e-shared-second", metav1.ConditionTrue)
			if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestDriverDualDetachReattach(t *testing.T) {
	f := features.New("a Dual claim moves between Services and keeps its addresses").
		Assess("attach, refuse a second Service, detach, re-attach elsewhere", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-dual")
			poolWithClass(ctx, t, c, "e2e-dual", ipamv1.ReclaimDelete, "198.51.100.112/28", "2001:db8:10::/124")
			newTenantClaim(ctx, t, c, ns, "dual", "e2e-dual", ipamv1.Dual)
			claim := waitClaimBound(ctx, t, c, ns, "dual")
			ips := claimIPs(claim)
			if len(ips) != 2 || !mustAddr(ips[0]).Is4() || !mustAddr(ips[1]).Is6() {
				t.Fatalf("dual claim has %v", ips)
			}
			for _, a := range claim.Status.Addresses {
				waitHeld(ctx, t, c, a.Name, a.Address)
			}

			link := map[string]string{claimAnnotation: "dual"}
			first := lbService(ns, "first", link, true)
			if err := c.Create(ctx, first); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "first", ips)

			// A second Service naming the same claim gets a warning and nothing else.
			second := lbService(ns, "second", link, true)
			if err := c.Create(ctx, second); err != nil {
				t.Fatal(err)
			}
			waitServiceEvent(ctx, t, c, ns, "second", "ClaimInUse")
			if err := c.Get(ctx, client.ObjectKeyFromObject(second), second); err != nil {
				t.Fatal(err)
			}
			if len(second.Status.LoadBalancer.Ingress) != 0 || second.Annotations[pinAnnotation] != "" {
				t.Fatalf("the second Service got %v / pin %q", ingressOf(second), second.Annotations[pinAnnotation])
			}
			// A single-stack Service cannot use a Dual claim.
			single := lbService(ns, "single", map[string]string{claimAnnotation: "dual"}, false)
			if err := c.Create(ctx, single); err != nil {
				t.Fatal(err)
			}
			waitServiceEvent(ctx, t, c, ns, "single", "FamilyMismatch")
			if err := c.Delete(ctx, single); err != nil {
				t.Fatal(err)
			}

			// Detach: the first Service loses the addresses and its pin, the claim stays Bound
			// to the same addresses, and the waiting second Service gets them.
			patchAnnotations(ctx, t, c, first, map[string]*string{claimAnnotation: nil})
			waitIngress(ctx, t, c, ns, "first", nil)
			if err := c.Get(ctx, client.ObjectKeyFromObject(first), first); err != nil {
				t.Fatal(err)
			}
			if first.Annotations[pinAnnotation] != "" || first.Annotations[pinnedMarker] != "" {
				t.Fatalf("the detached Service keeps the pin: %v", first.Annotations)
			}
			waitIngress(ctx, t, c, ns, "second", ips)
			if got := claimIPs(waitClaimBound(ctx, t, c, ns, "dual")); !slices.Equal(got, ips) {
				t.Fatalf("after moving, the claim has %v, want %v", got, ips)
			}
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-dual"}, Namespaces: []string{ns}})

			// Deleting the Service returns the addresses to a hold.
			if err := c.Delete(ctx, second); err != nil {
				t.Fatal(err)
			}
			for _, a := range claim.Status.Addresses {
				waitHeld(ctx, t, c, a.Name, a.Address)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestDriverReclaimPolicies(t *testing.T) {
	f := features.New("Delete returns the IP to the pool; Retain keeps it held").
		Assess("both policies", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-reclaim")
			poolWithClass(ctx, t, c, "e2e-del", ipamv1.ReclaimDelete, "198.51.100.128/30")
			poolWithClass(ctx, t, c, "e2e-ret", ipamv1.ReclaimRetain, "198.51.100.132/30")

			del := newTenantClaim(ctx, t, c, ns, "del", "e2e-del", ipamv1.IPv4)
			ip := claimIPs(waitClaimBound(ctx, t, c, ns, "del"))[0]
			name := ipamv1.AddressName(mustAddr(ip))
			if err := c.Delete(ctx, del); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "the IPAddress and its placeholder to go", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKey{Name: name}, &ipamv1.IPAddress{})
				if !apierrors.IsNotFound(err) {
					return false, client.IgnoreNotFound(err)
				}
				holders, err := servicesServing(ctx, c, ip)
				return len(holders) == 0, err
			})
			// Back in the pool: an admin's Service may take it now.
			admin := lbService(ns, "admin-pinned", map[string]string{pinAnnotation: ip}, false)
			if err := c.Create(ctx, admin); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "admin-pinned", []string{ip})
			if err := c.Delete(ctx, admin); err != nil {
				t.Fatal(err)
			}

			ret := newTenantClaim(ctx, t, c, ns, "ret", "e2e-ret", ipamv1.IPv4)
			rip := claimIPs(waitClaimBound(ctx, t, c, ns, "ret"))[0]
			rname := ipamv1.AddressName(mustAddr(rip))
			if err := c.Delete(ctx, ret); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the retained address to be Released", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: rname}, &a)
				return a.Status.Phase == ipamv1.AddressReleased, err
			})
			waitHeld(ctx, t, c, rname, rip)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestDriverHoldAndConflict(t *testing.T) {
	f := features.New("placeholders come back, and a wrongful holder is a Conflict until it lets go").
		Assess("re-hold, conflict, recovery", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-conflict")
			poolWithClass(ctx, t, c, "e2e-hold", ipamv1.ReclaimDelete, "198.51.100.136/30")
			newTenantClaim(ctx, t, c, ns, "held", "e2e-hold", ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "held")
			ip, name := claim.Status.Addresses[0].Address, claim.Status.Addresses[0].Name
			waitHeld(ctx, t, c, name, ip)

			// A placeholder deleted by hand is recreated, pinned to the same address.
			holders, _ := servicesServing(ctx, c, ip)
			if err := c.Delete(ctx, &holders[0]); err != nil {
				t.Fatal(err)
			}
			waitHeld(ctx, t, c, name, ip)

			// While the driver is down, an admin pins the reserved IP on another Service.
			local := stopProcess(t, "metallb-iad")
			holders, _ = servicesServing(ctx, c, ip)
			if err := c.Delete(ctx, &holders[0]); err != nil {
				t.Fatal(err)
			}
			intruder := lbService(ns, "intruder", map[string]string{pinAnnotation: ip}, false)
			if err := c.Create(ctx, intruder); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "intruder", []string{ip})
			local()

			eventually(ctx, t, 30*time.Second, "Conflict on the address", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: name}, &a)
				cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionConflict)
				return a.Status.Phase == ipamv1.AddressConflict && cond != nil && strings.Contains(cond.Message, "intruder"), err
			})
			waitServiceEvent(ctx, t, c, ns, "intruder", "ReservedAddressConflict")
			waitServiceEvent(ctx, t, c, "default", name, "Conflict")

			// The wrongful holder goes: the placeholder gets the address back, Conflict clears.
			if err := c.Delete(ctx, intruder); err != nil {
				t.Fatal(err)
			}
			waitHeld(ctx, t, c, name, ip)
			eventually(ctx, t, 30*time.Second, "Conflict to clear", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: name}, &a)
				return a.Status.Phase == ipamv1.AddressBound && !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict), err
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// stopProcess stops a component and returns a function that starts it again (and waits until
// it is ready on kind): the local provider stops its supervised process, kind scales its
// Deployment to zero and back.
func stopProcess(t *testing.T, name string) func() {
	t.Helper()
	if s, ok := cluster.(provider.Stopper); ok {
		start, err := s.StopComponent(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := start(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	local := localCluster(t, "stopping "+name+" needs the local or the kind provider")
	for _, p := range local.Processes() {
		if p.Spec.Name == name {
			if err := local.StopProcess(p, 0); err != nil {
				t.Fatal(err)
			}
			spec := p.Spec
			return func() {
				if _, err := local.StartProcess(context.Background(), spec); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Fatalf("no process %s", name)
	return nil
}
