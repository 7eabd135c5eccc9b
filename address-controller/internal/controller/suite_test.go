package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/promcheck"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/testdriver"
)

// The integration tests run the core and the test driver, each in a manager of its own with its
// own identity, against a real kube-apiserver and etcd (envtest, KUBEBUILDER_ASSETS from
// `make binaries`). The apiserver keeps an audit log of writes, so tests can count what each
// identity wrote.

const (
	coreUser   = "address-controller"
	driverUser = "test-driver"
	// coreReportingController is what the core's events name as their reporting controller (the
	// recorder's name in setup.go).
	coreReportingController = "address-controller"
	driverName              = "test.drivers.local.sdn.cozystack.io"
)

var (
	scheme   = runtime.NewScheme()
	testEnv  *envtest.Environment
	admin    client.Client
	auditLog string
	coreCfg  *rest.Config
	core     *runningManager
	// coreMetrics are the running core's own metrics (replaced when a test restarts the core).
	coreMetrics *Metrics
	driver      = &testdriver.Driver{
		Name:            driverName,
		IPv4:            netip.MustParsePrefix("198.51.100.0/24"),
		IPv6:            netip.MustParsePrefix("2001:db8:1::/120"),
		RegisterIndexes: true,
	}
)

// coreReader is the running core's cache (replaced when a test restarts the core).
var coreReader atomic.Value // cache.Cache

func coreCache() cache.Cache { return coreReader.Load().(cache.Cache) }

type runningManager struct {
	cancel context.CancelFunc
	done   chan error
}

func (m *runningManager) stop() error {
	m.cancel()
	return <-m.done
}

func TestMain(m *testing.M) {
	if fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the integration tests through `make test-unit`, or export KUBEBUILDER_ASSETS=$(go run ./tools/cmd/binaries envtest)")
		return 1
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ipamv1.AddToScheme(scheme)

	dir, err := os.MkdirTemp("", "address-controller-envtest-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	auditLog = filepath.Join(dir, "audit.log")
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
`), 0o644); err != nil {
		panic(err)
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	api := testEnv.ControlPlane.GetAPIServer()
	api.Configure().Set("audit-policy-file", policy).Set("audit-log-path", auditLog).
		Set("audit-log-format", "json").Set("audit-log-mode", "blocking").
		// Room for the thousands of Services of the auto-claim scale test.
		Set("service-cluster-ip-range", "10.0.0.0/16")
	cfg, err := testEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		// A start that failed after the control plane came up (the CRDs not found, say)
		// leaves etcd and the apiserver running: stop them.
		_ = testEnv.Stop()
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	admin, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	coreCfg = userConfig(cfg, coreUser)
	coreCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt} })
	driverCfg := userConfig(cfg, driverUser)

	core, err = startCore(coreCfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if core != nil {
			_ = core.stop()
		}
	}()
	drv, err := startManager(driverCfg, func(ctx context.Context, mgr ctrl.Manager) error {
		return driver.SetupWithManager(ctx, mgr)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = drv.stop() }()
	return m.Run()
}

func zapLevel() zapcore.Level {
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

func userConfig(cfg *rest.Config, name string) *rest.Config {
	user, err := testEnv.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		panic(err)
	}
	c := user.Config()
	c.QPS, c.Burst = 200, 400
	return c
}

func startCore(cfg *rest.Config) (*runningManager, error) {
	return startManager(cfg, func(ctx context.Context, mgr ctrl.Manager) error {
		coreMetrics = NewMetrics(mgr.GetCache())
		coreReader.Store(mgr.GetCache())
		return Setup(ctx, mgr, Options{Workers: 4, Metrics: coreMetrics, QuietWait: suiteQuietWait})
	})
}

// stopCore stops the core, for tests that stage a situation the running core would resolve at
// once; restartCore starts it again, and the test's cleanup does if the test did not.
func stopCore(t *testing.T) {
	t.Helper()
	if err := core.stop(); err != nil {
		t.Fatal(err)
	}
	core = nil
	t.Cleanup(func() {
		if core == nil {
			restartCore(t)
		}
	})
}

func restartCore(t *testing.T) {
	t.Helper()
	var err error
	if core, err = startCore(coreCfg); err != nil {
		t.Fatal(err)
	}
}

// liveClient reads and writes the apiserver directly, as the core's identity.
func liveClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(coreCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// frozenClient writes to the apiserver as the core but reads from an informer cache that was
// synced now and then stopped: the stale view of an informer lagging behind the apiserver,
// with the core's field indexes.
func frozenClient(t *testing.T) client.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cache.New(coreCfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerIndexes(ctx, c); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&ipamv1.IPAddressClaim{}, &ipamv1.IPAddress{}, &ipamv1.IPAddressClass{}, &corev1.Service{}, &corev1.Namespace{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the frozen cache did not sync")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(coreCfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// reconciles returns how many reconciles controller has finished in this process (every
// result), from controller-runtime's metrics.
func reconciles(t *testing.T, controller string) int {
	t.Helper()
	n, err := promcheck.Reconciles(metrics.Registry, controller)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// bindsObserved is the sample count of the running core's bind-duration histogram.
func bindsObserved(t *testing.T) int {
	t.Helper()
	return bindsIn(t, coreMetrics)
}

func bindsIn(t *testing.T, metrics *Metrics) int {
	t.Helper()
	var m dto.Metric
	if err := metrics.bindLatency.Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetHistogram().GetSampleCount())
}

// timesSaid is how often an event was emitted: the events API folds repeats into a series.
func timesSaid(e eventsv1.Event) int {
	if e.Series != nil {
		return int(e.Series.Count)
	}
	return 1
}

// timesSaidFor sums timesSaid over the events with reason about the named object.
func timesSaidFor(t *testing.T, namespace, name, reason string) int {
	t.Helper()
	n := 0
	for _, e := range eventsFor(t, namespace, name, reason) {
		n += timesSaid(e)
	}
	return n
}

func startManager(cfg *rest.Config, setup func(context.Context, ctrl.Manager) error) (*runningManager, error) {
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Both managers (the core, the test driver) are followed: settled waits for them.
		Logger:   followed.Logger(logf.Log),
		NewCache: followed.NewCache,
		// Tests restart the core in one process: the same controller names come back.
		Controller: config.Controller{SkipNameValidation: &skip},
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: CacheByObject()},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	m := &runningManager{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("caches did not sync")
	}
	return m, nil
}

// --- helpers shared by the tests ---

// followed follows the controllers of the core and the test driver.
var followed = envtestutil.NewReconciles()

// settled waits until the core and the test driver have handled every write made so far
// (envtestutil's Settle): a sentinel of every kind they watch has reached each of their event
// handlers, no reconcile runs, no key is queued again within 3 s, and nothing was written since
// the sentinels. A test asserts what the controllers did not do only after this: a sleep would
// pass without proving anything when they are slow.
func settled(t *testing.T) {
	t.Helper()
	followed.Settle(t, envtestutil.SettleOptions{Reader: admin, Touch: envtestutil.Sentinels(admin, envtestutil.KindSentinels(envtestutil.SentinelNamespace+"-absent")...)})
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := admin.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func newClass(t *testing.T, name, provisioner string, mutate ...func(*ipamv1.IPAddressClass)) *ipamv1.IPAddressClass {
	t.Helper()
	c := &ipamv1.IPAddressClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       ipamv1.IPAddressClassSpec{Provisioner: provisioner},
	}
	for _, m := range mutate {
		m(c)
	}
	create(t, c)
	if provisioner == noDriver && c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true" {
		// Auto-claim uses a class only once its driver has accepted it: play that driver.
		reportAsDriver(t, name, func(*ipamv1.IPAddressClassStatus) {})
	}
	return c
}

func newClaim(t *testing.T, ns, name, class string, fam ipamv1.IPFamily, mutate ...func(*ipamv1.IPAddressClaim)) *ipamv1.IPAddressClaim {
	t.Helper()
	c := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ipamv1.IPAddressClaimSpec{ClassName: class, Family: fam},
	}
	for _, m := range mutate {
		m(c)
	}
	create(t, c)
	return c
}

// newAddress pre-provisions an address by hand, as an admin does.
func newAddress(t *testing.T, ip, class string, ref *ipamv1.ClaimReference) *ipamv1.IPAddress {
	t.Helper()
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
		Spec:       ipamv1.IPAddressSpec{Address: ip, ClassName: class, ClaimRef: ref},
	}
	create(t, a)
	return a
}

// suiteQuietWait replaces the two minutes a claim waiting for its driver stays quiet (quietWait), so
// that tests which wait for a claim to say WaitingForAddress do not wait a minute each; the
// drivers of this suite bind well within it.
const suiteQuietWait = 8 * time.Second

func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	envtestutil.Eventually(t, 30*time.Second, 50*time.Millisecond, what, cond)
}

// consistently fails if cond turns false within d.
func consistently(t *testing.T, what string, d time.Duration, cond func() (bool, error)) {
	t.Helper()
	envtestutil.Consistently(t, d, 100*time.Millisecond, what, cond)
}

func getClaim(t *testing.T, ns, name string) *ipamv1.IPAddressClaim {
	t.Helper()
	var c ipamv1.IPAddressClaim
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func getAddress(t *testing.T, name string) *ipamv1.IPAddress {
	t.Helper()
	var a ipamv1.IPAddress
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

func waitClaimPhase(t *testing.T, ns, name string, phase ipamv1.ClaimPhase) *ipamv1.IPAddressClaim {
	t.Helper()
	var c ipamv1.IPAddressClaim
	eventually(t, fmt.Sprintf("claim %s/%s to be %s", ns, name, phase), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, err
		}
		return c.Status.Phase == phase, nil
	})
	return &c
}

// waitStamped waits until the core asked a driver for the claim's addresses (the provisioner
// and resolved-class annotations).
func waitStamped(t *testing.T, ns, name string) *ipamv1.IPAddressClaim {
	t.Helper()
	var c ipamv1.IPAddressClaim
	eventually(t, fmt.Sprintf("claim %s/%s to be stamped", ns, name), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, err
		}
		return c.Annotations[ipamv1.AnnotationProvisioner] != "" && c.Annotations[ipamv1.AnnotationResolvedClass] != "", nil
	})
	return &c
}

func waitClaimReason(t *testing.T, ns, name, reason string) *ipamv1.IPAddressClaim {
	t.Helper()
	var c ipamv1.IPAddressClaim
	eventually(t, fmt.Sprintf("claim %s/%s to report %s", ns, name, reason), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, err
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == ipamv1.ConditionBound && cond.Reason == reason {
				return cond.ObservedGeneration == c.Generation, nil
			}
		}
		return false, nil
	})
	return &c
}

func waitAddressPhase(t *testing.T, name string, phase ipamv1.AddressPhase) *ipamv1.IPAddress {
	t.Helper()
	var a ipamv1.IPAddress
	eventually(t, fmt.Sprintf("address %s to be %s", name, phase), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &a); err != nil {
			return false, err
		}
		return a.Status.Phase == phase, nil
	})
	return &a
}

func waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s to be deleted", obj, obj.GetName()), func() (bool, error) {
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func del(t *testing.T, obj client.Object) {
	t.Helper()
	if err := admin.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// events returns the events (events.k8s.io) about the named object with the given reason.
func eventsFor(t *testing.T, namespace, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && (reason == "" || e.Reason == reason) {
			out = append(out, e)
		}
	}
	return out
}

func waitEvent(t *testing.T, namespace, name, reason string) eventsv1.Event {
	t.Helper()
	var found []eventsv1.Event
	eventually(t, fmt.Sprintf("event %s on %s", reason, name), func() (bool, error) {
		found = eventsFor(t, namespace, name, reason)
		return len(found) > 0, nil
	})
	return found[0]
}

// auditedWrites lists the writes user made since `since` ("VERB URI"), skipping
// leader-election leases (auditedRecords, in budget_test.go, reads the log).
func auditedWrites(t *testing.T, user string, since time.Time) []string {
	t.Helper()
	var out []string
	for _, r := range auditedRecords(t, user, since) {
		out = append(out, r.Verb+" "+r.URI)
	}
	return out
}
