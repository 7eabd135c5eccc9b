package driver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/promcheck"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Integration tests of the driver on a real apiserver (envtest) without MetalLB's controller or
// the core: the tests play both, writing what they would write, and check what the driver
// does in return. The end-to-end suite runs the driver with the real ones.

const (
	testDriverNS  = "cozy-metallb-iad"
	testMetalLBNS = "cozy-metallb"
)

var (
	testDriver *Driver
	// testCache is the driver's cache: settled reads it to know what the driver has seen.
	testCache cache.Cache
	admin     client.Client
	watcher   client.WithWatch
)

// kubeWatchServices watches every Service of the driver's namespace.
func kubeWatchServices(ctx context.Context) (watch.Interface, error) {
	return watcher.Watch(ctx, &corev1.ServiceList{}, client.InNamespace(testDriverNS))
}

// driverWrites counts the driver's API writes by "VERB resource[/subresource]", and those the
// apiserver refused again by "STATUS VERB resource[/subresource]".
var driverWrites sync.Map

// eventReads counts the driver's reads of Events from the apiserver (lists and gets; watches
// not).
var eventReads atomic.Int64

// addressMisses counts the driver's reads of IPAddresses the apiserver does not have (404), by
// address name.
var addressMisses sync.Map

// addressMissesWithPrefix sums addressMisses over the names that start with prefix.
func addressMissesWithPrefix(prefix string) int64 {
	var total int64
	addressMisses.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			total += v.(*atomic.Int64).Load()
		}
		return true
	})
	return total
}

type countingTransport struct{ next http.RoundTripper }

// failWrite, while set, answers the driver's writes it matches with a 500 that never reached
// the apiserver (a timeout, an apiserver restart): each matching write fails once.
var failWrite atomic.Pointer[func(req *http.Request) bool]

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if f := failWrite.Load(); f != nil && req.Method != http.MethodGet && (*f)(req) {
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test","reason":"InternalError","code":500}`
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
			Request: req, ContentLength: int64(len(body))}, nil
	}
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" && writeResource(req.URL.Path) == "events" {
		eventReads.Add(1)
	}
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" && strings.Contains(req.URL.Path, "/servicecidrs") {
		serviceCIDRReads.Add(1)
	}
	if req.Method != http.MethodGet {
		key := req.Method + " " + writeResource(req.URL.Path)
		n, _ := driverWrites.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && resp.StatusCode == http.StatusNotFound && writeResource(req.URL.Path) == "ipaddresses" {
		n, _ := addressMisses.LoadOrStore(path.Base(req.URL.Path), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if err == nil && req.Method != http.MethodGet && resp.StatusCode >= 400 {
		// A refused write (409 Conflict, 404 Not Found) is a wasted write: counted apart too.
		key := fmt.Sprintf("%d %s %s", resp.StatusCode, req.Method, writeResource(req.URL.Path))
		n, _ := driverWrites.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if err == nil && req.URL.Query().Get("watch") == "true" {
		resp.Body = &laggingBody{ReadCloser: resp.Body, resource: writeResource(req.URL.Path)}
	}
	return resp, err
}

// watchLag, while set, delays what the driver's watches receive: its cache then lags behind its
// own writes, as on a loaded apiserver. lagOnly, when set, limits it to the watch of one
// resource ("services"): one informer behind the others, the skew that fools a decision.
var (
	watchLag atomic.Int64
	lagOnly  atomic.Value // string
)

type laggingBody struct {
	io.ReadCloser
	resource string
}

func (b *laggingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	only, _ := lagOnly.Load().(string)
	if d := time.Duration(watchLag.Load()); d > 0 && n > 0 && (only == "" || only == b.resource) {
		// In short steps, so that a test's cleanup ends the lag for the next test at once.
		for end := time.Now().Add(d); time.Now().Before(end) && watchLag.Load() > 0; {
			time.Sleep(min(50*time.Millisecond, time.Until(end)))
		}
	}
	return n, err
}

// withWatchLagOn makes the driver's cache of one resource ("services", "ipaddresses") lag by
// about d for the rest of the test; "" lags every resource.
func withWatchLagOn(t *testing.T, resource string, d time.Duration) {
	lagOnly.Store(resource)
	watchLag.Store(int64(d))
	t.Cleanup(func() { watchLag.Store(0); lagOnly.Store("") })
}

// writeResource names the resource of a write's path: services, services/status, ipaddresses,
// ipaddresses/status, events.
func writeResource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		switch p {
		case "services", "ipaddresses", "ipaddressclasses", "ipaddressclaims", "events", "leases":
			if i+2 < len(parts) {
				return p + "/" + parts[i+2]
			}
			return p
		}
	}
	return path
}

// writesSince sums the driver's writes since before (a writesSnapshot), logging each kind, and
// returns the refused ones (409, 404, ...) by kind.
func writesSince(t *testing.T, what string, before map[string]int64) (total int64, refused map[string]int64) {
	t.Helper()
	refused = map[string]int64{}
	for k, v := range writesSnapshot() {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		t.Logf("%s: driver writes %-32s %d", what, k, d)
		if k[0] > '9' && strings.HasSuffix(k, " ipaddressclasses/status") {
			// A class's status: its capacity, written at most once per CapacityEvery whatever
			// the number of addresses (TestClassCapacity), is no write of any one address.
			continue
		}
		if k[0] >= '0' && k[0] <= '9' {
			refused[k] = d
			continue
		}
		total += d
	}
	return total, refused
}

// writesSnapshot copies driverWrites.
func writesSnapshot() map[string]int64 {
	out := map[string]int64{}
	driverWrites.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// needAPIServer fails an integration test run without envtest (never a skip: a skipped test
// proves nothing).
func needAPIServer(t *testing.T) {
	t.Helper()
	if admin == nil {
		t.Fatal("no apiserver: set KUBEBUILDER_ASSETS and METALLB_CRDS (make test-unit)")
	}
}

func TestMain(m *testing.M) {
	if fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	crds := os.Getenv("METALLB_CRDS")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" || crds == "" {
		// The planners' table tests need no apiserver; every integration test fails in
		// needAPIServer.
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS and METALLB_CRDS are not set: integration tests will fail; run them through `make test-unit`")
		return m.Run()
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ipamv1.AddToScheme(scheme)
	_ = metallb.AddToScheme(scheme)
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "address-controller", "config", "crd"), crds},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		// A start that failed after the control plane came up (the CRDs not found, say)
		// leaves etcd and the apiserver running: stop them.
		_ = env.Stop()
		return 1
	}
	defer func() { _ = env.Stop() }()
	admin, _ = client.New(cfg, client.Options{Scheme: scheme})
	watcher, _ = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	for _, ns := range []string{testDriverNS, testMetalLBNS, "tenant"} {
		if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			panic(err)
		}
	}
	driverCfg := rest.CopyConfig(cfg)
	driverCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt} })
	serviceLabels := NewServiceLabels()
	mgr, err := ctrl.NewManager(driverCfg, ctrl.Options{
		Scheme: scheme,
		Logger: reconciles.Logger(logf.Log),
		// The Service cache's transform is kept: NewCache gets these options.
		NewCache: reconciles.NewCache,
		Metrics:  metricsserver.Options{BindAddress: "0"},
		Cache:    cache.Options{ByObject: CacheByObject(testDriverNS, serviceLabels)},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &Driver{Namespace: testDriverNS, MetalLBNamespace: testMetalLBNS, Workers: 2, NudgeAfter: time.Hour, SweepEvery: sweepEvery(),
		NotServedAfter: notServedAfter(), ExpectFor: expectFor(), NewQueue: lostEvents.newQueue,
		ServiceLabels: serviceLabels}
	testDriver = d
	testCache = mgr.GetCache()
	if err := d.SetupWithManager(ctx, mgr); err != nil {
		panic(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	return m.Run()
}

// notServedAfter is the test driver's NotServedAfter: 10s (longer than the MetalLB stand-in
// takes under make test's load), or $TEST_NOT_SERVED_AFTER (-1s shows the NotServed test failing
// without the report).
func notServedAfter() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TEST_NOT_SERVED_AFTER")); err == nil {
		return d
	}
	return 10 * time.Second
}

// expectFor is the test driver's ExpectFor: the default, or none with $TEST_NO_EXPECTATIONS (it
// shows the tests of the expectations failing without them).
func expectFor() time.Duration {
	if os.Getenv("TEST_NO_EXPECTATIONS") != "" {
		return -1
	}
	return 0
}

// sweepEvery is the test driver's orphan-sweep period: a second, or $TEST_SWEEP_EVERY (an hour
// shows the periodic sweep's test failing without it).
func sweepEvery() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TEST_SWEEP_EVERY")); err == nil {
		return d
	}
	return time.Second
}

// driverControllers are the names of the driver's controllers (their work queues' names).
var driverControllers = []string{"metallb-iad-address", "metallb-iad-claim", "metallb-iad-class", "metallb-iad-service"}

// reconciles follows the driver's controllers: the test manager's logger and cache.
var reconciles = envtestutil.NewReconciles()

// settled waits until the driver has handled every write made so far (envtestutil's Settle): a
// sentinel of every kind it watches has reached each of its event handlers, no reconcile runs,
// no key is queued again within 3 s, its work queues are empty, and nothing was written since
// the sentinels. A test asserts what the driver did not do only after this: a sleep would pass
// without proving anything when the driver is slow. The namespace is unused (the sentinels are
// the suite's own); it is kept so that callers say where they wrote.
func settled(t *testing.T, _ string) {
	t.Helper()
	reconciles.Settle(t, envtestutil.SettleOptions{Reader: admin, Touch: envtestutil.Sentinels(admin, settleSentinels()...),
		Controllers: driverControllers, Busy: driverBusy})
}

// settledOn waits until the driver has reconciled obj at the resourceVersion the apiserver has
// now, and everything else written so far (settled).
func settledOn(t *testing.T, obj client.Object) {
	t.Helper()
	settled(t, obj.GetNamespace())
	cached(t, obj)
}

// cached waits until the driver's cache shows obj at the resourceVersion the apiserver has now
// (or a later one).
func cached(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKeyFromObject(obj)
	if err := admin.Get(ctx, key, obj); err != nil {
		t.Fatal(err)
	}
	want := obj.GetResourceVersion()
	seen := obj.DeepCopyObject().(client.Object)
	eventually(t, fmt.Sprintf("the driver's cache to show %s at resourceVersion %s", key, want), func() (bool, error) {
		if err := testCache.Get(ctx, key, seen); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return freshness.RVAtLeast(seen.GetResourceVersion(), want), nil
	})
}

// settleSentinels are envtestutil's sentinels (the claim and the address of a class of another
// driver), a pool no class names, and the apiserver's own ServiceCIDR (an annotation changes no
// family).
func settleSentinels() []client.Object {
	return append(envtestutil.KindSentinels(envtestutil.SentinelNamespace),
		&metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: envtestutil.SentinelNamespace},
			Spec: metallb.IPAddressPoolSpec{Addresses: []string{"192.0.2.252/30"}}},
		&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}})
}

// driverBusy says which controller of the driver has work queued or a reconcile running
// (controller-runtime's workqueue_depth and controller_runtime_active_workers).
func driverBusy() (string, error) {
	idle, err := driverIdle()
	if err != nil || idle {
		return "", err
	}
	return "a work queue of the driver is not empty or a worker is active", nil
}

// driverIdle reports whether no controller of the driver has work queued or a reconcile running
// (controller-runtime's workqueue_depth and controller_runtime_active_workers).
func driverIdle() (bool, error) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return false, err
	}
	queues := map[string]bool{}
	for _, f := range families {
		var label string
		switch f.GetName() {
		case "workqueue_depth":
			label = "name"
		case "controller_runtime_active_workers":
			label = "controller"
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != label || !slices.Contains(driverControllers, l.GetValue()) {
					continue
				}
				if f.GetName() == "workqueue_depth" {
					queues[l.GetValue()] = true
				}
				if m.GetGauge().GetValue() != 0 {
					return false, nil
				}
			}
		}
	}
	// Without the queues' gauges the wait would prove nothing: fail instead.
	if len(queues) != len(driverControllers) {
		return false, fmt.Errorf("workqueue_depth shows the queues %v, want all of %v", queues, driverControllers)
	}
	return true, nil
}

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	eventuallyWithin(t, 20*time.Second, what, cond)
}

// eventuallyWithin is eventually with its own limit, for a wait on many objects (on a loaded
// machine, as under make test, they take a few times as long as alone).
func eventuallyWithin(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	envtestutil.Eventually(t, limit, 50*time.Millisecond, what, cond)
}

func acceptance(t *testing.T, class string) *metav1.Condition {
	var c ipamv1.IPAddressClass
	if err := admin.Get(context.Background(), client.ObjectKey{Name: class}, &c); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionAccepted)
}

func TestClassAcceptanceFollowsThePool(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	class := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "follows"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: "follows"}}}
	if err := admin.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PoolNotFound", func() (bool, error) {
		c := acceptance(t, "follows")
		return c != nil && c.Reason == plan.ReasonPoolNotFound, nil
	})
	no := false
	pool := &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: "follows"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}, AutoAssign: &no}}
	if err := admin.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Accepted", func() (bool, error) {
		c := acceptance(t, "follows")
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	yes := true
	pool.Spec.AutoAssign = &yes
	if err := admin.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PoolAutoAssigns after the pool changed", func() (bool, error) {
		c := acceptance(t, "follows")
		return c != nil && c.Reason == plan.ReasonPoolAutoAssigns, nil
	})
	// A class of another driver is left alone.
	other := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "not-mine"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: "other.example.org", Parameters: map[string]string{plan.ClassParameterPool: "follows"}}}
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	settledOn(t, other)
	if c := acceptance(t, "not-mine"); c != nil {
		t.Fatalf("the driver judged another driver's class: %+v", c)
	}
}

// TestProvisioningContract plays the core (stamping a claim) and MetalLB (serving the
// placeholder) and checks each step the driver takes.
func TestProvisioningContract(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	no := false
	if err := admin.Create(ctx, &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: "contract"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"198.51.100.0/28"}, AutoAssign: &no}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "contract"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, ReclaimPolicy: ipamv1.ReclaimDelete,
			Parameters: map[string]string{plan.ClassParameterPool: "contract"}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the class to be accepted", func() (bool, error) {
		c := acceptance(t, "contract")
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "c",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "contract", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "contract"}
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}

	// 1. A placeholder: selectorless, LoadBalancer, no node ports, single-stack, naming the pool.
	var p corev1.Service
	key := client.ObjectKey{Namespace: testDriverNS, Name: plan.ProvisioningName(string(claim.UID), ipamv1.IPv4, 0)}
	eventually(t, "the provisioning placeholder", func() (bool, error) { return true, admin.Get(ctx, key, &p) })
	if p.Spec.Type != corev1.ServiceTypeLoadBalancer || p.Spec.Selector != nil || p.Spec.AllocateLoadBalancerNodePorts == nil ||
		*p.Spec.AllocateLoadBalancerNodePorts || len(p.Spec.Ports) != 1 || *p.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack ||
		p.Spec.IPFamilies[0] != corev1.IPv4Protocol || p.Annotations[metallb.AnnotationAddressPool] != "contract" {
		t.Fatalf("placeholder is not a silent single-stack LoadBalancer of the pool: %+v %+v", p.Spec, p.Annotations)
	}
	// 2. "MetalLB" serves it.
	p.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.3"}}
	if err := admin.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	// 3. The driver pins the placeholder, creates the IPAddress pre-bound, and labels the hold.
	var a ipamv1.IPAddress
	eventually(t, "the IPAddress", func() (bool, error) { return true, admin.Get(ctx, client.ObjectKey{Name: "ip-198-51-100-3"}, &a) })
	if a.Spec.Address != "198.51.100.3" || a.Spec.ClassName != "contract" || a.Spec.ReclaimPolicy != ipamv1.ReclaimDelete ||
		a.Spec.ClaimRef == nil || a.Spec.ClaimRef.UID != claim.UID || a.Finalizers[0] != plan.Finalizer {
		t.Fatalf("IPAddress does not follow the contract: %+v %v", a.Spec, a.Finalizers)
	}
	eventually(t, "the placeholder to become the pinned hold", func() (bool, error) {
		err := admin.Get(ctx, key, &p)
		return p.Labels[plan.LabelRole] == plan.RoleHold && p.Labels[plan.LabelAddress] == a.Name &&
			p.Annotations[metallb.AnnotationLoadBalancerIPs] == "198.51.100.3", err
	})
	eventually(t, "Held=True", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKey{Name: a.Name}, &a)
		return meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionHeld), err
	})
	// The driver never writes the claim's status, the phase, or the core's finalizers.
	if err := admin.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Phase != ipamv1.ClaimPending || len(claim.Finalizers) != 0 || a.Status.Phase != "" {
		t.Fatalf("the driver wrote a field it does not own: claim %+v finalizers %v, address phase %q", claim.Status, claim.Finalizers, a.Status.Phase)
	}
	// 4. Teardown: deleting the address deletes its hold and releases the finalizer. (The claim
	// goes first, or the driver would rightly provision it again.)
	if err := admin.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, &a); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the address and its hold to go", func() (bool, error) {
		errA := admin.Get(ctx, client.ObjectKey{Name: a.Name}, &a)
		errP := admin.Get(ctx, key, &p)
		if errA == nil || errP == nil {
			return false, fmt.Errorf("address finalizers %v deleting %v; placeholder exists: %v", a.Finalizers, a.DeletionTimestamp, errP == nil)
		}
		return client.IgnoreNotFound(errA) == nil && client.IgnoreNotFound(errP) == nil, nil
	})
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// A claim deleted before MetalLB served its placeholder leaves no placeholder behind.
func TestProvisioningPlaceholderGoesWithItsClaim(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	no := false
	if err := admin.Create(ctx, &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: "orphans"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"198.51.100.64/28"}, AutoAssign: &no}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "orphans"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: "orphans"}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the class to be accepted", func() (bool, error) {
		c := acceptance(t, "orphans")
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gone-early",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "orphans", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "orphans"}
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: testDriverNS, Name: plan.ProvisioningName(string(claim.UID), ipamv1.IPv4, 0)}
	var p corev1.Service
	eventually(t, "the provisioning placeholder", func() (bool, error) { return true, admin.Get(ctx, key, &p) })
	if err := admin.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the placeholder to go with its claim", func() (bool, error) {
		err := admin.Get(ctx, key, &p)
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}

// reconcilesOf is controller-runtime's count of reconciles of the named controller so far.
func reconcilesOf(t *testing.T, controller string) int {
	t.Helper()
	n, err := promcheck.Reconciles(crmetrics.Registry, controller)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
