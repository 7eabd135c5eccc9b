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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Decisions on a view that includes the driver's own writes
// (docs/design.md#a-view-that-includes-your-own-writes): with the driver's cache lagging behind
// the apiserver, nothing is created twice, deleted wrongly or written on a stale copy.

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
	settled(t, ns)
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
	settled(t, ns) // the class's own writes are not this test's to count
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
		// Paced over the lag (not a wait for the driver): the touches come while it lasts.
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
	settled(t, ns)
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
	as := plan.ProvisioningService(testDriverNS, stray.Name, c, ipamv1.IPv4, "keeps-b", "")
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

// Finding 3: the unpin's ingress-clearing status patch is made against the Service as it was
// read: an ingress MetalLB wrote since (here a new IP) is never cleared blindly.
func TestUnpinDoesNotClearAnIngressWrittenSince(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, "unpinlock")
	const old, fresh = "198.51.100.193", "198.51.100.194"
	svc := tenantService(ns, "web", nil)
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	setIngress := func(ip string) *corev1.Service {
		t.Helper()
		var s corev1.Service
		eventually(t, "the Service's status to be written", func() (bool, error) {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
				return false, err
			}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			return admin.Status().Update(ctx, &s) == nil, nil
		})
		return &s
	}
	// The driver's view: the Service it unpinned a moment ago, still showing the old IP and its
	// record of releasing it.
	stale := setIngress(old).DeepCopy()
	stale.Annotations = map[string]string{plan.AnnotationReleasing: old}
	// MetalLB assigns a new IP meanwhile.
	setIngress(fresh)
	err := testDriver.unpin(ctx, stale, false)
	t.Logf("unpin on the stale view: %v", err)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if got := ingress(&s); len(got) != 1 || got[0] != fresh {
		t.Fatalf("the unpin cleared an ingress MetalLB wrote after the driver's read: %v", got)
	}
}

// Attaching a Service that cannot share its IP with the hold while the driver's cache of addresses
// lags its Services (the address's pass sees the hold deleted before it sees AttachedTo): no hold
// is made again for the attached address, and no Conflict is raised against the Service that now
// serves it.
func TestAttachUnderAddressLagMakesNoHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "alag", "198.51.100.176/28")
	startFakeMetalLB(t, "alag", netip.MustParsePrefix("198.51.100.176/28"))
	ns := newNamespace(t, "alag")
	const ip = "198.51.100.177"
	_, addr := boundClaimWithAddress(t, ns, "c", "alag", ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	var first corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr.Name)}, &first); err != nil {
		t.Fatal(err)
	}

	w, err := kubeWatchServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var remade atomic.Int32
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added && s.Name == plan.HoldName(addr.Name) && s.UID != first.UID {
				remade.Add(1)
			}
		}
	}()
	withWatchLagOn(t, "ipaddresses", 300*time.Millisecond)
	// One that cannot share its IP with the hold: the attach deletes the hold.
	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "tcpmux", Port: plan.HoldPort, Protocol: corev1.ProtocolTCP})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, "web", ip)
	consistently(t, 3*time.Second, "no new hold and no Conflict while attached", func() (bool, error) {
		if remade.Load() > 0 {
			return false, nil // a hold made again for an attached address
		}
		c, err := addressCondition(addr.Name, ipamv1.ConditionConflict)
		return c == nil || c.Status != metav1.ConditionTrue, err
	})
}
