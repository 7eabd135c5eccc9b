package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/tenantcluster"
)

// The ranges of the tenant-cluster test, used by no other test: the class the guest Services
// name (Retain, so a re-created claim gets another address), a class with a per-namespace limit
// for the claims that bind late, the class of the load, and an autoAssign: true pool.
var (
	tcPublicRange  = "192.0.2.224/28"
	tcLimitedRange = "192.0.2.240/29"
	tcLoadRange    = "192.0.2.128/26"
	tcAutoRange    = "192.0.2.192/27"
)

const (
	tcRelease = "kubernetes-guest"
	// guestNS is where the guest Services live, in the tenant cluster.
	guestNS = "default"
	// refreshAnnotation is what a tenant writes on a guest Service to make its cloud controller
	// manager look at the host Service again (any change of any annotation does).
	refreshAnnotation = "example.org/refresh"
)

// The tenant-cluster path of the product page, end to end: LoadBalancer Services of a tenant
// Kubernetes cluster (a bare guest control plane, the upstream service controller of
// k8s.io/cloud-provider, and a stand-in for cloud-provider-kubevirt's load balancer pinned to the
// commit Cozystack builds, e2e/tenantcluster) get host Services in the tenant namespace, created
// by the tenant cluster's ServiceAccount with the RBAC Cozystack gives it. Two watches record
// every state of every guest Service and every host Service. The cases:
//
//	named       a claim named on the guest Service, Bound beforehand: the guest gets its address;
//	by-class    ip-address-class on the guest: the host Service is auto-claimed; deleting the
//	            guest Service deletes the host Service, its claim and the address;
//	pool-anno   a MetalLB annotation, and lb-ip spec.loadBalancerIP: the host refuses the host
//	            Service; the guest's events carry the denial; pool-anno, the annotation replaced
//	            by a claim's on the guest, then gets the claim's address (no host Service was
//	            made, so the next attempt makes it from the Service as it is);
//	relink      the claim annotation changed on the guest: the host keeps the old claim, and
//	            the guest its address, until the guest Service is re-created;
//	rebind      the claim re-created on the host: the host Service moves to the new address, the
//	            guest keeps the old one until an annotation change on the guest makes the
//	            service controller look again;
//	late-soon   a claim over its class's per-namespace limit, the limit raised 15 s later: the
//	            address arrives within the provider's 60 s poll and reaches the guest;
//	late-after  the same, the limit raised after the poll gave up: the host Service gets the
//	            address, the guest does not, until an annotation change; and queued, created
//	            right after it, waits for that poll to end (the controller's one worker);
//	auto-*      with an autoAssign: true pool present: a named claim and a class get only their
//	            claim's address; a plain guest Service gets the pool's (the control), keeps it
//	            when the claim annotation is added later, and gets the claim's once re-created.
//
// While late-after waits, a load of host Services is created through the same load balancer at
// once (half naming Bound claims, half auto-claimed), as many tenant clusters would; the time from
// each host Service's creation to its claim's address is logged (p50, p99, max), with the host
// Services whose address came only after the 60 s poll (see load).
//
// In every case the guest never shows an address that is not its claim's (rebind: one of the
// two addresses its claim has had); nor does a host Service.
func TestTenantClusterGuestServices(t *testing.T) {
	f := features.New("a tenant cluster's LoadBalancer Services through cloud-provider-kubevirt's load balancer").
		Assess("every case, recorded on the guest and on the host", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			r := startTenantRun(ctx, t, "tenant-guest-cluster")
			r.phaseOne()
			r.phaseTwo()
			r.judge()
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// tenantRun is the test's state: the host, the guest, the recordings and what each Service may
// show.
type tenantRun struct {
	ctx    context.Context
	t      *testing.T
	c      client.Client
	hostCS kubernetes.Interface
	ns     string
	g      *tenantcluster.Guest

	guestRec, hostRec *tenantcluster.Record

	mu sync.Mutex
	// allowedGuest is what each incarnation of a guest Service may show, by UID; allowedHost the
	// same by host Service name. plain and plainHost mark an incarnation created without a claim
	// or a class (an address of the autoAssign pool is its to show).
	allowedGuest map[types.UID][]string
	allowedHost  map[string][]string
	plain        map[types.UID]bool
	plainHost    map[string]bool
	labels       map[types.UID]string

	stopOnce sync.Once
}

func startTenantRun(ctx context.Context, t *testing.T, namespace string) *tenantRun {
	c := ipamClient(t)
	ns := tenantNamespace(ctx, t, c, namespace)
	t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
	poolWithClass(ctx, t, c, "tc-public", ipamv1.ReclaimRetain, tcPublicRange)
	poolWithClass(ctx, t, c, "tc-limited", ipamv1.ReclaimDelete, tcLimitedRange)
	poolWithClass(ctx, t, c, "tc-load", ipamv1.ReclaimDelete, tcLoadRange)
	setLimit(ctx, t, c, "tc-limited", 1)

	hostCS, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	r := &tenantRun{ctx: ctx, t: t, c: c, hostCS: hostCS, ns: ns,
		allowedGuest: map[types.UID][]string{}, allowedHost: map[string][]string{}, plain: map[types.UID]bool{}, plainHost: map[string]bool{}, labels: map[types.UID]string{}}
	if r.hostRec, err = tenantcluster.RecordServices(ctx, hostCS, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.hostRec.Stop)
	// The guest's processes outlive no test; its log lines go to stderr (a test's t.Logf must
	// not be called once the test is over, and the supervisor may log then).
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s [tenant-cluster] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	start := time.Now()
	g, err := tenantcluster.Start(ctx, tenantcluster.Options{Host: cluster.Config(), Namespace: ns, Release: tcRelease, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	r.g = g
	t.Cleanup(r.stopGuest)
	t.Logf("tenant cluster up in %s: guest %s, host Services as %s", time.Since(start).Round(time.Millisecond), g.Config.Host, g.HostTenantUser)
	if r.guestRec, err = tenantcluster.RecordServices(ctx, g.Client, guestNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.guestRec.Stop)
	return r
}

// stopGuest deletes the guest's LoadBalancer Services, so that the service controller deletes
// their host Services, stops the guest, and deletes whatever host Service is left. Only the
// first call does anything.
func (r *tenantRun) stopGuest() {
	r.stopOnce.Do(r.stopGuestOnce)
}

func (r *tenantRun) stopGuestOnce() {
	ctx := context.Background()
	svcs := r.g.Client.CoreV1().Services(guestNS)
	list, _ := svcs.List(ctx, metav1.ListOptions{})
	for _, s := range list.Items {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			_ = svcs.Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	err := poll(ctx, 2*time.Minute, "the guest's LoadBalancer Services to be gone", func(ctx context.Context) (bool, error) {
		list, err := svcs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(list.Items, func(s corev1.Service) bool { return s.Spec.Type == corev1.ServiceTypeLoadBalancer }), nil
	})
	if err != nil {
		r.t.Logf("cleanup: %v; the host Services are deleted by hand", err)
	}
	if err := r.g.Stop(); err != nil {
		r.t.Errorf("stopping the tenant cluster: %v", err)
	}
	_ = r.c.DeleteAllOf(ctx, &corev1.Service{}, client.InNamespace(r.ns))
}

// phaseOne runs the cases without an autoAssign pool.
func (r *tenantRun) phaseOne() {
	t, c, ctx := r.t, r.c, r.ctx
	for _, n := range []string{"named", "rebind", "relink-a", "relink-b", "fixed"} {
		newTenantClaim(ctx, t, c, r.ns, n, "tc-public", ipamv1.IPv4)
	}
	claims := map[string]*ipamv1.IPAddressClaim{}
	for _, n := range []string{"named", "rebind", "relink-a", "relink-b", "fixed"} {
		claims[n] = waitClaimBound(ctx, t, c, r.ns, n)
	}

	lbIP := guestService("lb-ip", nil)
	lbIP.Spec.LoadBalancerIP = claimIPs(claims["named"])[0] // someone else's reserved address, say
	created := map[string]*corev1.Service{}
	for _, s := range []*corev1.Service{
		guestService("named", map[string]string{claimAnnotation: "named"}),
		guestService("by-class", map[string]string{classAnnotation: "tc-public"}),
		guestService("pool-anno", map[string]string{poolAnnotation: "tc-public"}),
		lbIP,
		guestService("rebind", map[string]string{claimAnnotation: "rebind"}),
		guestService("relink", map[string]string{claimAnnotation: "relink-a"}),
	} {
		created[s.Name] = r.createGuest(s)
	}
	r.allow(created["named"], claimIPs(claims["named"]))
	r.allow(created["rebind"], claimIPs(claims["rebind"]))
	r.allow(created["relink"], claimIPs(claims["relink-a"]))
	r.allow(created["pool-anno"], nil)
	r.allow(created["lb-ip"], nil)

	// named: exactly its claim's address, on a host Service shaped as the provider makes it.
	r.guestServes(created["named"], claimIPs(claims["named"]), 2*time.Minute)
	r.checkHostService(created["named"], "named")

	// by-class: the host Service's auto-claim, of the host Service's name.
	byClass := r.hostName(created["by-class"])
	auto := waitClaimBound(ctx, t, c, r.ns, byClass)
	if auto.Annotations[autoClaimAnnotation] != "true" || auto.Status.ClassName != "tc-public" {
		t.Errorf("by-class: the claim %s: class %q, annotations %v", byClass, auto.Status.ClassName, auto.Annotations)
	}
	r.allow(created["by-class"], claimIPs(auto))
	r.guestServes(created["by-class"], claimIPs(auto), 2*time.Minute)

	// pool-anno, lb-ip: refused on the host; the guest's events say so, naming the policy, the
	// field and the tenant cluster's ServiceAccount.
	for name, field := range map[string]string{"pool-anno": poolAnnotation, "lb-ip": "spec.loadBalancerIP"} {
		ev := r.waitGuestEvent(created[name], "SyncLoadBalancerFailed", "metallb-iad-service-pins", time.Minute)
		for _, want := range []string{"denied", field, r.g.HostTenantUser} {
			if !strings.Contains(ev.Message, want) {
				t.Errorf("%s: the guest's event does not say %q: %s", name, want, ev.Message)
			}
		}
		t.Logf("%s: the guest's event: %s: %s", name, ev.Reason, ev.Message)
		if err := c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: r.hostName(created[name])}, &corev1.Service{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: a host Service exists (%v)", name, err)
		}
	}
	// What the tenant does: take the field off and name a claim instead, on the same guest
	// Service. No host Service exists yet, so the next attempt creates one from the Service as
	// it is now.
	r.allow(created["pool-anno"], claimIPs(claims["fixed"]))
	r.patchGuest(created["pool-anno"], map[string]*string{poolAnnotation: nil, claimAnnotation: ptrTo("fixed")})
	r.guestServes(created["pool-anno"], claimIPs(claims["fixed"]), 2*time.Minute)

	// relink: the guest moves to relink-b; the host Service keeps relink-a, so does the guest.
	r.guestServes(created["relink"], claimIPs(claims["relink-a"]), 2*time.Minute)
	r.patchGuest(created["relink"], map[string]*string{claimAnnotation: ptrTo("relink-b")})
	r.waitEnsured(created["relink"], 2)
	if err := holds(ctx, 5*time.Second, func(ctx context.Context) (bool, error) {
		host, err := r.host(created["relink"])
		if err != nil {
			return false, err
		}
		return host.Annotations[claimAnnotation] == "relink-a" && slices.Equal(ingressOf(host), claimIPs(claims["relink-a"])) &&
			slices.Equal(r.guestIPs(created["relink"]), claimIPs(claims["relink-a"])), nil
	}); err != nil {
		t.Errorf("relink: after the guest named relink-b, want the host Service and the guest on relink-a's %v: %v", claimIPs(claims["relink-a"]), err)
	}
	// What the tenant does: re-create the guest Service.
	relinked := r.recreateGuest(created["relink"], map[string]string{claimAnnotation: "relink-b"})
	r.allow(relinked, claimIPs(claims["relink-b"]))
	r.guestServes(relinked, claimIPs(claims["relink-b"]), 2*time.Minute)
	waitHeld(ctx, t, c, claims["relink-a"].Status.Addresses[0].Name, claimIPs(claims["relink-a"])[0])

	// rebind: the claim is deleted and made again on the host; the new claim gets another
	// address (the old one stays Released in the old claim's name), and the host Service moves.
	r.guestServes(created["rebind"], claimIPs(claims["rebind"]), 2*time.Minute)
	old := claimIPs(claims["rebind"])
	if err := c.Delete(ctx, claims["rebind"]); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, time.Minute, "the claim rebind to be gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(claims["rebind"]), &ipamv1.IPAddressClaim{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	newTenantClaim(ctx, t, c, r.ns, "rebind", "tc-public", ipamv1.IPv4)
	again := waitClaimBound(ctx, t, c, r.ns, "rebind")
	moved := claimIPs(again)
	if slices.Equal(moved, old) {
		t.Fatalf("rebind: the new claim got the old address %v; the case needs another", old)
	}
	r.allow(created["rebind"], append(slices.Clone(old), moved...))
	r.hostServes(created["rebind"], moved, 2*time.Minute)
	if err := holds(ctx, 5*time.Second, func(context.Context) (bool, error) {
		return slices.Equal(r.guestIPs(created["rebind"]), old), nil
	}); err != nil {
		t.Errorf("rebind: want the guest to keep showing %v after the host moved to %v (the provider copies once): it shows %v",
			old, moved, r.guestIPs(created["rebind"]))
	}
	r.patchGuest(created["rebind"], map[string]*string{refreshAnnotation: ptrTo("1")})
	r.guestServes(created["rebind"], moved, time.Minute)

	// by-class, deleted on the guest: the host Service, its auto-claim and the address go.
	autoAddr := auto.Status.Addresses[0].Name
	if err := r.g.Client.CoreV1().Services(guestNS).Delete(ctx, "by-class", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, 2*time.Minute, "the guest Service by-class, its host Service, its claim and its address to be gone", func(ctx context.Context) (bool, error) {
		for _, obj := range []struct {
			key client.ObjectKey
			o   client.Object
		}{
			{client.ObjectKey{Namespace: r.ns, Name: byClass}, &corev1.Service{}},
			{client.ObjectKey{Namespace: r.ns, Name: byClass}, &ipamv1.IPAddressClaim{}},
			{client.ObjectKey{Name: autoAddr}, &ipamv1.IPAddress{}},
		} {
			if err := c.Get(ctx, obj.key, obj.o); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("%T %s: %v", obj.o, obj.key, err)
			}
		}
		_, err := r.g.Client.CoreV1().Services(guestNS).Get(ctx, "by-class", metav1.GetOptions{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	// late-soon: the claim waits over the class's limit; the limit is raised while the provider
	// still polls, and the address reaches the guest.
	newTenantClaim(ctx, t, c, r.ns, "filler", "tc-limited", ipamv1.IPv4)
	waitClaimBound(ctx, t, c, r.ns, "filler")
	newTenantClaim(ctx, t, c, r.ns, "late-soon", "tc-limited", ipamv1.IPv4)
	r.waitClaimReason("late-soon", "AddressLimitReached")
	soon := r.createGuest(guestService("late-soon", map[string]string{claimAnnotation: "late-soon"}))
	r.hostExistsEmpty(soon)
	time.Sleep(time.Until(soon.CreationTimestamp.Add(15 * time.Second)))
	setLimit(ctx, t, c, "tc-limited", 2)
	soonClaim := waitClaimBound(ctx, t, c, r.ns, "late-soon")
	r.allow(soon, claimIPs(soonClaim))
	r.guestServes(soon, claimIPs(soonClaim), time.Minute)
	t.Logf("late-soon: the limit raised 15 s after the guest Service; the guest showed its claim's address %s after it was created",
		r.firstShown(soon).Sub(soon.CreationTimestamp.Time).Round(time.Second))
}

// phaseTwo runs the cases with an autoAssign pool present, and the load.
func (r *tenantRun) phaseTwo() {
	t, c, ctx := r.t, r.c, r.ctx
	newTenantClaim(ctx, t, c, r.ns, "late-after", "tc-limited", ipamv1.IPv4)
	r.waitClaimReason("late-after", "AddressLimitReached")
	for _, n := range []string{"auto-named", "auto-added", "queued"} {
		newTenantClaim(ctx, t, c, r.ns, n, "tc-public", ipamv1.IPv4)
	}
	queuedClaim := waitClaimBound(ctx, t, c, r.ns, "queued")
	r.autoPool()

	// late-after: the guest Service waits through the provider's whole poll, and takes the
	// tenant cluster's only service worker with it: queued, created just after it with a claim
	// Bound all along, gets its host Service only once that poll gave up. Meanwhile, the load.
	after := r.createGuest(guestService("late-after", map[string]string{claimAnnotation: "late-after"}))
	r.hostExistsEmpty(after)
	queued := r.createGuest(guestService("queued", map[string]string{claimAnnotation: "queued"}))
	r.allow(queued, claimIPs(queuedClaim))
	r.load()
	failed := r.waitGuestEvent(after, "SyncLoadBalancerFailed", "timed out waiting for the condition", 2*time.Minute)
	t.Logf("late-after: the guest's event %s after %s: %s", failed.Reason,
		failed.FirstTimestamp.Sub(after.CreationTimestamp.Time).Round(time.Second), failed.Message)
	r.guestServes(queued, claimIPs(queuedClaim), time.Minute)
	// (Event times have a one-second resolution.)
	if obs := r.hostRec.Of(r.hostName(queued)); len(obs) == 0 || obs[0].At.Before(failed.FirstTimestamp.Add(-time.Second)) {
		t.Errorf("queued: its host Service was made before late-after's poll gave up at %s (%s): the service controller has one worker",
			failed.FirstTimestamp.Format("15:04:05"), tenantcluster.Timeline(obs))
	} else {
		t.Logf("queued: created %s after late-after; its host Service made %s after it, its address shown on the guest %s after it",
			queued.CreationTimestamp.Sub(after.CreationTimestamp.Time).Round(time.Second),
			obs[0].At.Sub(queued.CreationTimestamp.Time).Round(time.Second), r.firstShown(queued).Sub(queued.CreationTimestamp.Time).Round(time.Second))
	}
	r.waitEnsured(after, 1)
	setLimit(ctx, t, c, "tc-limited", 3)
	afterClaim := waitClaimBound(ctx, t, c, r.ns, "late-after")
	r.allow(after, claimIPs(afterClaim))
	r.hostServes(after, claimIPs(afterClaim), time.Minute)
	if err := holds(ctx, 10*time.Second, func(context.Context) (bool, error) {
		return len(r.guestIPs(after)) == 0, nil
	}); err != nil {
		t.Errorf("late-after: want the guest without an address once the poll gave up, though the host has %v: it shows %v",
			claimIPs(afterClaim), r.guestIPs(after))
	}
	// What the tenant does: change any annotation of the guest Service.
	r.patchGuest(after, map[string]*string{refreshAnnotation: ptrTo("1")})
	r.guestServes(after, claimIPs(afterClaim), time.Minute)

	// With the autoAssign pool: a named claim, a class, and a plain Service (the control).
	named := waitClaimBound(ctx, t, c, r.ns, "auto-named")
	added := waitClaimBound(ctx, t, c, r.ns, "auto-added")
	autoNamed := r.createGuest(guestService("auto-named", map[string]string{claimAnnotation: "auto-named"}))
	autoClass := r.createGuest(guestService("auto-class", map[string]string{classAnnotation: "tc-public"}))
	plain := r.createGuest(guestService("auto-plain", nil))
	r.allow(autoNamed, claimIPs(named))
	r.allowPlain(plain)
	r.guestServes(autoNamed, claimIPs(named), 2*time.Minute)
	autoClaim := waitClaimBound(ctx, t, c, r.ns, r.hostName(autoClass))
	r.allow(autoClass, claimIPs(autoClaim))
	r.guestServes(autoClass, claimIPs(autoClaim), 2*time.Minute)
	var pool []string
	if err := await(ctx, 2*time.Minute, func(context.Context) (bool, error) {
		pool = r.guestIPs(plain)
		return len(pool) == 1 && inRanges(pool[0], []string{tcAutoRange}), nil
	}); err != nil {
		t.Fatalf("auto-plain got no address of the autoAssign pool (it shows %v), so the pool proves nothing: %v", pool, err)
	}

	// auto-plain gets the claim annotation: the host Service never hears of it.
	r.patchGuest(plain, map[string]*string{claimAnnotation: ptrTo("auto-added")})
	r.waitEnsured(plain, 2)
	if err := holds(ctx, 5*time.Second, func(ctx context.Context) (bool, error) {
		host, err := r.host(plain)
		if err != nil {
			return false, err
		}
		return host.Annotations[claimAnnotation] == "" && slices.Equal(ingressOf(host), pool) && slices.Equal(r.guestIPs(plain), pool), nil
	}); err != nil {
		t.Errorf("auto-plain: after the guest named a claim, want the host Service as it was, and both on the pool's %v: %v", pool, err)
	}
	readded := r.recreateGuest(plain, map[string]string{claimAnnotation: "auto-added"})
	r.allow(readded, claimIPs(added))
	r.guestServes(readded, claimIPs(added), 2*time.Minute)
}

// judge holds every recorded state of every guest and host Service to what it may show.
func (r *tenantRun) judge() {
	t, ctx := r.t, r.ctx
	// Everything up to now: the watches have delivered the current version of each Service.
	list, err := r.g.Client.CoreV1().Services(guestNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if err := r.guestRec.WaitFor(ctx, s.Name, s.ResourceVersion, 30*time.Second); err != nil {
			t.Errorf("the guest watch never delivered %s at %s: %v", s.Name, s.ResourceVersion, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, allowed := range r.allowedGuest {
		obs := r.guestRec.OfUID(uid)
		name := r.labels[uid]
		switch {
		case len(obs) == 0:
			t.Errorf("guest %s (%s): never recorded", name, uid)
		case r.plain[uid]:
			t.Logf("guest %s, naming no claim when created: %s", name, tenantcluster.Timeline(obs))
		default:
			if o, bad := tenantcluster.Foreign(obs, allowed); bad {
				t.Errorf("guest %s showed %v at %s (%s, rv %s); its claim's: %v", name, o.IPs, o.At.Format("15:04:05.000"), o.Event, o.RV, allowed)
			}
			t.Logf("guest %s: %s", name, tenantcluster.Timeline(obs))
		}
	}
	for name, allowed := range r.allowedHost {
		if r.plainHost[name] {
			continue
		}
		obs := r.hostRec.Of(name)
		if o, bad := tenantcluster.Foreign(obs, allowed); bad {
			t.Errorf("host Service %s showed %v at %s; its claim's: %v", name, o.IPs, o.At.Format("15:04:05.000"), allowed)
		}
	}
	checkInvariants(ctx, t, r.c, invariantScope{Classes: []string{"tc-public", "tc-limited", "tc-load"}, Namespaces: []string{r.ns}})
}

// load creates host Services through the load balancer for guest Services of many tenant
// clusters at once (none of them in the guest: only the host's side is measured), half naming a
// Bound claim, half auto-claimed, while the autoAssign pool is present. It logs the time from
// each host Service's creation to its claim's address, as the host watch saw both (p50, p99,
// max), and the time EnsureLoadBalancer took to return it (the provider looks every 5 s). Each
// host Service must end with its claim's address, and EnsureLoadBalancer return that address
// or the poll's timeout; the host Services served only after the poll gave up are reported
// (their guests would never show the address), and fail the test.
func (r *tenantRun) load() {
	t, c, ctx := r.t, r.c, r.ctx
	n := 60
	if v := os.Getenv("E2E_TENANT_CLUSTER_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 || n > 64 {
			t.Fatalf("E2E_TENANT_CLUSTER_N=%q: want 2 to 64 (the load class's pool)", v)
		}
	}
	for i := 0; i < n; i += 2 {
		newTenantClaim(ctx, t, c, r.ns, fmt.Sprintf("load-%02d", i), "tc-load", ipamv1.IPv4)
	}
	claims := map[string]*ipamv1.IPAddressClaim{}
	for i := 0; i < n; i += 2 {
		name := fmt.Sprintf("load-%02d", i)
		claims[name] = waitClaimBound(ctx, t, c, r.ns, name)
	}
	// The load comes from many tenant clusters: its client is not limited to one provider's 5 QPS.
	hostCfg := rest.CopyConfig(r.g.HostTenant)
	hostCfg.QPS, hostCfg.Burst = 500, 1000
	lb, err := r.g.NewLoadBalancer(hostCfg)
	if err != nil {
		t.Fatal(err)
	}
	guests := make([]*corev1.Service, n)
	for i := range guests {
		ann := map[string]string{classAnnotation: "tc-load"}
		if i%2 == 0 {
			ann = map[string]string{claimAnnotation: fmt.Sprintf("load-%02d", i)}
		}
		guests[i] = &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: guestNS, Name: fmt.Sprintf("load-%02d", i), UID: uuid.NewUUID(), Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: int32(31000 + i)}}},
		}
	}
	type result struct {
		ips  []string
		took time.Duration
		err  error
	}
	results := make([]result, n)
	defer r.unload(lb, guests)
	var wg sync.WaitGroup
	start := time.Now()
	for i, gs := range guests {
		wg.Go(func() {
			t0 := time.Now()
			st, err := lb.EnsureLoadBalancer(ctx, "kubernetes-load", gs, nil)
			results[i] = result{took: time.Since(t0), err: err}
			if st != nil {
				results[i].ips = ingressOf(&corev1.Service{Status: corev1.ServiceStatus{LoadBalancer: *st}})
			}
		})
	}
	wg.Wait()
	t.Logf("load: %d host Services through the load balancer at once, all returned after %s", n, time.Since(start).Round(time.Millisecond))

	// Every host Service ends with its claim's address (those the poll missed included), and the
	// load balancer returned that address or the poll's timeout, nothing else.
	names := make([]string, n)
	want := map[string][]string{}
	for i, gs := range guests {
		names[i] = lb.GetLoadBalancerName(ctx, "kubernetes-load", gs)
	}
	served := func(name string) (created, at time.Time) {
		for _, o := range r.hostRec.Of(name) {
			if created.IsZero() && o.Event == watch.Added {
				created = o.At
			}
			if at.IsZero() && len(want[name]) > 0 && slices.Equal(o.IPs, want[name]) {
				at = o.At
			}
		}
		return created, at
	}
	if err := await(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		for i, gs := range guests {
			if want[names[i]] != nil {
				continue
			}
			cl := claims[gs.Name]
			if i%2 == 1 {
				cl = &ipamv1.IPAddressClaim{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: names[i]}, cl); err != nil || cl.Status.Phase != ipamv1.ClaimBound {
					return false, fmt.Errorf("the auto-claim of %s: %v %v", gs.Name, cl.Status.Phase, err)
				}
			}
			want[names[i]] = claimIPs(cl)
			r.allowName(names[i], claimIPs(cl))
		}
		for _, name := range names {
			if _, at := served(name); at.IsZero() {
				return false, fmt.Errorf("%s shows no address of its claim yet", name)
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("load: not every host Service got its claim's address within 3 minutes: %v", err)
	}
	var hostLat, ensureLat []time.Duration
	var late []string
	for i, gs := range guests {
		name, res := names[i], results[i]
		switch {
		case res.err == nil && slices.Equal(res.ips, want[name]):
			ensureLat = append(ensureLat, res.took)
		case res.err != nil && strings.Contains(res.err.Error(), tenantcluster.ErrPollTimeout.Error()):
			// (By its message: the provider's own load balancer returns wait's error.)
			late = append(late, name)
		default:
			t.Errorf("load %s: EnsureLoadBalancer returned %v, %v after %s; want its claim's %v", gs.Name, res.ips, res.err, res.took.Round(time.Millisecond), want[name])
		}
		if created, at := served(name); !created.IsZero() && !at.IsZero() {
			hostLat = append(hostLat, at.Sub(created))
		}
	}
	t.Logf("load: host Service created to its claim's address, %s", percentiles(hostLat))
	t.Logf("load: EnsureLoadBalancer to return it (it looks every %s), %s", (&tenantcluster.LoadBalancer{Config: r.g.CloudConfig.LoadBalancer}).PollInterval(), percentiles(ensureLat))
	if len(late) == 0 {
		return
	}
	// What a guest Service would never have seen: the host Services whose address came after
	// the provider's 60 s poll, with what the host shows about them.
	t.Errorf("load: %d of %d host Services got their claim's address only after the provider's 60 s poll had given up", len(late), n)
	var evs corev1.EventList
	_ = c.List(ctx, &evs, client.InNamespace(r.ns))
	for _, name := range late {
		t.Logf("load, past the poll: %s: %s", name, tenantcluster.Timeline(r.hostRec.Of(name)))
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name {
				t.Logf("load, past the poll: %s: event %s %s from %s, x%d: %s", name, e.Type, e.Reason, e.Source.Component+e.ReportingController, e.Count, e.Message)
			}
		}
	}
}

// unload deletes the load's host Services, as the provider deletes them.
func (r *tenantRun) unload(lb cloudprovider.LoadBalancer, guests []*corev1.Service) {
	var wg sync.WaitGroup
	for _, gs := range guests {
		wg.Go(func() {
			if err := lb.EnsureLoadBalancerDeleted(r.ctx, "kubernetes-load", gs); err != nil {
				r.t.Errorf("load %s: deleting: %v", gs.Name, err)
			}
		})
	}
	wg.Wait()
}

// percentiles says p50, p99 and max of a set of durations.
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	d = slices.Clone(d)
	slices.Sort(d)
	pct := func(p float64) time.Duration {
		return d[min(len(d)-1, int(p*float64(len(d))))].Round(10 * time.Millisecond)
	}
	return fmt.Sprintf("over %d: p50 %s, p99 %s, max %s", len(d), pct(0.50), pct(0.99), d[len(d)-1].Round(10*time.Millisecond))
}

// guestService is a LoadBalancer Service of the tenant cluster.
func guestService(name string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: guestNS, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func (r *tenantRun) createGuest(s *corev1.Service) *corev1.Service {
	r.t.Helper()
	out, err := r.g.Client.CoreV1().Services(guestNS).Create(r.ctx, s, metav1.CreateOptions{})
	if err != nil {
		r.t.Fatalf("creating the guest Service %s: %v", s.Name, err)
	}
	r.mu.Lock()
	r.labels[out.UID] = out.Name
	r.mu.Unlock()
	return out
}

// recreateGuest deletes a guest Service, waits until it and its host Service are gone, and
// creates it again with these annotations.
func (r *tenantRun) recreateGuest(old *corev1.Service, annotations map[string]string) *corev1.Service {
	r.t.Helper()
	if err := r.g.Client.CoreV1().Services(guestNS).Delete(r.ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		r.t.Fatal(err)
	}
	host := r.hostName(old)
	eventually(r.ctx, r.t, 2*time.Minute, "the guest Service "+old.Name+" and its host Service to be gone", func(ctx context.Context) (bool, error) {
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: host}, &corev1.Service{}); !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		_, err := r.g.Client.CoreV1().Services(guestNS).Get(ctx, old.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	return r.createGuest(guestService(old.Name, annotations))
}

func (r *tenantRun) hostName(guest *corev1.Service) string {
	return r.g.LoadBalancer.GetLoadBalancerName(r.ctx, r.g.Release, guest)
}

// allow records what a guest Service (and its host Service) may show.
func (r *tenantRun) allow(guest *corev1.Service, ips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allowedGuest[guest.UID] = append(r.allowedGuest[guest.UID], ips...)
	name := r.hostName(guest)
	r.allowedHost[name] = append(r.allowedHost[name], ips...)
}

// allowPlain marks a guest Service created without a claim or a class.
func (r *tenantRun) allowPlain(guest *corev1.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain[guest.UID] = true
	r.allowedGuest[guest.UID] = nil
	r.plainHost[r.hostName(guest)] = true
}

func (r *tenantRun) allowName(host string, ips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allowedHost[host] = append(r.allowedHost[host], ips...)
}

func (r *tenantRun) guestIPs(guest *corev1.Service) []string {
	s, err := r.g.Client.CoreV1().Services(guestNS).Get(r.ctx, guest.Name, metav1.GetOptions{})
	if err != nil || s.UID != guest.UID {
		return nil
	}
	return ingressOf(s)
}

func (r *tenantRun) host(guest *corev1.Service) (*corev1.Service, error) {
	var s corev1.Service
	err := r.c.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: r.hostName(guest)}, &s)
	return &s, err
}

// guestServes waits until the guest Service shows exactly want, and logs how long it took.
func (r *tenantRun) guestServes(guest *corev1.Service, want []string, timeout time.Duration) {
	r.t.Helper()
	want = sorted(want)
	if err := await(r.ctx, timeout, func(context.Context) (bool, error) {
		return slices.Equal(r.guestIPs(guest), want), nil
	}); err != nil {
		host, herr := r.host(guest)
		r.t.Fatalf("guest %s: want %v, it shows %v; its host Service %s shows %v (%v): %v", guest.Name, want, r.guestIPs(guest),
			r.hostName(guest), ingressOf(host), herr, err)
	}
}

// hostServes waits until the guest Service's host Service shows exactly want.
func (r *tenantRun) hostServes(guest *corev1.Service, want []string, timeout time.Duration) {
	r.t.Helper()
	want = sorted(want)
	var got []string
	if err := await(r.ctx, timeout, func(context.Context) (bool, error) {
		host, err := r.host(guest)
		got = ingressOf(host)
		return slices.Equal(got, want), err
	}); err != nil {
		r.t.Fatalf("the host Service of %s: want %v, it shows %v: %v", guest.Name, want, got, err)
	}
}

// hostExistsEmpty waits until the guest Service's host Service exists, and checks that it shows
// nothing.
func (r *tenantRun) hostExistsEmpty(guest *corev1.Service) {
	r.t.Helper()
	var host *corev1.Service
	eventually(r.ctx, r.t, time.Minute, "the host Service of "+guest.Name, func(context.Context) (bool, error) {
		var err error
		host, err = r.host(guest)
		return err == nil, client.IgnoreNotFound(err)
	})
	if ips := ingressOf(host); len(ips) > 0 {
		r.t.Errorf("the host Service of %s shows %v while its claim is not Bound", guest.Name, ips)
	}
}

// firstShown is when the guest watch first saw the Service with an address.
func (r *tenantRun) firstShown(guest *corev1.Service) time.Time {
	for _, o := range r.guestRec.OfUID(guest.UID) {
		if len(o.IPs) > 0 {
			return o.At
		}
	}
	return time.Time{}
}

// checkHostService holds a host Service to the provider's shape: its name, labels, annotations
// (copied, and the driver's pin added), no selector, ports to the guest's NodePorts.
func (r *tenantRun) checkHostService(guest *corev1.Service, claim string) {
	t := r.t
	t.Helper()
	g, err := r.g.Client.CoreV1().Services(guestNS).Get(r.ctx, guest.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, err := r.host(g)
	if err != nil {
		t.Fatal(err)
	}
	if want := cloudprovider.DefaultLoadBalancerName(g); host.Name != want || len(host.Name) != 32 || !strings.HasPrefix(host.Name, "a") {
		t.Errorf("host Service %q, want %q", host.Name, want)
	}
	for k, v := range map[string]string{tenantcluster.TenantServiceNameLabelKey: g.Name, tenantcluster.TenantServiceNamespaceLabelKey: guestNS,
		tenantcluster.TenantClusterNameLabelKey: tcRelease, "internal.cozystack.io/tenantresource": "true",
		"apps.cozystack.io/application.name": strings.TrimPrefix(tcRelease, "kubernetes-")} {
		if host.Labels[k] != v {
			t.Errorf("host Service label %s=%q, want %q", k, host.Labels[k], v)
		}
	}
	if host.Annotations[claimAnnotation] != claim || host.Annotations[pinnedMarker] != "true" {
		t.Errorf("host Service annotations %v: want the guest's claim and the driver's pin", host.Annotations)
	}
	if len(host.Spec.Selector) != 0 {
		t.Errorf("host Service selector %v, want none", host.Spec.Selector)
	}
	if len(host.Spec.Ports) != 1 || host.Spec.Ports[0].TargetPort.IntValue() != int(g.Spec.Ports[0].NodePort) {
		t.Errorf("host Service ports %v, want one targeting the guest's NodePort %d", host.Spec.Ports, g.Spec.Ports[0].NodePort)
	}
	if host.Annotations[poolAnnotation] != "" {
		t.Errorf("host Service still has %s=%s", poolAnnotation, host.Annotations[poolAnnotation])
	}
}

// waitGuestEvent waits for an event of the guest Service with this reason whose message contains
// text.
func (r *tenantRun) waitGuestEvent(guest *corev1.Service, reason, text string, timeout time.Duration) corev1.Event {
	r.t.Helper()
	var found corev1.Event
	eventually(r.ctx, r.t, timeout, fmt.Sprintf("a %s event on the guest Service %s saying %q", reason, guest.Name, text), func(ctx context.Context) (bool, error) {
		for _, e := range r.guestEvents(guest) {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// waitEnsured waits until the service controller has ensured the guest Service's load balancer
// at least n times (its events are aggregated: one event with a count).
func (r *tenantRun) waitEnsured(guest *corev1.Service, n int32) {
	r.t.Helper()
	eventually(r.ctx, r.t, 2*time.Minute, fmt.Sprintf("the service controller to ensure %s's load balancer %d times", guest.Name, n), func(context.Context) (bool, error) {
		var count int32
		for _, e := range r.guestEvents(guest) {
			if e.Reason == "EnsuredLoadBalancer" {
				count += max(e.Count, 1)
			}
		}
		return count >= n, nil
	})
}

func (r *tenantRun) guestEvents(guest *corev1.Service) []corev1.Event {
	list, err := r.g.Client.CoreV1().Events(guestNS).List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.InvolvedObject.UID != guest.UID })
}

func (r *tenantRun) patchGuest(guest *corev1.Service, set map[string]*string) {
	r.t.Helper()
	var parts []string
	for k, v := range set {
		if v == nil {
			parts = append(parts, fmt.Sprintf("%q:null", k))
		} else {
			parts = append(parts, fmt.Sprintf("%q:%q", k, *v))
		}
	}
	patch := []byte(`{"metadata":{"annotations":{` + strings.Join(parts, ",") + `}}}`)
	if _, err := r.g.Client.CoreV1().Services(guestNS).Patch(r.ctx, guest.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *tenantRun) waitClaimReason(name, reason string) {
	r.t.Helper()
	eventually(r.ctx, r.t, time.Minute, "claim "+name+" to wait with "+reason, func(ctx context.Context) (bool, error) {
		var cl ipamv1.IPAddressClaim
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, &cl); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(cl.Status.Conditions, ipamv1.ConditionBound)
		return cl.Status.Phase == ipamv1.ClaimPending && cond != nil && cond.Reason == reason, nil
	})
}

func setLimit(ctx context.Context, t *testing.T, c client.Client, class string, n int) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"maxAddressesPerNamespace":%d}}`, n)
	if err := c.Patch(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: class}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// autoPool creates the test's autoAssign: true pool. At the end the tenant cluster goes first
// (its guest Services, and so the host Services), then the pool, and the test waits until it is
// gone, so that later tests find no autoAssign pool.
func (r *tenantRun) autoPool() {
	t := r.t
	t.Helper()
	u := newPoolObject("tc-auto", nil, tcAutoRange)
	if err := r.c.Create(r.ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.stopGuest()
		bg := context.Background()
		_ = r.c.Delete(bg, u)
		eventually(bg, t, 30*time.Second, "the autoAssign pool to be gone", func(ctx context.Context) (bool, error) {
			err := r.c.Get(ctx, client.ObjectKeyFromObject(u), newPoolObject("tc-auto", nil))
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
}
