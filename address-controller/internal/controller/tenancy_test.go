package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// What one tenant can learn and take from the classes and addresses of others, on a real
// apiserver with the core running: a tenant learns nothing of an address it cannot use.

// A claim that names an address reserved for another namespace reads exactly as one that names
// an address that does not exist: the same reason and the same words, no class copied into its
// status, no event that says more. Naming addresses one by one must not tell a tenant which IPs
// are reserved, by whom, or from which class.
func TestNamingAnotherNamespacesAddressRevealsNothing(t *testing.T) {
	owner, prober := newNamespace(t), newNamespace(t)
	const class = "oracle-private"
	// A class of no running driver: the address is the admin's, bound by hand.
	newClass(t, class, "oracle.drivers.example.com")
	taken := newAddress(t, "203.0.113.201", class, &ipamv1.ClaimReference{Namespace: owner, Name: "web"})
	newClaim(t, owner, "web", class, ipamv1.IPv4)
	waitClaimPhase(t, owner, "web", ipamv1.ClaimBound)

	const ghost = "ip-203-0-113-202" // no such address
	newClaim(t, prober, "grab", "", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = taken.Name })
	newClaim(t, prober, "guess", "", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = ghost })
	guess := waitClaimReason(t, prober, "guess", ipamv1.ReasonAddressNotFound)
	grab := waitClaimReason(t, prober, "grab", ipamv1.ReasonAddressNotFound)

	said := func(c *ipamv1.IPAddressClaim) string {
		return meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound).Message
	}
	if g, m := strings.ReplaceAll(said(grab), taken.Name, "X"), strings.ReplaceAll(said(guess), ghost, "X"); g != m {
		t.Errorf("a taken address and a missing one read differently:\n taken:   %q\n missing: %q", said(grab), said(guess))
	}
	if grab.Status.ClassName != "" {
		t.Errorf("the claim's status names the other namespace's class: %q", grab.Status.ClassName)
	}
	for _, c := range []*ipamv1.IPAddressClaim{grab, guess} {
		// Each claim is told, with a Warning; then no event on it says more.
		if e := waitEvent(t, prober, c.Name, ipamv1.ReasonAddressNotFound); e.Type != corev1.EventTypeWarning || e.Note != said(c) {
			t.Errorf("event on %s: %s %q, want a Warning saying %q", c.Name, e.Type, e.Note, said(c))
		}
	}
	settled(t)
	for _, c := range []*ipamv1.IPAddressClaim{grab, guess} {
		for _, e := range eventsFor(t, prober, c.Name, "") {
			if strings.Contains(e.Note, class) || strings.Contains(e.Note, owner) || e.Reason != ipamv1.ReasonAddressNotFound {
				t.Errorf("event %s on %s says more than a missing address: %q", e.Reason, c.Name, e.Note)
			}
		}
	}
	if a := getAddress(t, taken.Name); a.Spec.ClaimRef == nil || a.Spec.ClaimRef.Namespace != owner {
		t.Fatalf("the address moved: %+v", a.Spec.ClaimRef)
	}
}

// labelledNamespace creates a namespace with labels.
func labelledNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-", Labels: labels}}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// reportAsDriver writes a class's status as its driver would: Accepted, and what it reports.
func reportAsDriver(t *testing.T, class string, report func(*ipamv1.IPAddressClassStatus)) {
	t.Helper()
	var c ipamv1.IPAddressClass
	if err := admin.Get(context.Background(), client.ObjectKey{Name: class}, &c); err != nil {
		t.Fatal(err)
	}
	orig := c.DeepCopy()
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionAccepted, Status: metav1.ConditionTrue,
		Reason: "Accepted", Message: "the test plays the driver", ObservedGeneration: c.Generation})
	report(&c.Status)
	if err := admin.Status().Patch(context.Background(), &c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// waitRefused waits until a claim says reason, then checks that it holds nothing and asks no
// driver, and that a Warning says the same as the condition.
func waitRefused(t *testing.T, ns, name, reason string, must ...string) {
	t.Helper()
	c := &ipamv1.IPAddressClaim{}
	eventually(t, fmt.Sprintf("claim %s/%s to report %s", ns, name, reason), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
			return false, err
		}
		if len(c.Status.Addresses) > 0 {
			t.Fatalf("claim %s/%s took %+v (phase %s), want it refused with %s", ns, name, c.Status.Addresses, c.Status.Phase, reason)
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
		return cond != nil && cond.Reason == reason && cond.ObservedGeneration == c.Generation, nil
	})
	msg := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound).Message
	for _, s := range must {
		if !strings.Contains(msg, s) {
			t.Errorf("claim %s/%s: %q does not say %q", ns, name, msg, s)
		}
	}
	if e := waitEvent(t, ns, name, reason); e.Type != corev1.EventTypeWarning || e.Note != msg {
		t.Errorf("claim %s/%s: event %s %q, want a Warning saying %q", ns, name, e.Type, e.Note, msg)
	}
	settled(t)
	c = getClaim(t, ns, name)
	if c.Status.Phase != ipamv1.ClaimPending || len(c.Status.Addresses) > 0 || c.Annotations[ipamv1.AnnotationProvisioner] != "" {
		t.Errorf("claim %s/%s is refused yet holds %+v or asks %q", ns, name, c.Status.Addresses, c.Annotations[ipamv1.AnnotationProvisioner])
	}
	var addrs ipamv1.IPAddressList
	if err := admin.List(context.Background(), &addrs); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs.Items {
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == ns && ref.Name == name {
			t.Errorf("claim %s/%s is refused yet address %s is bound to it", ns, name, a.Name)
		}
	}
}

// A class chooses the namespaces that may claim from it: by its own namespaceSelector, and by
// what its driver reports its backend serves (status.servedNamespaces). A claim of another
// namespace takes nothing, not an Available address, not a driver's; it says why, and binds
// once its namespace is let in (here: labelled).
func TestClassServesOnlyTheNamespacesItAdmits(t *testing.T) {
	allowed := labelledNamespace(t, map[string]string{"tenancy.example.com/plan": "gold"})
	other := labelledNamespace(t, nil)

	// By the class's selector; the test driver provisions.
	newClass(t, "gold-only", driverName, func(c *ipamv1.IPAddressClass) {
		c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tenancy.example.com/plan": "gold"}}
	})
	newClaim(t, allowed, "in", "gold-only", ipamv1.IPv4)
	waitClaimPhase(t, allowed, "in", ipamv1.ClaimBound)
	newClaim(t, other, "out", "gold-only", ipamv1.IPv4)
	waitRefused(t, other, "out", ipamv1.ReasonNamespaceNotAllowed, "gold-only", other, "namespaceSelector")

	// By the driver's report: the class's backend serves one namespace by name (no running
	// driver: the addresses are an admin's, Available).
	newClass(t, "pool-scoped", noDriver)
	reportAsDriver(t, "pool-scoped", func(s *ipamv1.IPAddressClassStatus) {
		s.ServedNamespaces = &ipamv1.NamespaceSet{Names: []string{allowed}}
	})
	free := newAddress(t, "203.0.113.211", "pool-scoped", nil)
	waitAddressPhase(t, free.Name, ipamv1.AddressAvailable)
	newClaim(t, other, "drain", "pool-scoped", ipamv1.IPv4)
	waitRefused(t, other, "drain", ipamv1.ReasonNamespaceNotAllowed, "pool-scoped", other)
	// Naming the Available address of a class the namespace may not use reads as a missing one.
	newClaim(t, other, "named", "", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = free.Name })
	if c := waitClaimReason(t, other, "named", ipamv1.ReasonAddressNotFound); c.Status.ClassName != "" {
		t.Errorf("the claim's status names the class: %q", c.Status.ClassName)
	}
	if a := getAddress(t, free.Name); a.Spec.ClaimRef != nil {
		t.Fatalf("a refused namespace took the address: %+v", a.Spec.ClaimRef)
	}
	newClaim(t, allowed, "mine", "pool-scoped", ipamv1.IPv4)
	if c := waitClaimPhase(t, allowed, "mine", ipamv1.ClaimBound); c.Status.Addresses[0].Name != free.Name {
		t.Fatalf("bound %+v, want %s", c.Status.Addresses, free.Name)
	}

	// The admin lets the other namespace in: its waiting claim of the selector's class binds.
	var ns corev1.Namespace
	if err := admin.Get(context.Background(), client.ObjectKey{Name: other}, &ns); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels = map[string]string{"tenancy.example.com/plan": "gold"}
	if err := admin.Patch(context.Background(), &ns, patch); err != nil {
		t.Fatal(err)
	}
	waitClaimPhase(t, other, "out", ipamv1.ClaimBound)
}

// A class serves the families its driver reports (status.families). A claim of a family it does
// not serve gets nothing, its other family included, and says why; one of a family it serves
// binds.
func TestClaimOfAFamilyTheClassDoesNotServeGetsNothing(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "v4-only", noDriver)
	reportAsDriver(t, "v4-only", func(s *ipamv1.IPAddressClassStatus) { s.Families = []ipamv1.IPFamily{ipamv1.IPv4} })
	v4 := newAddress(t, "203.0.113.212", "v4-only", nil)
	v6 := newAddress(t, "2001:db8:7::1", "v4-only", nil)
	waitAddressPhase(t, v4.Name, ipamv1.AddressAvailable)
	waitAddressPhase(t, v6.Name, ipamv1.AddressAvailable)

	newClaim(t, ns, "dual", "v4-only", ipamv1.Dual)
	newClaim(t, ns, "six", "v4-only", ipamv1.IPv6)
	waitRefused(t, ns, "dual", ipamv1.ReasonFamilyNotServed, "v4-only", "IPv6")
	waitRefused(t, ns, "six", ipamv1.ReasonFamilyNotServed, "v4-only", "IPv6")
	for _, a := range []*ipamv1.IPAddress{v4, v6} {
		if got := getAddress(t, a.Name); got.Spec.ClaimRef != nil {
			t.Errorf("address %s was bound to %+v for a family the class does not serve", a.Name, got.Spec.ClaimRef)
		}
	}
	newClaim(t, ns, "four", "v4-only", ipamv1.IPv4)
	if c := waitClaimPhase(t, ns, "four", ipamv1.ClaimBound); c.Status.Addresses[0].Name != v4.Name {
		t.Fatalf("bound %+v, want %s", c.Status.Addresses, v4.Name)
	}
}

// The class the repository ships as the example (and the sandbox's default class) limits what
// one namespace holds: a tenant that keeps creating claims of the default class gets the limit's
// worth of addresses and no more, instead of the whole shared pool. (The class is applied as
// written, but served by the test driver: the limit is the core's, whatever the driver.)
func TestTheExampleClassLimitsWhatOneTenantHolds(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "class-public.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var class ipamv1.IPAddressClass
	if err := yaml.UnmarshalStrict(raw, &class); err != nil {
		t.Fatal(err)
	}
	limit := class.Spec.MaxAddressesPerNamespace
	if limit == nil {
		t.Fatalf("examples/class-public.yaml sets no maxAddressesPerNamespace: one tenant may take the whole pool")
	}
	class.Name = "example-public"
	class.Spec.Provisioner = driverName
	delete(class.Annotations, ipamv1.AnnotationDefaultClass) // not this suite's default class
	create(t, &class)
	ns := newNamespace(t)
	over := int(*limit) + 2
	for i := range over {
		newClaim(t, ns, fmt.Sprintf("grab-%d", i), class.Name, ipamv1.IPv4)
	}
	bound := 0
	for i := range over {
		if c := waitSettled(t, ns, fmt.Sprintf("grab-%d", i), ipamv1.ReasonAddressLimitReached); c.Status.Phase == ipamv1.ClaimBound {
			bound++
		}
	}
	if h := held(t, ns, class.Name); bound != int(*limit) || len(h) != int(*limit) {
		t.Fatalf("a namespace holds %d addresses (%d claims Bound) of the example class, want its limit %d", len(h), bound, *limit)
	}
}

// The core caches a claim without the finalizers of others (a stand-in marks that there are
// some): adding its own and removing it on deletion must keep them all the same.
func TestOthersFinalizersSurviveTheReducedCache(t *testing.T) {
	ns := newNamespace(t)
	others := []string{"example.com/backup", "example.com/audit"}
	newClaim(t, ns, "kept", "finalizers-none", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Finalizers = slices.Clone(others) })
	eventually(t, "the core's finalizer beside the others", func() (bool, error) {
		c := getClaim(t, ns, "kept")
		return slices.Equal(c.Finalizers, append(slices.Clone(others), ipamv1.FinalizerClaim)), nil
	})
	c := getClaim(t, ns, "kept")
	del(t, c)
	eventually(t, "the core's finalizer gone, the others kept", func() (bool, error) {
		c := getClaim(t, ns, "kept")
		return slices.Equal(c.Finalizers, others), nil
	})
	c = getClaim(t, ns, "kept")
	c.Finalizers = nil
	if err := admin.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// Auto-claim makes no claim from a class for a namespace the class does not serve: not from the
// auto-claim class (the Service keeps MetalLB's ordinary address, as with no auto-claim class at
// all), and not from a class the Service names (which says why, once, on the Service). A namespace
// the class serves gets its claim as before.
func TestAutoClaimKeepsToTheNamespacesTheClassServes(t *testing.T) {
	gold := labelledNamespace(t, map[string]string{"tier": "gold"})
	plain := labelledNamespace(t, nil)
	served := labelledNamespace(t, nil)
	selectGold := func(c *ipamv1.IPAddressClass) {
		c.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	}
	auto := newClass(t, "ac-gold", noDriver, selectGold, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	named := newClass(t, "named-only", noDriver)
	t.Cleanup(func() { del(t, auto); del(t, named) })
	// The driver of named-only reports that its pool serves one namespace only.
	reportAsDriver(t, named.Name, func(st *ipamv1.IPAddressClassStatus) {
		st.ServedNamespaces = &ipamv1.NamespaceSet{Names: []string{served}}
	})
	eventually(t, "the auto-claim class to be stamped", func() (bool, error) {
		var c ipamv1.IPAddressClass
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(auto), &c); err != nil {
			return false, err
		}
		_, ok := autoClaimEnabledAt(&c)
		return ok, nil
	})
	for _, s := range []*corev1.Service{
		lbService(gold, "web", nil), lbService(plain, "web", nil),
		lbService(plain, "named", map[string]string{ipamv1.AnnotationServiceClass: named.Name}),
		lbService(served, "named", map[string]string{ipamv1.AnnotationServiceClass: named.Name}),
	} {
		create(t, s)
		t.Cleanup(func() { del(t, s) })
	}
	for _, want := range []struct{ ns, name, class string }{{gold, "web", auto.Name}, {served, "named", named.Name}} {
		eventually(t, "the claim of "+want.ns+"/"+want.name, func() (bool, error) {
			var c ipamv1.IPAddressClaim
			err := admin.Get(context.Background(), client.ObjectKey{Namespace: want.ns, Name: want.name}, &c)
			return err == nil && c.Spec.ClassName == want.class, client.IgnoreNotFound(err)
		})
	}
	e := waitEvent(t, plain, "named", ipamv1.ReasonNamespaceNotAllowed)
	if e.Type != corev1.EventTypeWarning || e.Regarding.Kind != "Service" || !strings.Contains(e.Note, named.Name) {
		t.Errorf("event %s on a %s: %q, want a Warning on the Service naming the class", e.Type, e.Regarding.Kind, e.Note)
	}
	settled(t)
	var claims ipamv1.IPAddressClaimList
	if err := admin.List(context.Background(), &claims, client.InNamespace(plain)); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 0 {
		t.Fatalf("claims made in a namespace no class serves: %d", len(claims.Items))
	}
	if n := timesSaidFor(t, plain, "named", ipamv1.ReasonNamespaceNotAllowed); n != 1 {
		t.Errorf("NamespaceNotAllowed said %d times, want once", n)
	}
	if evs := eventsFor(t, plain, "web", ""); len(evs) != 0 {
		t.Errorf("the Service the auto-claim class does not serve got events: %+v", evs)
	}
}
