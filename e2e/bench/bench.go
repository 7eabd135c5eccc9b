// Package bench is the scale benchmark of reserving and attaching addresses through this
// project against letting MetalLB assign directly, on the sandbox's real control plane with the
// real MetalLB controller (make bench-e2e; docs/benchmarks.md).
//
// One run, one process: a phase creates N objects with one client at one concurrency and rate
// and waits until each is done. Before every phase but the first, a plain batch of N Services
// is measured at the same population of Services (then deleted again), because MetalLB's cost
// per Service grows with the Services it tracks; the attach phase's baseline pins one free IP
// per Service, as the driver pins. Each phase runs Rounds times, each round after its own
// baseline and deleted before the next, and the report gives each ratio's median over the
// rounds with its spread. Each step records the apiserver's audit log of writes, the
// controllers' reconcile and workqueue metrics, MetalLB's reconciles from its log, and CPU and
// memory of every process.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// The phases, in the order they run.
const (
	PhasePlain  = "plain"
	PhaseClaims = "claims"
	PhaseAttach = "attach"
)

// AllPhases is the default -phases.
var AllPhases = []string{PhasePlain, PhaseClaims, PhaseAttach}

// What the benchmark creates. The pools are in 198.18.0.0/15 (the benchmarking range), each
// with room for 32,768 addresses.
const (
	Namespace     = "bench"
	PlainPool     = "bench-plain"
	PlainRange    = "198.18.0.0/17"
	ReservedPool  = "bench-reserved"
	ReservedRange = "198.19.0.0/17"
	Class         = "bench"
	provisioner   = "metallb.drivers.local.sdn.cozystack.io"
	poolAnno      = "metallb.io/address-pool"
	pinAnno       = "metallb.io/loadBalancerIPs"
)

// Config is one benchmark run.
type Config struct {
	// N objects per phase (and per baseline).
	N int
	// Phases to run, a subset of AllPhases in that order; attach needs claims.
	Phases []string
	// Rounds is how many times each phase runs, each round after its own baseline (1 when
	// zero). Every round but a phase's last is deleted before the next step, so that every
	// round of a phase and of its baseline starts at the same population. With Fresh, each
	// round runs on control planes of its own.
	Rounds int
	// AttachBaseline says what the attach phase's baseline Services ask MetalLB for:
	// AttachBaselinePinned (the default), AttachBaselinePool or AttachBaselineBoth.
	AttachBaseline string
	// Concurrency is the number of goroutines creating objects; Rate caps creates per second
	// (both the same in every phase).
	Concurrency int
	Rate        float64
	// PhaseTimeout bounds each step; zero picks 2 minutes plus half a second per object.
	PhaseTimeout time.Duration
	// SettleTimeout bounds the wait for a quiet cluster before and after each step; zero means
	// PhaseTimeout. A step that timed out leaves MetalLB busy for about as long again: a shorter
	// limit then gets the report sooner, with the writes counted so far.
	SettleTimeout time.Duration
	// Progress is the interval of progress lines.
	Progress time.Duration
	// Dir keeps the control plane's state (logs, audit log) there; a temporary directory,
	// removed at the end, when empty.
	Dir string
	// Log receives progress lines.
	Log io.Writer
	// ControllerArgs are extra flags for both controllers (DefaultControllerArgs from the command).
	ControllerArgs []string
	// Fresh runs the plain phase and the claims phase (with attach after it) each on a control
	// plane of its own, started empty, and measures no baselines: nothing the benchmark created
	// is ever deleted. Both phases then start at the same population, so the plain phase is the
	// claims phase's baseline; attach is compared with the plain phase only. Rounds alternate
	// the two control planes: plain, claims, plain, claims, each one new. At 10,000 objects
	// this is the only way through: deleting a batch of assigned Services makes MetalLB pass over
	// every Service it tracks, again and again while deletions race with the pass
	// (docs/benchmarks.md).
	Fresh bool
	// ProfileDir, when set, turns on kube-apiserver's profiling and writes a CPU profile of it
	// for each step there (profile.go).
	ProfileDir string
	// ProfileSeconds is each profile's length (DefaultProfileSeconds when zero).
	ProfileSeconds int
	// MetalLBVersion is the MetalLB build the sandbox runs: a pinned version or one with
	// binaries.PatchedSuffix; binaries.MetalLBVersion ($METALLB_VERSION) when empty.
	MetalLBVersion string
}

// DefaultControllerArgs give leader election room: a benchmark loads the apiserver until it
// answers some requests after seconds (504s), and with Kubernetes' default 10 s renew deadline
// both controllers lost their Lease and restarted in the middle of a 1,000-object run. The
// benchmark measures the controllers' work, not a restart; the operating guide says how to set
// the same flags on a cluster whose apiserver stalls.
var DefaultControllerArgs = []string{"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s"}

func (c *Config) validate() error {
	if c.N < 1 {
		return fmt.Errorf("-n must be at least 1")
	}
	if c.N > 16000 {
		return fmt.Errorf("-n %d is more than the benchmark's pools hold (16,000 per phase)", c.N)
	}
	if len(c.Phases) == 0 {
		c.Phases = AllPhases
	}
	var ordered []string
	for _, p := range AllPhases {
		if slices.Contains(c.Phases, p) {
			ordered = append(ordered, p)
		}
	}
	for _, p := range c.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(AllPhases, ","))
		}
	}
	if slices.Contains(ordered, PhaseAttach) && !slices.Contains(ordered, PhaseClaims) {
		return fmt.Errorf("the attach phase needs the claims phase (it attaches those claims)")
	}
	c.Phases = ordered
	if c.Rounds < 1 {
		c.Rounds = 1
	}
	if c.Rounds > 20 {
		return fmt.Errorf("-rounds %d: at most 20", c.Rounds)
	}
	if c.AttachBaseline == "" {
		c.AttachBaseline = AttachBaselinePinned
	}
	if !slices.Contains(AttachBaselines, c.AttachBaseline) {
		return fmt.Errorf("unknown attach baseline %q (%s)", c.AttachBaseline, strings.Join(AttachBaselines, ", "))
	}
	if c.Concurrency < 1 {
		c.Concurrency = 1
	}
	if c.PhaseTimeout == 0 {
		c.PhaseTimeout = 2*time.Minute + time.Duration(c.N)*500*time.Millisecond
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = c.PhaseTimeout
	}
	if c.Progress <= 0 {
		c.Progress = 5 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.MetalLBVersion == "" {
		c.MetalLBVersion = binaries.MetalLBVersion
	}
	return nil
}

// Run starts a sandbox (with Fresh, one per group of phases and round), runs the phases and
// returns the report. The report is returned, as far as it got, with an error too.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !binaries.MetalLBAt(cfg.MetalLBVersion).Built() {
		return nil, fmt.Errorf("MetalLB %s is not built: run `go run ./tools/cmd/binaries build metallb@%s` first", cfg.MetalLBVersion, cfg.MetalLBVersion)
	}
	rep := newReport(cfg)
	rep.PeakRSSMiB = map[string]float64{}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	runs := []groupRun{{phases: cfg.Phases}}
	if cfg.Fresh {
		runs = freshRuns(phaseGroups(cfg.Phases, true), cfg.Rounds)
	}
	var problems []string
	for _, run := range runs {
		var steps []plannedStep
		dir := cfg.Dir
		if cfg.Fresh {
			// A control plane of its own for this round: one step per phase, all kept.
			steps = schedule(run.phases, 1, false, cfg.AttachBaseline)
			for i := range steps {
				steps[i].round = run.round
			}
			if len(runs) > 1 && dir != "" {
				dir = filepath.Join(dir, stepLabel(run.phases[0], run.round, cfg.Rounds))
			}
		} else {
			steps = schedule(run.phases, cfg.Rounds, true, cfg.AttachBaseline)
		}
		p, err := runGroup(ctx, cfg, run.phases, steps, dir, rep, logf)
		problems = append(problems, p...)
		if err != nil {
			// What an earlier control plane's check found stays in the report.
			rep.Headline = Headline(rep.Steps)
			rep.Check = CheckResult{Problems: problems}
			return rep, err
		}
	}
	rep.Headline = Headline(rep.Steps)
	if len(runs) > 1 {
		rep.StateDir = cfg.Dir
	}
	rep.Check = CheckResult{OK: len(problems) == 0, Problems: problems}
	if len(problems) > 0 {
		return rep, fmt.Errorf("correctness check failed: %d problems, first: %s", len(problems), problems[0])
	}
	return rep, nil
}

// phaseGroups splits the phases into the groups that share a control plane: all of them, or
// with fresh the plain phase alone and claims with attach (attach attaches those claims).
func phaseGroups(phases []string, fresh bool) [][]string {
	if !fresh {
		return [][]string{phases}
	}
	var out [][]string
	var claims []string
	for _, p := range phases {
		if p == PhasePlain {
			out = append(out, []string{p})
		} else {
			claims = append(claims, p)
		}
	}
	if len(claims) > 0 {
		out = append(out, claims)
	}
	return out
}

// runGroup runs the steps of phases on a sandbox of their own and checks every Service's
// addresses at the end; it returns the check's problems.
func runGroup(ctx context.Context, cfg Config, phases []string, steps []plannedStep, dir string, rep *Report, logf func(string, ...any)) ([]string, error) {
	logf("starting the sandbox (control plane, MetalLB, both controllers) for %s", strings.Join(phases, ", "))
	cpOpts := controlplane.Options{Dir: dir, MetalLBVersion: cfg.MetalLBVersion}
	if cfg.ProfileDir != "" {
		cpOpts.ExtraAPIServerArgs = profilingArgs
	}
	s, err := sandbox.Start(ctx, sandbox.Options{Logf: logf, ControlPlane: cpOpts, ControllerArgs: cfg.ControllerArgs})
	if err != nil {
		return nil, err
	}
	defer func() {
		logf("stopping the sandbox")
		if err := s.Stop(); err != nil {
			logf("stopping: %v", err)
		}
	}()
	r, err := newRunner(ctx, cfg, s, logf)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	rep.StateDir = s.Dir
	if err := r.setup(ctx); err != nil {
		return nil, fmt.Errorf("setting up pools and class: %w", err)
	}
	runErr := r.runSteps(ctx, rep, steps)
	rep.recordPeaks(r)
	if runErr != nil {
		return nil, runErr
	}
	logf("checking every Service's addresses")
	return r.check(ctx)
}

type runner struct {
	cfg     Config
	s       *sandbox.Sandbox
	logf    func(string, ...any)
	cl      client.Client
	cache   cache.Cache
	cancel  context.CancelFunc
	limiter *rate.Limiter
	tracker tracker
	// procs are the processes measured, by name.
	procs map[string]*controlplane.Process
	// kept maps each phase whose last round has run to its objects' name prefix: they stay
	// in the cluster, and the final check reads them.
	kept map[string]string
	// claimIPs are the kept claims' addresses once the claims phase is done.
	claimIPs map[string][]string

	mu    sync.Mutex
	peaks map[string]int64 // peak RSS during the current step
}

// measured are the processes whose CPU and memory each step records.
var measured = []string{"address-controller", "metallb-iad", "metallb-controller", "kube-apiserver", "etcd", "kube-controller-manager"}

// controllers are the project's processes with controller-runtime metrics.
var controllers = []string{"address-controller", "metallb-iad"}

// metallbController is MetalLB's controller process.
const metallbController = "metallb-controller"

// scrapeMetalLB reads MetalLB's controller-runtime metrics where it serves them (v0.16 and
// later, over HTTPS with a ServiceAccount token, as Prometheus would); nil before.
func (r *runner) scrapeMetalLB(ctx context.Context) (Metrics, error) {
	ep := r.s.MetalLBMetrics
	if ep == nil || !strings.HasPrefix(ep.URL, "https:") {
		return nil, nil
	}
	body, err := ep.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(bytes.NewReader(body), metricPrefixes...)
}

func newRunner(ctx context.Context, cfg Config, s *sandbox.Sandbox, logf func(string, ...any)) (*runner, error) {
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	// One client creates every object in every phase; its own rate limiter is out of the way
	// so that the benchmark's (Rate, Concurrency) is what paces the creates.
	rc := *s.Config
	rc.QPS, rc.Burst = 10000, 10000
	rc.UserAgent = "bench-e2e"
	cl, err := client.New(&rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	// Progress is watched through a cache of the benchmark's namespace (a separate
	// connection: watching does not compete with creating).
	watchCfg := *s.Config
	c, err := cache.New(&watchCfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{Namespace: {}}})
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, s: s, logf: logf, cl: cl, cache: c, procs: map[string]*controlplane.Process{}, kept: map[string]string{}}
	limit := rate.Limit(cfg.Rate)
	if cfg.Rate <= 0 {
		limit = rate.Inf
	}
	r.limiter = rate.NewLimiter(limit, max(1, cfg.Concurrency))
	for _, p := range s.Processes() {
		r.procs[p.Spec.Name] = p
	}
	for _, name := range append([]string{"metallb-controller"}, controllers...) {
		if r.procs[name] == nil {
			return nil, fmt.Errorf("the sandbox runs no %s process", name)
		}
	}
	for _, obj := range []client.Object{&corev1.Service{}, &ipamv1.IPAddressClaim{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.tracker.observe(o) },
			UpdateFunc: func(_, o any) { r.tracker.observe(o) },
		}); err != nil {
			return nil, err
		}
	}
	cctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, errors.New("the benchmark's cache did not sync")
	}
	go r.sampleRSS(cctx)
	return r, nil
}

func (r *runner) stop() { r.cancel() }

// setup creates the benchmark's namespace (labelled as a tenant's, so the admission policy
// runs on every Service write as it would on Cozystack), two autoAssign: false pools with
// their advertisement, and a class of the driver, and waits until the driver accepts it.
func (r *runner) setup(ctx context.Context) error {
	if err := r.s.EnsureNamespace(ctx, Namespace, map[string]string{sandbox.TenantLabel: "bench.example.org"}); err != nil {
		return err
	}
	for name, cidr := range map[string]string{PlainPool: PlainRange, ReservedPool: ReservedRange} {
		pool := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": name, "namespace": r.s.MetalLBNamespace},
			"spec":     map[string]any{"addresses": []any{cidr}, "autoAssign": false},
		}}
		if err := r.cl.Create(ctx, pool); err != nil {
			return err
		}
	}
	adv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "bench", "namespace": r.s.MetalLBNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{PlainPool, ReservedPool}},
	}}
	if err := r.cl.Create(ctx, adv); err != nil {
		return err
	}
	cls := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: Class},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: provisioner, ReclaimPolicy: ipamv1.ReclaimPolicy("Delete"),
			Parameters: map[string]string{"pool": ReservedPool}}}
	if err := r.cl.Create(ctx, cls); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var got ipamv1.IPAddressClass
		if err := r.cl.Get(ctx, client.ObjectKey{Name: Class}, &got); err != nil {
			return err
		}
		if meta.IsStatusConditionTrue(got.Status.Conditions, ipamv1.ConditionAccepted) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("class %s not accepted by the driver within a minute: %+v", Class, got.Status.Conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Let MetalLB take in the pools before anything is timed.
	_, _ = r.settle(ctx, 30*time.Second)
	return nil
}

// runSteps runs the steps in order; after each step whose objects are not kept, it deletes
// them and waits until they are gone, so that the next step starts at the population this
// one did.
func (r *runner) runSteps(ctx context.Context, rep *Report, steps []plannedStep) error {
	for _, ps := range steps {
		prefix := objectPrefix(ps, r.cfg.Rounds)
		step, err := r.runStep(ctx, ps, prefix)
		rep.add(step)
		if err != nil {
			return err
		}
		if ps.keep {
			r.kept[ps.name] = prefix
			continue
		}
		if err := r.remove(ctx, ps, prefix, step.PopulationAtStart); err != nil {
			return fmt.Errorf("%s: deleting its objects: %w", stepLabel(ps.name, ps.round, r.cfg.Rounds), err)
		}
	}
	return nil
}

// runStep measures one step: what it creates and when an object of it is done.
func (r *runner) runStep(ctx context.Context, ps plannedStep, prefix string) (*Step, error) {
	spec := stepSpec{plannedStep: ps, label: stepLabel(ps.name, ps.round, r.cfg.Rounds), prefix: prefix, n: r.cfg.N}
	switch {
	case ps.pinned:
		// The IPs are picked once the cluster is quiet, when every deleted Service's IP is free
		// in MetalLB too.
		var ips []string
		spec.prepare = func(ctx context.Context) error {
			var err error
			ips, err = r.freePlainIPs(ctx, spec.n)
			return err
		}
		spec.create = func(ctx context.Context, j int) error {
			return r.cl.Create(ctx, pinnedService(objectName(prefix, j), ips[j]))
		}
		spec.done = showsPin
	case ps.kind == PhasePlain:
		spec.create = func(ctx context.Context, j int) error {
			return r.cl.Create(ctx, plainService(objectName(prefix, j)))
		}
		spec.done = hasIngress
	case ps.kind == PhaseClaims:
		spec.create = func(ctx context.Context, j int) error {
			return r.cl.Create(ctx, newClaim(objectName(prefix, j)))
		}
		spec.done = claimBound
	case ps.kind == PhaseAttach:
		claims, ok := r.kept[PhaseClaims]
		if !ok {
			return nil, fmt.Errorf("%s: no claims to attach", spec.label)
		}
		spec.create = func(ctx context.Context, j int) error {
			return r.cl.Create(ctx, attachService(objectName(prefix, j), objectName(claims, j)))
		}
		spec.done = r.showsClaimIPs
	default:
		return nil, fmt.Errorf("unknown step %q", ps.name)
	}
	step, err := r.measure(ctx, spec)
	if err == nil && ps.kind == PhaseClaims && ps.keep {
		err = r.recordClaims(ctx, prefix)
	}
	return step, err
}

// freePlainIPs picks n IPs of the plain pool that no Service shows or pins.
func (r *runner) freePlainIPs(ctx context.Context, n int) ([]string, error) {
	l, err := r.s.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used := map[netip.Addr]bool{}
	for i := range l.Items {
		svc := &l.Items[i]
		for _, ip := range append(ingressIPs(svc), strings.Split(svc.Annotations[pinAnno], ",")...) {
			if a, err := netip.ParseAddr(strings.TrimSpace(ip)); err == nil {
				used[a] = true
			}
		}
	}
	ips := freeIPs(netip.MustParsePrefix(PlainRange), used, n)
	if len(ips) < n {
		return nil, fmt.Errorf("the plain pool has %d free IPs, %d wanted", len(ips), n)
	}
	return ips, nil
}

// remove deletes a step's objects and waits until the cluster is back at the population the
// step began with: for claims, until their addresses and placeholders are gone too; for attach
// Services, until each kept claim's address is held by the driver again.
func (r *runner) remove(ctx context.Context, ps plannedStep, prefix string, population int) error {
	label := stepLabel(ps.name, ps.round, r.cfg.Rounds)
	n := r.cfg.N
	switch ps.kind {
	case PhaseClaims:
		return r.deleteClaims(ctx, label, prefix, n, population)
	case PhaseAttach:
		if err := r.deleteServices(ctx, label, prefix, n); err != nil {
			return err
		}
		return r.waitHeld(ctx, label)
	}
	return r.deleteServices(ctx, label, prefix, n)
}

func lbService(name string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			// The default NodePort range holds 2,768 ports: every Service here goes without.
			AllocateLoadBalancerNodePorts: new(false),
		},
	}
}

// plainService is what a cluster without this project does: a Service asking MetalLB for an
// address from an autoAssign: false pool.
func plainService(name string) *corev1.Service {
	return lbService(name, map[string]string{poolAnno: PlainPool})
}

// pinnedService asks MetalLB for one given IP the way the driver pins an attached Service to
// its claim's: metallb.io/loadBalancerIPs alone, no pool.
func pinnedService(name, ip string) *corev1.Service {
	return lbService(name, map[string]string{pinAnno: ip})
}

// attachService names a claim.
func attachService(name, claim string) *corev1.Service {
	return lbService(name, map[string]string{ipamv1.AnnotationServiceClaim: claim})
}

func newClaim(name string) *ipamv1.IPAddressClaim {
	return &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: Class, Family: ipamv1.IPv4}}
}

func ingressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out = append(out, in.IP)
		}
	}
	return out
}

func hasIngress(o client.Object) bool {
	svc, ok := o.(*corev1.Service)
	return ok && len(ingressIPs(svc)) > 0
}

// showsPin: a pinned Service is done when it shows exactly the IPs it pins.
func showsPin(o client.Object) bool {
	svc, ok := o.(*corev1.Service)
	if !ok || svc.Annotations[pinAnno] == "" {
		return false
	}
	return sameSet(ingressIPs(svc), strings.Split(svc.Annotations[pinAnno], ","))
}

func claimBound(o client.Object) bool {
	c, ok := o.(*ipamv1.IPAddressClaim)
	return ok && c.Status.Phase == ipamv1.ClaimBound
}

func claimAddresses(c *ipamv1.IPAddressClaim) []string {
	var out []string
	for _, a := range c.Status.Addresses {
		out = append(out, a.Address)
	}
	return out
}

// showsClaimIPs: an attach Service is done when it shows exactly its claim's addresses.
func (r *runner) showsClaimIPs(o client.Object) bool {
	svc, ok := o.(*corev1.Service)
	if !ok {
		return false
	}
	want := r.claimIPs[svc.Annotations[ipamv1.AnnotationServiceClaim]]
	return len(want) > 0 && sameSet(ingressIPs(svc), want)
}

// recordClaims remembers the addresses of the claims named with prefix (read uncached) for the
// attach phase and the final check.
func (r *runner) recordClaims(ctx context.Context, prefix string) error {
	ips, err := r.claimAddressesOf(ctx, prefix)
	if err != nil {
		return err
	}
	r.claimIPs = ips
	return nil
}

// claimAddressesOf reads the addresses of the claims named with prefix, by claim name.
func (r *runner) claimAddressesOf(ctx context.Context, prefix string) (map[string][]string, error) {
	var list ipamv1.IPAddressClaimList
	if err := r.cl.List(ctx, &list, client.InNamespace(Namespace)); err != nil {
		return nil, err
	}
	ips := map[string][]string{}
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, prefix) {
			ips[list.Items[i].Name] = claimAddresses(&list.Items[i])
		}
	}
	return ips, nil
}

// stepSpec is what measure needs of a step.
type stepSpec struct {
	plannedStep
	// label names the step in logs and profiles (stepLabel); prefix its objects.
	label, prefix string
	n             int
	// prepare, when set, runs once the cluster is quiet, before the step is timed.
	prepare func(context.Context) error
	// create creates the j-th object; done says whether an object is done.
	create func(context.Context, int) error
	done   func(client.Object) bool
}

// measure runs one step: n creates through the shared client, until done holds for each
// object (or the phase timeout), then waits for the controllers and MetalLB to go quiet, and
// reads what happened in between.
func (r *runner) measure(ctx context.Context, spec stepSpec) (*Step, error) {
	name, kind, prefix, n, create, done := spec.label, spec.kind, spec.prefix, spec.n, spec.create, spec.done
	step := &Step{Name: spec.name, Kind: kind, Round: spec.round, N: n}
	// Start from a quiet cluster: a Service deletion (a baseline's clean-up) makes MetalLB
	// rewrite the status of every Service it tracks, pass after pass while deletions race with
	// it, and such a pass must not run into the next step's timing.
	quietFor, quiet := r.settle(ctx, r.cfg.SettleTimeout)
	step.QuietAtStart = quiet
	if !quiet {
		r.logf("%s: the controllers and MetalLB were still busy after %s; starting anyway", name, quietFor.Round(time.Second))
	}
	var err error
	if step.PopulationAtStart, err = r.countServices(ctx); err != nil {
		return step, err
	}
	if spec.prepare != nil {
		if err := spec.prepare(ctx); err != nil {
			return step, fmt.Errorf("%s: %w", name, err)
		}
	}
	before := r.snapshot(ctx)
	r.resetPeaks()
	isClaim := kind == PhaseClaims
	tr := r.tracker.begin(prefix, isClaim, n, done)
	// Objects that already exist (none should) are evaluated once before timing starts.
	r.replay(ctx, isClaim)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PhaseTimeout)
	defer cancel()
	stopProgress := r.progress(ctx, name, kind, tr, n)
	if r.cfg.ProfileDir != "" {
		waitProfile := r.profileAPIServer(ctx, name, tr, n)
		defer waitProfile()
	}
	// Each object's create is timed from the moment its first attempt is sent (a retried
	// create keeps that moment), so its latency includes the apiserver's time to create it.
	// Each j is created by one goroutine, and createAll returns after they have all ended.
	sent := make([]time.Time, n)
	timedCreate := func(ctx context.Context, j int) error {
		if sent[j].IsZero() {
			sent[j] = time.Now()
		}
		return create(ctx, j)
	}
	start := time.Now()
	step.started = start
	tr.setStart(start)
	createDur, createErr := r.createAll(ctx, n, timedCreate)
	step.CreateSeconds = createDur.Seconds()
	if createErr != nil {
		stopProgress()
		r.tracker.end()
		return step, fmt.Errorf("%s: creating: %w", name, createErr)
	}
	select {
	case <-tr.allDone:
	case <-ctx.Done():
	}
	stopProgress()
	doneAt := r.tracker.end()
	times := sortedTimes(doneAt)
	step.Done = len(times)
	step.Series = series(start, times)
	step.Latency = latencyOf(createToDone(prefix, sent, doneAt))
	if len(times) == n {
		step.Seconds = times[len(times)-1].Sub(start).Seconds()
	} else {
		step.TimedOut = true
		step.Seconds = time.Since(start).Seconds()
	}
	if step.Seconds > 0 {
		step.PerSecond = float64(step.Done) / step.Seconds
	}
	r.logf("%s: %d/%d done in %.1fs (%.1f/s); waiting for the controllers and MetalLB to go quiet", name, step.Done, n, step.Seconds, step.PerSecond)
	settleDur, settled := r.settle(context.WithoutCancel(ctx), r.cfg.SettleTimeout)
	step.SettleSeconds, step.Settled = settleDur.Seconds(), settled
	after := r.snapshot(context.WithoutCancel(ctx))
	if err := r.account(step, before, after); err != nil {
		return step, err
	}
	if step.TimedOut {
		return step, fmt.Errorf("%s: only %d of %d objects done within %s", name, step.Done, n, r.cfg.PhaseTimeout)
	}
	return step, nil
}

// replay feeds objects the cache already holds to the tracker.
func (r *runner) replay(ctx context.Context, isClaim bool) {
	if isClaim {
		var l ipamv1.IPAddressClaimList
		if r.cache.List(ctx, &l) == nil {
			for i := range l.Items {
				r.tracker.observe(&l.Items[i])
			}
		}
		return
	}
	var l corev1.ServiceList
	if r.cache.List(ctx, &l) == nil {
		for i := range l.Items {
			r.tracker.observe(&l.Items[i])
		}
	}
}

// createAll runs create for 0..n-1 on Concurrency goroutines, each create waiting on the
// shared rate limiter; transient errors are retried a few times.
func (r *runner) createAll(ctx context.Context, n int, create func(context.Context, int) error) (time.Duration, error) {
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if err := r.limiter.Wait(ctx); err != nil {
					errs <- err
					return
				}
				if err := retry(ctx, func() error { return create(ctx, j) }); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var firstErr error
feed:
	for j := range n {
		select {
		case next <- j:
		case firstErr = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if firstErr == nil {
		firstErr = <-errs
	}
	return time.Since(start), firstErr
}

// retry retries transient apiserver errors; AlreadyExists (a retried create that had gone
// through) and NotFound (a retried delete) count as done.
func retry(ctx context.Context, f func() error) error {
	var err error
	for attempt := range 6 {
		err = f()
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
			return nil
		}
		if !(apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsConflict(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
	return err
}

// deleteServices deletes a step's Services (same client and pacing) and waits until they are
// gone, so that the next step starts at the population this one had.
func (r *runner) deleteServices(ctx context.Context, label, prefix string, n int) error {
	r.logf("%s: deleting its %d Services", label, n)
	if _, err := r.createAll(ctx, n, func(ctx context.Context, j int) error {
		return r.cl.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: objectName(prefix, j)}})
	}); err != nil {
		return err
	}
	return r.waitUntil(ctx, func(ctx context.Context) (string, error) {
		var l corev1.ServiceList
		if err := r.cache.List(ctx, &l); err != nil {
			return "", err
		}
		if left := countPrefixed(l.Items, prefix); left > 0 {
			return fmt.Sprintf("%d Services still there", left), nil
		}
		return "", nil
	}) // the next step waits until everything is quiet
}

// deleteClaims deletes a claims round's claims and waits until they are gone, with their
// addresses and the driver's Services for them (the population is back to what it was before
// the round), so that the next round starts where this one did.
func (r *runner) deleteClaims(ctx context.Context, label, prefix string, n, population int) error {
	byClaim, err := r.claimAddressesOf(ctx, prefix)
	if err != nil {
		return err
	}
	ips := map[string]bool{}
	for _, list := range byClaim {
		for _, ip := range list {
			ips[ip] = true
		}
	}
	r.logf("%s: deleting its %d claims", label, n)
	if _, err := r.createAll(ctx, n, func(ctx context.Context, j int) error {
		return r.cl.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: objectName(prefix, j)}})
	}); err != nil {
		return err
	}
	return r.waitUntil(ctx, func(ctx context.Context) (string, error) {
		var claims ipamv1.IPAddressClaimList
		if err := r.cache.List(ctx, &claims); err != nil {
			return "", err
		}
		if left := countPrefixed(claims.Items, prefix); left > 0 {
			return fmt.Sprintf("%d claims still there", left), nil
		}
		var addrs ipamv1.IPAddressList
		if err := r.cl.List(ctx, &addrs); err != nil {
			return "", err
		}
		left := 0
		for i := range addrs.Items {
			if ips[addrs.Items[i].Spec.Address] {
				left++
			}
		}
		if left > 0 {
			return fmt.Sprintf("%d of their %d addresses still there", left, len(ips)), nil
		}
		pop, err := r.countServices(ctx)
		if err != nil {
			return "", err
		}
		if pop > population {
			return fmt.Sprintf("%d Services in the cluster, %d before the round", pop, population), nil
		}
		return "", nil
	})
}

// waitHeld waits until every kept claim's address is held by the driver's placeholder again
// (attached to nothing, Held for the reason Held), as it was before an attach round.
func (r *runner) waitHeld(ctx context.Context, label string) error {
	ips := map[string]bool{}
	for _, list := range r.claimIPs {
		for _, ip := range list {
			ips[ip] = true
		}
	}
	r.logf("%s: waiting until the driver holds the claims' %d addresses again", label, len(ips))
	return r.waitUntil(ctx, func(ctx context.Context) (string, error) {
		var addrs ipamv1.IPAddressList
		if err := r.cl.List(ctx, &addrs); err != nil {
			return "", err
		}
		held := 0
		for i := range addrs.Items {
			a := &addrs.Items[i]
			c := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld)
			if ips[a.Spec.Address] && a.Status.AttachedTo == nil && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reasonHeld {
				held++
			}
		}
		if held < len(ips) {
			return fmt.Sprintf("%d of %d addresses held", held, len(ips)), nil
		}
		return "", nil
	})
}

// reasonHeld is the reason of the driver's Held condition when its placeholder holds the IP.
const reasonHeld = "Held"

// waitUntil polls left every half second until it reports nothing left, for at most the
// phase timeout; the error then says what was left.
func (r *runner) waitUntil(ctx context.Context, left func(context.Context) (string, error)) error {
	deadline := time.Now().Add(r.cfg.PhaseTimeout)
	for {
		what, err := left(ctx)
		if err != nil {
			return err
		}
		if what == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, %s", r.cfg.PhaseTimeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// countPrefixed counts the objects whose name starts with prefix.
func countPrefixed[T any, PT interface {
	*T
	GetName() string
}](items []T, prefix string) int {
	n := 0
	for i := range items {
		if strings.HasPrefix(PT(&items[i]).GetName(), prefix) {
			n++
		}
	}
	return n
}

// countServices counts the Services in the cluster (every namespace): the population MetalLB
// tracks.
func (r *runner) countServices(ctx context.Context) (int, error) {
	l, err := r.s.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// progress prints a line every Progress until stopped.
func (r *runner) progress(ctx context.Context, name, kind string, tr *stepTrack, n int) (stop func()) {
	word := map[string]string{PhasePlain: "with an IP", PhaseClaims: "Bound", PhaseAttach: "showing their claim's IP"}[kind]
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.cfg.Progress)
		defer t.Stop()
		last, lastAt := 0, time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				got := tr.count()
				r.logf("%s: %d/%d %s, %.1f/s", name, got, n, word, float64(got-last)/now.Sub(lastAt).Seconds())
				last, lastAt = got, now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// settle waits (up to limit) until the project's controllers have empty workqueues and
// reconcile nothing more and MetalLB logs nothing more, for three seconds in a row.
func (r *runner) settle(ctx context.Context, limit time.Duration) (time.Duration, bool) {
	const quiet = 3 * time.Second
	start := time.Now()
	var last string
	stableSince := time.Now()
	for time.Since(start) < limit {
		var b strings.Builder
		busy := false
		for _, name := range controllers {
			m, err := Scrape(ctx, r.s.Endpoints[name+"/metrics"])
			if err != nil {
				busy = true
				continue
			}
			if queueDepth(m) > 0 {
				busy = true
			}
			fmt.Fprintf(&b, "%s=%v;", name, reconcileCount(m))
		}
		fmt.Fprintf(&b, "metallb=%d", fileSize(r.procs["metallb-controller"].LogPath))
		sig := b.String()
		if busy || sig != last {
			last, stableSince = sig, time.Now()
		} else if time.Since(stableSince) >= quiet {
			return time.Since(start), true
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-time.After(500 * time.Millisecond):
		}
	}
	return time.Since(start), false
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// snapshot is the state of every counter at one moment.
type snapshot struct {
	at         time.Time
	auditOff   int64
	metallbOff int64
	metrics    map[string]Metrics
	procs      map[string]ProcStat
}

func (r *runner) snapshot(ctx context.Context) snapshot {
	s := snapshot{at: time.Now(), metrics: map[string]Metrics{}, procs: map[string]ProcStat{}}
	s.auditOff = fileSize(r.s.AuditLog)
	s.metallbOff = fileSize(r.procs["metallb-controller"].LogPath)
	for _, name := range controllers {
		if m, err := Scrape(ctx, r.s.Endpoints[name+"/metrics"]); err == nil {
			s.metrics[name] = m
		} else {
			r.logf("scraping %s: %v", name, err)
		}
	}
	if m, err := r.scrapeMetalLB(ctx); err == nil && m != nil {
		s.metrics[metallbController] = m
	} else if err != nil {
		r.logf("scraping %s: %v", metallbController, err)
	}
	for _, name := range measured {
		if p := r.procs[name]; p != nil {
			if st, err := ReadProc(p.Pid()); err == nil {
				s.procs[name] = st
			}
		}
	}
	return s
}

// account fills a step's figures from the snapshots around it.
func (r *runner) account(step *Step, before, after snapshot) error {
	window := after.at.Sub(before.at)
	step.WindowSeconds = window.Seconds()
	writes, err := ReadWrites(r.s.AuditLog, before.auditOff, after.auditOff)
	if err != nil {
		return fmt.Errorf("reading the audit log: %w", err)
	}
	phaseStart := step.started
	phaseEnd := phaseStart.Add(time.Duration(step.Seconds * float64(time.Second)))
	step.Writes = SummarizeWrites(writes, window, phaseStart, phaseEnd)
	step.MetalLBStatus = MetalLBStatusWrites(writes, phaseStart, phaseEnd)
	step.ProjectWritesPerObject = float64(step.Writes.Project) / float64(step.N)
	step.Controllers = map[string]map[string]ControllerStats{}
	step.RESTRequests = map[string]RESTStats{}
	for _, name := range controllers {
		a, b := after.metrics[name], before.metrics[name]
		if a == nil || b == nil {
			continue
		}
		d := Delta(b, a)
		step.Controllers[name] = ControllerStatsFrom(d, a, step.N)
		step.RESTRequests[name] = RESTStatsFrom(d, window)
		for _, c := range step.Controllers[name] {
			step.ProjectReconciles += c.Total
		}
	}
	step.ProjectReconcilesPerObject = step.ProjectReconciles / float64(step.N)
	// MetalLB's own controllers (from v0.16, whose metrics are served over HTTPS with a token):
	// reported beside the project's, never counted as the project's.
	if a, b := after.metrics[metallbController], before.metrics[metallbController]; a != nil && b != nil {
		d := Delta(b, a)
		step.Controllers[metallbController] = ControllerStatsFrom(d, a, step.N)
		step.RESTRequests[metallbController] = RESTStatsFrom(d, window)
	}
	step.MetalLB, err = ReadMetalLBWork(r.procs["metallb-controller"].LogPath, before.metallbOff, after.metallbOff)
	if err != nil {
		return fmt.Errorf("reading MetalLB's log: %w", err)
	}
	step.MetalLBWrites = step.Writes.ByIdentity[IdentityMetalLB].Total
	step.MetalLBRefusedEvents = refusedEventWrites(writes, IdentityMetalLB)
	step.Processes = map[string]ProcStep{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range measured {
		a, okA := after.procs[name]
		b, okB := before.procs[name]
		if !okA || !okB {
			continue
		}
		step.Processes[name] = ProcStep{
			CPUSeconds:  a.CPUSeconds - b.CPUSeconds,
			PeakRSSMiB:  mib(max(r.peaks[name], a.RSSBytes)),
			EverRSSMiB:  mib(a.PeakRSSBytes),
			CPUFraction: (a.CPUSeconds - b.CPUSeconds) / window.Seconds(),
		}
	}
	step.APIServerCPUPerObject = step.Processes["kube-apiserver"].CPUSeconds / float64(step.N)
	step.LoadAvg = loadAvg()
	return nil
}

// refusedEventWrites counts id's event writes answered 403 or 404.
func refusedEventWrites(writes []Write, id string) int {
	n := 0
	for _, w := range writes {
		if w.Identity == id && w.Resource == "events" && (w.Code == 403 || w.Code == 404) {
			n++
		}
	}
	return n
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// sampleRSS keeps the highest resident set of each process seen during the current step.
func (r *runner) sampleRSS(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range measured {
			p := r.procs[name]
			if p == nil {
				continue
			}
			st, err := ReadProc(p.Pid())
			if err != nil {
				continue
			}
			r.mu.Lock()
			if r.peaks == nil {
				r.peaks = map[string]int64{}
			}
			r.peaks[name] = max(r.peaks[name], st.RSSBytes)
			r.mu.Unlock()
		}
	}
}

func (r *runner) resetPeaks() {
	r.mu.Lock()
	r.peaks = map[string]int64{}
	r.mu.Unlock()
}

// check lists every Service of the cluster and every claim, and compares them with what the
// kept rounds of the phases that ran promise.
func (r *runner) check(ctx context.Context) ([]string, error) {
	svcs, err := r.s.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var got []ServiceIPs
	for i := range svcs.Items {
		s := &svcs.Items[i]
		got = append(got, ServiceIPs{Key: s.Namespace + "/" + s.Name, IPs: ingressIPs(s), SharingKey: s.Annotations["metallb.io/allow-shared-ip"]})
	}
	want := Expectations{Attached: map[string][]string{}, Claims: map[string][]string{}}
	plain, hasPlain := r.kept[PhasePlain]
	attach, hasAttach := r.kept[PhaseAttach]
	claims, hasClaims := r.kept[PhaseClaims]
	for j := range r.cfg.N {
		if hasPlain {
			want.Plain = append(want.Plain, Namespace+"/"+objectName(plain, j))
		}
		if hasAttach {
			want.Attached[Namespace+"/"+objectName(attach, j)] = r.claimIPs[objectName(claims, j)]
		}
	}
	if hasClaims {
		if err := r.recordClaims(ctx, claims); err != nil {
			return nil, err
		}
		for name, ips := range r.claimIPs {
			want.Claims[Namespace+"/"+name] = ips
		}
	}
	return Check(got, want), nil
}

// tracker records when each object of the running step is first seen done: the first event of
// the benchmark's watch (its cache, started and synced before any step's first create) in
// which done holds, timed as the event is handled.
type tracker struct {
	mu     sync.Mutex
	active *stepTrack
}

type stepTrack struct {
	prefix  string
	isClaim bool
	n       int
	done    func(client.Object) bool
	doneAt  map[string]time.Time
	start   time.Time
	allDone chan struct{}
	mu      *sync.Mutex
}

func (t *tracker) begin(prefix string, isClaim bool, n int, done func(client.Object) bool) *stepTrack {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active = &stepTrack{prefix: prefix, isClaim: isClaim, n: n, done: done,
		doneAt: map[string]time.Time{}, allDone: make(chan struct{}), mu: &t.mu}
	return t.active
}

func (st *stepTrack) setStart(at time.Time) {
	st.mu.Lock()
	st.start = at
	st.mu.Unlock()
}

func (st *stepTrack) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.doneAt)
}

// end stops the step and returns when each object was first seen done, by name.
func (t *tracker) end() map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[string]time.Time
	if t.active != nil {
		out = t.active.doneAt
	}
	t.active = nil
	return out
}

// sortedTimes are the completion times, earliest first.
func sortedTimes(doneAt map[string]time.Time) []time.Time {
	out := make([]time.Time, 0, len(doneAt))
	for _, at := range doneAt {
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func (t *tracker) observe(o any) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	_, isClaim := obj.(*ipamv1.IPAddressClaim)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.active
	if st == nil || st.isClaim != isClaim || obj.GetNamespace() != Namespace || !strings.HasPrefix(obj.GetName(), st.prefix) {
		return
	}
	if _, seen := st.doneAt[obj.GetName()]; seen || !st.done(obj) {
		return
	}
	st.doneAt[obj.GetName()] = now
	if len(st.doneAt) == st.n {
		close(st.allDone)
	}
}

// series turns completion times into (seconds since start, objects done) points.
func series(start time.Time, times []time.Time) []Point {
	out := make([]Point, 0, len(times)+1)
	out = append(out, Point{T: 0, Done: 0})
	for i, at := range times {
		out = append(out, Point{T: at.Sub(start).Seconds(), Done: i + 1})
	}
	return out
}

// machine describes where the run happened.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = float64(kb) / (1 << 20)
		}
	}
	return m
}

func versions(metallb string) map[string]string {
	return map[string]string{
		"kubernetes": binaries.KubernetesVersion,
		"etcd":       binaries.EtcdVersion,
		"metallb":    metallb,
		"go":         runtime.Version(),
	}
}

// commit is the checkout's commit (and whether it has local changes), when git is there.
func commit() string {
	root, err := sandbox.RepoRoot()
	if err != nil {
		return ""
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}
