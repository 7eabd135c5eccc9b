package driver

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Each test here reproduces a defect of issue 10 (or 16) on a real apiserver; each failed on the
// driver before its rebuild.

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// attachedService creates a tenant Service naming the claim and waits until it serves ip.
func attachedService(t *testing.T, ns, name, claim, ip string) *corev1.Service {
	t.Helper()
	s := tenantService(ns, name, map[string]string{ipamv1.AnnotationServiceClaim: claim})
	if err := admin.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, name, ip)
	eventually(t, "the address to be attached to "+name, func() (bool, error) {
		a := getAddress(t, ipamv1.AddressName(netip.MustParseAddr(ip)))
		return a.Status.AttachedTo != nil && a.Status.AttachedTo.Name == name, nil
	})
	return s
}

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
	orphan := plan.HoldService(testDriverNS, name, netip.MustParseAddr("203.0.113.250"), "nowhere")
	if err := admin.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the orphaned hold to be deleted", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(orphan), &corev1.Service{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}

// Defect 3: one placeholder per claim family, however the cache lags: many claims provisioned
// at once through a MetalLB stand-in create exactly one placeholder each.
func TestOnePlaceholderPerClaimFamily(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const n = 40
	newPoolClass(t, "dup", "198.18.0.0/24")
	startFakeMetalLB(t, "dup", netip.MustParsePrefix("198.18.0.0/24"))
	ns := newNamespace(t, "dup")

	w, err := kubeWatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	created := map[string]int{} // claim uid -> provisioning placeholders created
	placeholders := 0           // every placeholder created in the driver's namespace, any role
	unmarked := 0               // placeholders created without the driver mark the core filters on
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok || ev.Type != watch.Added || s.Annotations[metallb.AnnotationAddressPool] != "dup" {
				continue
			}
			mu.Lock()
			placeholders++
			if s.Labels[ipamv1.LabelDriverService] != plan.Provisioner {
				unmarked++
			}
			if s.Labels[plan.LabelRole] == plan.RoleProvisioning {
				created[s.Labels[plan.LabelClaimUID]]++
			}
			mu.Unlock()
		}
	}()
	defer w.Stop()

	// What the driver still writes for the class or an earlier test (the class's Accepted
	// event) is not this test's to count.
	quiet(t, time.Second)
	// The driver's cache of Services lags its own creates and relabels (the informer of the
	// placeholders behind that of the claims): a pass that decides from the cache alone makes a
	// second placeholder (TEST_NO_EXPECTATIONS=1 shows it).
	withWatchLagOn(t, "services", 30*time.Millisecond)
	// The core's part: it writes each new address's phase as soon as it sees it, while the
	// driver writes the address's Held condition (the race behind the benchmark's 409s).
	stopCore := playCorePhases(t, "dup")
	defer stopCore()
	before, missesBefore := writesSnapshot(), addressMissesWithPrefix("ip-198-18-0-")
	serviceReconcilesBefore := reconcilesOf(t, "metallb-iad-service")
	var claims []*ipamv1.IPAddressClaim
	for i := range n {
		c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i),
			Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
			Spec: ipamv1.IPAddressClaimSpec{ClassName: "dup", Family: ipamv1.IPv4}}
		if err := admin.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		c.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "dup"}
		if err := admin.Status().Update(ctx, c); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	// 40 claims take about 9 s alone; under make test's parallel packages over 20 s.
	eventuallyWithin(t, time.Minute, "an address for every claim", func() (bool, error) {
		var addrs ipamv1.IPAddressList
		if err := admin.List(ctx, &addrs); err != nil {
			return false, err
		}
		got := 0
		for _, a := range addrs.Items {
			if a.Spec.ClassName == "dup" {
				got++
			}
		}
		return got == n, nil
	})
	// The claims stay Pending (no core here): whatever more the driver would do, it has done
	// once it has handled every Service event so far.
	settled(t, ns)
	total, refused := writesSince(t, "provisioning", before)
	t.Logf("driver writes per provisioned address: %.2f", float64(total)/n)
	// Placeholder create, address create, pin+relabel, the address's Held status: 4.
	if float64(total)/n > 4 {
		t.Errorf("the driver made %.2f writes per provisioned address, want at most 4", float64(total)/n)
	}
	// A refused write (a 409 on a stale object, a 404 on a deleted one) is a write decided on a
	// view that did not include the driver's own writes.
	if len(refused) > 0 {
		t.Errorf("the apiserver refused driver writes: %v", refused)
	}
	// Nor does it ask the apiserver for the address of an IP MetalLB just served before creating
	// it (the create is the lock on the IP): at 10,000 claims that was a read answered 404 for
	// every claim.
	if misses := addressMissesWithPrefix("ip-198-18-0-") - missesBefore; misses > 0 {
		t.Errorf("the driver read %d IPAddresses that did not exist while provisioning %d claims, want none", misses, n)
	}
	mu.Lock()
	defer mu.Unlock()
	extra := 0
	for _, c := range claims {
		if created[string(c.UID)] != 1 {
			extra += created[string(c.UID)] - 1
		}
	}
	if placeholders != n {
		t.Errorf("%d claims caused %d placeholder Services (provisioning and hold), want exactly %d", n, placeholders, n)
	}
	// The Service controller attaches tenant Services: the placeholders' events (create,
	// MetalLB's status, the pin, its echo) are none of its business, and each used to cost it a
	// pass (about 4 per claim).
	if got := reconcilesOf(t, "metallb-iad-service") - serviceReconcilesBefore; got >= n {
		t.Errorf("the Service controller reconciled %d times while %d claims were provisioned (no tenant Service): it reconciles placeholders", got, n)
	}
	// The core caches no Service with the mark (one per reserved address here).
	if unmarked != 0 {
		t.Errorf("%d placeholders were created without the label %s", unmarked, ipamv1.LabelDriverService)
	}
	if extra != 0 {
		t.Fatalf("%d claims caused %d provisioning placeholders (%d more than needed): %v", n, n+extra, extra, created)
	}
	var addrs ipamv1.IPAddressList
	if err := admin.List(ctx, &addrs); err != nil {
		t.Fatal(err)
	}
	perClaim := map[string]int{}
	for _, a := range addrs.Items {
		if a.Spec.ClassName == "dup" {
			perClaim[a.Spec.ClaimRef.Name]++
		}
	}
	for c, k := range perClaim {
		if k != 1 {
			t.Fatalf("claim %s got %d addresses", c, k)
		}
	}
}

// A placeholder this driver has just made the hold of a new address is still a provisioning
// placeholder in a cache that lags the driver's own relabel. A claim pass that runs then (the
// new address woke it) saw a placeholder the claim no longer needed and deleted it: the hold of
// a reserved IP, which MetalLB then gave the next placeholder (the churn seen under load).
func TestAPlaceholderJustMadeAHoldIsNotDeletedFromAStaleCache(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := fakeMetalLBClass(t, "stalehold", "198.51.100.32/28")
	// The Services' watch lags well behind the addresses': every claim pass the new address
	// wakes reads the placeholder as it was before the relabel.
	w, err := kubeWatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var deleted atomic.Int32 // placeholders of the class deleted, whatever their role
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Deleted && s.Annotations[metallb.AnnotationAddressPool] == "stalehold" {
				deleted.Add(1)
			}
		}
	}()
	quiet(t, time.Second) // the class's own writes are not this test's to count
	withWatchLagOn(t, "services", 1500*time.Millisecond)
	before := writesSnapshot()
	const n = 3
	for i := range n {
		c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i),
			Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
			Spec: ipamv1.IPAddressClaimSpec{ClassName: "stalehold", Family: ipamv1.IPv4}}
		if err := admin.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// Touch the claims while the Services lag (the core's stamp, a tenant's label): passes that
	// read the new placeholder from the apiserver, not the cache, and settle it.
	for i := range 15 {
		for j := range n {
			c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", j)}}
			patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"touch":"%d"}}}`, i)))
			if err := admin.Patch(ctx, c, patch); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	holds := func() (map[string]string, error) {
		var addrs ipamv1.IPAddressList
		if err := admin.List(ctx, &addrs); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, a := range addrs.Items {
			if a.Spec.ClassName == "stalehold" {
				out[a.Name] = ""
			}
		}
		var svcs corev1.ServiceList
		if err := admin.List(ctx, &svcs, client.InNamespace(testDriverNS), client.MatchingLabels{plan.LabelRole: plan.RoleHold}); err != nil {
			return nil, err
		}
		for _, s := range svcs.Items {
			if _, ok := out[s.Labels[plan.LabelAddress]]; ok && s.DeletionTimestamp == nil {
				out[s.Labels[plan.LabelAddress]] = s.Name
			}
		}
		return out, nil
	}
	eventuallyWithin(t, 30*time.Second, "an address for every claim", func() (bool, error) {
		h, err := holds()
		return len(h) == n, err
	})
	first, err := holds()
	if err != nil {
		t.Fatal(err)
	}
	// Once the driver has handled every Service event (the lagged ones included), every address
	// still has the hold it was settled with.
	settled(t, ns)
	now, err := holds()
	if err != nil {
		t.Fatal(err)
	}
	for a, h := range now {
		if h == "" || (first[a] != "" && first[a] != h) {
			t.Errorf("address %s: hold %q at first, %q once the driver settled", a, first[a], h)
		}
	}
	total, refused := writesSince(t, "stalehold", before)
	if d := deleted.Load(); d > 0 {
		t.Errorf("%d of the class's placeholders were deleted; none needed to be", d)
	}
	if float64(total)/n > 4 || len(refused) > 0 {
		t.Errorf("%.2f driver writes per address (want at most 4), refused: %v", float64(total)/n, refused)
	}
}

// The settle of a served placeholder is two writes: the address, then the patch that makes the
// placeholder its hold. When that patch fails, the next pass must make the hold: it used to take
// the failed patch for done (the hold expected until a minute had passed), leaving the reserved
// IP held by a provisioning placeholder that any pass could delete.
func TestAFailedRelabelIsMadeAgainAtOnce(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := fakeMetalLBClass(t, "relabelfail", "203.0.113.56/29")
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "relabelfail", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	f := func(req *http.Request) bool {
		// The first patch of the claim's placeholder (the settle's relabel).
		if req.Method != http.MethodPatch || !strings.Contains(req.URL.Path, "/services/"+plan.ProvisioningName(string(c.UID), ipamv1.IPv4, 0)) {
			return false
		}
		return failed.CompareAndSwap(0, 1)
	}
	failWrite.Store(&f)
	t.Cleanup(func() { failWrite.Store(nil) })
	eventuallyWithin(t, 15*time.Second, "the claim's address held by its placeholder", func() (bool, error) {
		var addrs ipamv1.IPAddressList
		if err := admin.List(ctx, &addrs); err != nil {
			return false, err
		}
		for _, a := range addrs.Items {
			if a.Spec.ClassName != "relabelfail" {
				continue
			}
			var svcs corev1.ServiceList
			if err := admin.List(ctx, &svcs, client.InNamespace(testDriverNS), client.MatchingLabels{plan.LabelRole: plan.RoleHold, plan.LabelAddress: a.Name}); err != nil {
				return false, err
			}
			// The placeholder MetalLB served: the IP was never let go.
			return len(svcs.Items) == 1 && svcs.Items[0].Name == plan.ProvisioningName(string(c.UID), ipamv1.IPv4, 0), nil
		}
		return false, nil
	})
	if failed.Load() != 1 {
		t.Fatal("the relabel never failed: the test proves nothing")
	}
}

// A detach is several writes to the tenant Service (the unpin, the status clear, the end of the
// releasing record). The Service's events of those writes reach a lagging cache one by one, and
// a pass that decided from such a copy unpinned again: a refused status clear (409) and a second
// Detach event. A pass decides from the Service as this driver last wrote it.
func TestADetachIsMadeOnceWhenTheCacheLagsTheDriversOwnWrites(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := fakeMetalLBClass(t, "detachonce", "203.0.113.48/29")
	const ip = "203.0.113.49"
	_, a := boundClaimWithAddress(t, ns, "a", "detachonce", ip)
	waitHeldByPlaceholder(t, a.Name, ip)
	svc := attachedService(t, ns, "web", "a", ip)
	quiet(t, time.Second)
	withWatchLagOn(t, "services", 700*time.Millisecond)
	before := writesSnapshot()
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	delete(s.Annotations, ipamv1.AnnotationServiceClaim)
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	waitHeldByPlaceholder(t, a.Name, ip)
	// Every event of the detach's writes reaches the cache (the lag included), and its pass runs.
	settled(t, ns)
	_, refused := writesSince(t, "detach", before)
	if len(refused) > 0 {
		t.Errorf("the apiserver refused driver writes: %v", refused)
	}
	if n := seriesCount(driverEvents(t, ns, string(s.UID), plan.ReasonDetached)); n != 1 {
		t.Errorf("%d Detach events on the Service, want 1", n)
	}
}

// Defects 4 and 5: re-linking a Service from claim A to claim B ends with B's address on the
// Service and A's held again, with no Conflict and no driver Warning on the way; detaching leaves
// no false Conflict either.
func TestRelinkAndDetachWithoutConflict(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "relink", "203.0.113.32/28")
	// MetalLB moves a Service to its new pin only after a while, as the real one does under load.
	startSlowFakeMetalLB(t, "relink", netip.MustParsePrefix("203.0.113.32/28"), 700*time.Millisecond)
	ns := newNamespace(t, "relink")
	const ipA, ipB = "203.0.113.33", "203.0.113.34"
	_, a := boundClaimWithAddress(t, ns, "a", "relink", ipA)
	_, b := boundClaimWithAddress(t, ns, "b", "relink", ipB)
	waitHeldByPlaceholder(t, a.Name, ipA)
	waitHeldByPlaceholder(t, b.Name, ipB)
	svc := attachedService(t, ns, "web", "a", ipA)

	noConflict := func() (bool, error) {
		for _, n := range []string{a.Name, b.Name} {
			c, err := addressCondition(n, ipamv1.ConditionConflict)
			if err != nil || (c != nil && c.Status == metav1.ConditionTrue) {
				return false, fmt.Errorf("%s: Conflict %+v (%v)", n, c, err)
			}
		}
		return true, nil
	}
	// From here the driver's cache of Services lags its own writes and the addresses' (the
	// skew of two informers on a loaded apiserver): decisions must rest on a view that
	// includes them.
	withWatchLagOn(t, "services", 150*time.Millisecond)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	s.Annotations[ipamv1.AnnotationServiceClaim] = "b"
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "no Conflict during the re-link", noConflict)
	waitServiceIngress(t, ns, "web", ipB)
	waitHeldByPlaceholder(t, a.Name, ipA)
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[metallb.AnnotationLoadBalancerIPs] != ipB || getAddress(t, b.Name).Status.AttachedTo == nil {
		t.Fatalf("not attached to B: %v / %+v", s.Annotations, getAddress(t, b.Name).Status.AttachedTo)
	}
	for _, e := range driverEvents(t, ns, string(s.UID), "") {
		if e.Type == corev1.EventTypeWarning {
			t.Fatalf("a driver Warning during the re-link: %s %s", e.Reason, e.Note)
		}
	}

	// Detach: the Service lets go of B; B is held again, never in Conflict.
	delete(s.Annotations, ipamv1.AnnotationServiceClaim)
	if err := admin.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "no Conflict after the detach", noConflict)
	waitHeldByPlaceholder(t, b.Name, ipB)
	for _, e := range driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict) {
		t.Fatalf("a false conflict was reported on the detached Service: %s", e.Note)
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

// Defect 8: an attached Service keeps its pin while its claim is Lost.
func TestLostClaimKeepsItsService(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "keep", "203.0.113.80/28")
	startFakeMetalLB(t, "keep", netip.MustParsePrefix("203.0.113.80/28"))
	ns := newNamespace(t, "keep")
	const ip = "203.0.113.81"
	claim, addr := boundClaimWithAddress(t, ns, "c", "keep", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	svc := attachedService(t, ns, "web", "c", ip)
	claim.Status.Phase = ipamv1.ClaimLost
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "the Service to keep its pin while the claim is Lost", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		a := getAddress(t, addr.Name)
		return s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip && a.Status.AttachedTo != nil, nil
	})
}

// Defect 11: a re-created Service of the same name takes the claim over without a ClaimInUse
// warning.
func TestRecreatedServiceTakesOver(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "again", "203.0.113.96/28")
	startFakeMetalLB(t, "again", netip.MustParsePrefix("203.0.113.96/28"))
	ns := newNamespace(t, "again")
	const ip = "203.0.113.97"
	_, addr := boundClaimWithAddress(t, ns, "c", "again", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	old := attachedService(t, ns, "web", "c", ip)
	if err := admin.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	fresh := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	eventually(t, "the new Service to be created", func() (bool, error) { return admin.Create(ctx, fresh) == nil, nil })
	waitServiceIngress(t, ns, "web", ip)
	eventually(t, "the address attached to the new Service", func() (bool, error) {
		at := getAddress(t, addr.Name).Status.AttachedTo
		return at != nil && at.UID == fresh.UID, nil
	})
	if evs := driverEvents(t, ns, string(fresh.UID), plan.ReasonClaimInUse); len(evs) > 0 {
		t.Fatalf("a spurious ClaimInUse on the re-created Service: %s", evs[0].Note)
	}
}

// Defect 11 (warnOnce) and issue 16: every new wrongful holder is announced, an external IP is a
// Conflict too, and the Conflict clears when they let go.
func TestConflictsAnnouncedAndCleared(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "clash", "203.0.113.112/28")
	startFakeMetalLB(t, "clash", netip.MustParsePrefix("203.0.113.112/28"))
	ns := newNamespace(t, "clash")
	const ip = "203.0.113.113"
	_, addr := boundClaimWithAddress(t, ns, "c", "clash", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	conflict := func(want ...string) func() (bool, error) {
		return func() (bool, error) {
			c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
			if len(want) == 0 {
				return c == nil || c.Status == metav1.ConditionFalse, err
			}
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, err
			}
			for _, w := range want {
				if !strings.Contains(c.Message, w) {
					return false, err
				}
			}
			return true, err
		}
	}
	// An admin Service that lists the reserved IP in spec.externalIPs.
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec: corev1.ServiceSpec{ExternalIPs: []string{ip}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := admin.Create(ctx, ext); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Conflict naming the external-IP Service", conflict(ns+"/ext"))
	// A second wrongful Service (its status written as MetalLB would for a shared IP).
	// An admin's pin of the reserved IP: a Service that requests it (one that requests
	// nothing is cleared instead, TestStaleIngressOfAServiceThatRequestsNothingIsCleared).
	thief := tenantService(ns, "thief", map[string]string{metallb.AnnotationLoadBalancerIPs: ip})
	if err := admin.Create(ctx, thief); err != nil {
		t.Fatal(err)
	}
	thief.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if err := admin.Status().Update(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Conflict naming both", conflict(ns+"/ext", ns+"/thief"))
	eventually(t, "a Conflict warning naming the second Service", func() (bool, error) {
		for _, e := range driverEvents(t, "default", string(addr.UID), ipamv1.ConditionConflict) {
			if strings.Contains(e.Note, ns+"/thief") {
				return true, nil
			}
		}
		return false, nil
	})
	for _, s := range []*corev1.Service{ext, thief} {
		if len(driverEvents(t, ns, string(s.UID), plan.ReasonServiceConflict)) == 0 {
			t.Fatalf("no warning on %s", s.Name)
		}
	}
	ext.Spec.ExternalIPs = nil
	if err := admin.Update(ctx, ext); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Conflict to clear", conflict())
	if !meta.IsStatusConditionTrue(getAddress(t, addr.Name).Status.Conditions, ipamv1.ConditionHeld) {
		t.Fatal("not held after the conflict cleared")
	}
}

// A claim pass decides from its cache alone that the IP MetalLB just served has no IPAddress,
// and its create is the lock on the IP. When the cache has not shown an address that exists (an
// admin's, made a moment before), the create is refused once; the next pass asks the apiserver
// instead of the lagging cache, and the placeholder becomes that address's hold, not a create
// refused again on every retry.
func TestAnAddressMissingFromTheCacheIsReadAfterItsCreateIsRefused(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const ip = "198.18.9.0"
	newPoolClass(t, "lagged", ip+"/32")
	ns := newNamespace(t, "lagged")
	// The driver's cache of IPAddresses lags well behind: the admin's address is not in it when
	// MetalLB serves the claim's placeholder.
	withWatchLagOn(t, "ipaddresses", 8*time.Second)
	before := writesSnapshot()
	addr := availableAddress(t, ip, "lagged")
	startFakeMetalLB(t, "lagged", netip.MustParsePrefix(ip+"/32"))
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "lagged", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the served placeholder to become the admin's address's hold", func() (bool, error) {
		var list corev1.ServiceList
		if err := admin.List(ctx, &list, client.InNamespace(testDriverNS), client.MatchingLabels{plan.LabelRole: plan.RoleHold, plan.LabelAddress: addr.Name}); err != nil {
			return false, err
		}
		return len(list.Items) == 1, nil
	})
	_, refused := writesSince(t, "lagged", before)
	switch n := refused["409 POST ipaddresses"]; {
	case n == 0:
		t.Errorf("the create of %s was never refused: the cache showed the address before the hold was made, the test proves nothing", addr.Name)
	case n > 1:
		t.Errorf("the create of %s was refused %d times: a pass after the first refusal still decided from the lagging cache", addr.Name, n)
	}
	var a ipamv1.IPAddress
	if err := admin.Get(ctx, client.ObjectKey{Name: addr.Name}, &a); err != nil {
		t.Fatal(err)
	}
	if a.Spec.ClaimRef != nil {
		t.Errorf("the admin's Available address was bound by the driver: %+v", a.Spec.ClaimRef)
	}
}

// A served placeholder the claim does not keep (made for another pool, a duplicate) is retired
// or handed over on what the pass finds, so its IP's address is confirmed with the apiserver when
// the cache does not show it: here an admin's address, hidden by a lagging cache, gets the
// placeholder as its hold instead of the placeholder being deleted and the IP going back to the
// pool.
func TestAnUnkeptPlaceholderOfAnAddressMissingFromTheCacheBecomesItsHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const ip = "198.18.9.17"
	newPoolClass(t, "keeps-a", "198.18.9.16/32")
	newPoolClass(t, "keeps-b", ip+"/32")
	ns := newNamespace(t, "keeps")
	withWatchLagOn(t, "ipaddresses", 8*time.Second)
	addr := availableAddress(t, ip, "keeps-b")
	// MetalLB serves a Service of the other pool in the driver's namespace...
	startFakeMetalLB(t, "keeps-b", netip.MustParsePrefix(ip+"/32"))
	stray := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testDriverNS, Name: "stray-keeps",
		Annotations: map[string]string{metallb.AnnotationAddressPool: "keeps-b"}}, Spec: plan.PlaceholderSpec(ipamv1.IPv4)}
	if err := admin.Create(ctx, stray); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, testDriverNS, stray.Name, ip)
	// ... that then becomes a placeholder of a claim of the first class, asking the other pool
	// (made for the claim before its class changed): served, and not kept.
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "keeps-a", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(stray), stray); err != nil {
		t.Fatal(err)
	}
	as := plan.ProvisioningService(testDriverNS, stray.Name, c, ipamv1.IPv4, "keeps-b")
	patch := client.MergeFrom(stray.DeepCopy())
	stray.Labels, stray.Annotations = as.Labels, as.Annotations
	if err := admin.Patch(ctx, stray, patch); err != nil {
		t.Fatal(err)
	}
	// Well within the cache's lag: the claim pass that sees the stray decides before the cache
	// shows the address.
	eventuallyWithin(t, 6*time.Second, "the stray placeholder to become the hidden address's hold", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: stray.Name}, &s); err != nil {
			return false, err // deleted: the IP went back to the pool
		}
		return s.Labels[plan.LabelRole] == plan.RoleHold && s.Labels[plan.LabelAddress] == addr.Name, nil
	})
}

// availableAddress is an admin's IPAddress of the class, bound to no claim.
func availableAddress(t *testing.T, ip, class string) *ipamv1.IPAddress {
	t.Helper()
	a := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
		Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: class}}
	if err := admin.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return a
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
