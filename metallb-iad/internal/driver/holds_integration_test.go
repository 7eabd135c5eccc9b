package driver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Holds and teardown: an address keeps its IP while the core protects it, a hold whose address
// is gone is swept, a class being deleted gets nothing new, an IP out of the pool is Lost, and the
// driver finds its placeholders in its own namespace only (docs/design.md#holds).

// Defect 1: deleting a Bound address while the core protects it changes nothing for the IP;
// teardown starts once the core lets go.
func TestDeletingAProtectedAddressKeepsItsIP(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "d1", "203.0.113.16/28")
	startFakeMetalLB(t, "d1", netip.MustParsePrefix("203.0.113.16/28"))
	ns := newNamespace(t, "d1")
	const ip = "203.0.113.20"
	_, addr := boundClaimWithAddress(t, ns, "c", "d1", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)

	if err := admin.Delete(ctx, addr); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "the hold to keep the IP while the core protects the address", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr.Name)}, &s); err != nil {
			return false, err
		}
		a := getAddress(t, addr.Name)
		return s.DeletionTimestamp == nil && s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip && len(a.Finalizers) == 2, nil
	})
	releaseByCore(t, addr.Name)
	eventually(t, "teardown: the hold and the address gone", func() (bool, error) {
		var s corev1.Service
		errS := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr.Name)}, &s)
		var a ipamv1.IPAddress
		errA := admin.Get(ctx, client.ObjectKey{Name: addr.Name}, &a)
		return client.IgnoreNotFound(errS) == nil && errS != nil && client.IgnoreNotFound(errA) == nil && errA != nil, nil
	})
}

// Defect 2: a hold whose address does not exist is swept.
func TestOrphanedHoldIsSwept(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	name := ipamv1.AddressName(netip.MustParseAddr("203.0.113.250"))
	orphan := plan.HoldService(testDriverNS, name, netip.MustParseAddr("203.0.113.250"), "nowhere", "")
	if err := admin.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the orphaned hold to be deleted", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Service{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}

// Defect 7: a class being deleted provisions nothing and says so through Accepted.
func TestDeletingClassProvisionsNothing(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "going", "203.0.113.144/28")
	ns := newNamespace(t, "going")
	var class ipamv1.IPAddressClass
	if err := admin.Get(ctx, client.ObjectKey{Name: "going"}, &class); err != nil {
		t.Fatal(err)
	}
	class.Finalizers = []string{ipamv1.FinalizerClass} // the core's, holding the class
	if err := admin.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, &class); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Accepted=False ClassDeleting", func() (bool, error) {
		c := acceptance(t, "going")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == plan.ReasonClassDeleting, nil
	})
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "going", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "going"}
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	consistently(t, 2*time.Second, "no placeholder for a claim of a class being deleted", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.ProvisioningName(string(claim.UID), ipamv1.IPv4, 0)}, &corev1.Service{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	class.Finalizers = nil
	if err := admin.Get(ctx, client.ObjectKey{Name: "going"}, &class); err == nil {
		class.Finalizers = nil
		_ = admin.Update(ctx, &class)
	}
}

// Defect 6: a pool deleted or shrunk past a reserved IP makes the address Lost; Lost clears
// when the pool serves it again.
func TestLostWhenThePoolNoLongerServesTheIP(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "lost", "203.0.113.64/28")
	startFakeMetalLB(t, "lost", netip.MustParsePrefix("203.0.113.64/28"))
	ns := newNamespace(t, "lost")
	const ip = "203.0.113.70"
	_, addr := boundClaimWithAddress(t, ns, "c", "lost", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	lost := func(reason string) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(addr.Name, ipamv1.ConditionLost)
			if reason == "" {
				return c != nil && c.Status == metav1.ConditionFalse, err
			}
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, ip), err
		}
	}
	var pool metallb.IPAddressPool
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testMetalLBNS, Name: "lost"}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Addresses = []string{"203.0.113.72/29"} // shrunk past .70
	if err := admin.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Lost=True OutsidePool", lost(plan.ReasonOutsidePool))
	pool.Spec.Addresses = []string{"203.0.113.64/28"}
	if err := admin.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Lost=False once the pool includes the IP again", lost(""))
	if err := admin.Delete(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Lost=True PoolNotFound", lost(plan.ReasonPoolNotFound))
	if len(driverEvents(t, "default", string(addr.UID), plan.ReasonLost)) == 0 {
		t.Fatal("no Lost warning on the address")
	}
}

// A hold made by a version of the driver before the driver label (so still in the core's cache)
// gets the label with the next patch the driver makes to it anyway, here the pin of a hold that
// names another IP: an upgrade costs no write of its own, and the label does come.
func TestAnOlderVersionsHoldGetsTheDriverLabelWithItsNextPatch(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := fakeMetalLBClass(t, "oldhold", "198.18.11.0/28")
	const ip = "198.18.11.1"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	boundClaimWithAddress(t, ns, "c", "oldhold", ip)
	waitHeldByPlaceholder(t, name, ip)
	// The hold as an older version left it: no driver label. And a pin that is not the
	// address's IP, so that the driver has a patch to make.
	var old corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(name)}, &old); err != nil {
		t.Fatal(err)
	}
	delete(old.Labels, ipamv1.LabelDriverService)
	old.Annotations[metallb.AnnotationLoadBalancerIPs] = "198.18.11.2"
	if err := admin.Update(ctx, &old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the driver to pin the old hold again, with its label", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(&old), &s); err != nil {
			return false, err
		}
		if s.UID != old.UID {
			return false, fmt.Errorf("the old hold was replaced (uid %s, was %s): want it kept and patched", s.UID, old.UID)
		}
		return s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip && s.Labels[ipamv1.LabelDriverService] == plan.Provisioner, nil
	})
}

// The placeholder indexes are cluster-wide (index.ClusterWide), listed without a namespace: a
// tenant's Service that copies a hold's, a release's or a provisioning placeholder's labels is
// never found by them (the index functions keep to the driver's namespace, as the namespaced
// lists did before), and the claim-link index finds a Service by its namespace and claim only.
func TestPlaceholderLookupsKeepToTheDriversNamespace(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const addr, claimKey = "ip-203-0-113-250", "tenant/lookalike"
	mk := func(name string, labels, annotations map[string]string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, Labels: labels, Annotations: annotations},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), s) })
		return s
	}
	svcs := []*corev1.Service{
		mk("fake-hold", map[string]string{plan.LabelRole: plan.RoleHold, plan.LabelAddress: addr}, nil),
		mk("fake-release", map[string]string{plan.LabelRole: plan.RoleRelease, plan.LabelAddress: addr}, nil),
		mk("fake-provisioning", map[string]string{plan.LabelRole: plan.RoleProvisioning}, map[string]string{plan.AnnotationClaim: claimKey}),
		mk("linked", nil, map[string]string{ipamv1.AnnotationServiceClaim: "lookalike"}),
	}
	// The driver's cache has them all.
	for _, s := range svcs {
		eventually(t, "the driver's cache to show "+s.Name, func() (bool, error) {
			return testDriver.client.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Service{}) == nil, nil
		})
	}
	for field, value := range map[string]string{indexHoldOf: addr, indexReleaseOf: addr, indexProvisioningForKey: claimKey} {
		var l corev1.ServiceList
		if err := testDriver.client.List(ctx, &l, client.MatchingFields{field: value}); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 0 {
			t.Errorf("%s=%s found a tenant's Service: %s/%s", field, value, l.Items[0].Namespace, l.Items[0].Name)
		}
	}
	if got := testDriver.servicesLinkedTo(ctx, "tenant", "lookalike"); len(got) != 1 || got[0].Name != "linked" {
		t.Errorf("Services linked to tenant/lookalike: %v, want tenant/linked", got)
	}
	if got := testDriver.servicesLinkedTo(ctx, testDriverNS, "lookalike"); len(got) != 0 {
		t.Errorf("Services linked to %s/lookalike: %v, want none", testDriverNS, got)
	}
}

// Finding 7: an orphaned hold whose events the driver missed is swept by the periodic sweep
// (here the address controller loses every request for the hold's address, as if its events had
// been lost: no pass of the address, which would sweep it, runs).
func TestPeriodicSweepEndsAMissedOrphan(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.251")
	lostEvents.lose(t, "metallb-iad-address", reconcile.Request{NamespacedName: types.NamespacedName{Name: ipamv1.AddressName(ip)}})
	orphan := plan.HoldService(testDriverNS, ipamv1.AddressName(ip), ip, "nowhere", "")
	if err := admin.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the periodic sweep to delete the orphaned hold", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Service{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}
