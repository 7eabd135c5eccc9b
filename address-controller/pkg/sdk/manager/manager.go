// Package manager is the command-line and manager set-up shared by the project's controllers
// (address-controller and metallb-iad): the same flags, metrics endpoint (plain or secured),
// probes, leader election, client rate limits and cache trimming, without merging the binaries.
package manager

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/metricsauth"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/servicecache"
)

// Options are the settings every controller binary of the project takes from its flags.
type Options struct {
	// MetricsAddr is where the Prometheus endpoint listens ("0" turns it off).
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS and lets only callers that the apiserver
	// authenticates and authorizes (get on the /metrics non-resource URL) read them; the
	// controller then needs create on tokenreviews and subjectaccessreviews.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the secure metrics endpoint (a Secret of type
	// kubernetes.io/tls mounted there), so that scrapers can verify it; empty: a self-signed
	// certificate generated at start.
	MetricsCertDir string
	// ProbeAddr is where /healthz and /readyz listen.
	ProbeAddr string
	// PprofAddr is where Go's /debug/pprof endpoints listen ("" or "0": off, the default).
	PprofAddr string
	// LeaderElect makes only one replica act at a time.
	LeaderElect bool
	// LeaderElectionNamespace is where the Lease lives (default: the pod's namespace).
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election: a leader that cannot
	// renew its Lease within RenewDeadline (a stalled or overloaded apiserver) exits and is
	// restarted; a replica waits up to LeaseDuration for a crashed leader's Lease to expire.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// QPS and Burst limit the client towards the apiserver.
	QPS   float64
	Burst int
	// SyncPeriod is how often every cached object is reconciled again without an event.
	SyncPeriod time.Duration
	// PrintVersion asks the binary to print its version and exit.
	PrintVersion bool
	// Zap are the logging flags.
	Zap zap.Options
}

// BindFlags registers the shared flags, with the project's defaults, on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", false,
		"serve metrics over HTTPS to callers the apiserver authenticates and authorizes (needs create on tokenreviews and subjectaccessreviews)")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "",
		"directory holding tls.crt and tls.key for the secure metrics endpoint (empty: a self-signed certificate)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0",
		"address of Go's /debug/pprof endpoints, for heap and CPU profiles (0 disables them; they are unauthenticated: bind to loopback)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader so that only one replica acts at a time")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"how long a replica waits for a leader that stopped renewing before taking over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"how long the leader keeps trying to renew its Lease before it gives up and exits (raise it where the apiserver stalls under load)")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often leader election tries to acquire or renew the Lease")
	fs.IntVar(&o.Workers, "workers", 16, "concurrent reconciles per controller")
	fs.Float64Var(&o.QPS, "kube-api-qps", 100, "sustained requests per second to the apiserver")
	fs.IntVar(&o.Burst, "kube-api-burst", 200, "request burst to the apiserver")
	fs.DurationVar(&o.SyncPeriod, "resync-period", 10*time.Hour, "how often every object is reconciled even without events")
	fs.BoolVar(&o.PrintVersion, "version", false, "print the version and exit")
	o.Zap.BindFlags(fs)
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, not %d", o.Workers))
	}
	if o.LeaderElect && !(o.RetryPeriod > 0 && o.RetryPeriod < o.RenewDeadline && o.RenewDeadline < o.LeaseDuration) {
		errs = append(errs, fmt.Errorf("leader election needs 0 < --leader-elect-retry-period (%s) < --leader-elect-renew-deadline (%s) < --leader-elect-lease-duration (%s)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
	}
	if o.QPS <= 0 || o.Burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive"))
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--resync-period must be positive"))
	}
	return errors.Join(errs...)
}

// SetLogger installs the logger the flags describe as controller-runtime's.
func (o *Options) SetLogger() {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.Zap)))
}

// Init finishes a binary's command line: it parses the flags bound on the default FlagSet (with
// BindFlags and the binary's own), prints the version and exits when --version asks for it,
// installs the logger and exits with status 2 when a flag value cannot work. It returns the
// logger the binary's set-up reports through.
func (o *Options) Init(version string) logr.Logger {
	flag.Parse()
	if o.PrintVersion {
		fmt.Println(version)
		os.Exit(0)
	}
	o.SetLogger()
	log := ctrl.Log.WithName("setup")
	if err := o.Validate(); err != nil {
		log.Error(err, "invalid flags")
		os.Exit(2)
	}
	return log
}

// Spec is what differs between the binaries.
type Spec struct {
	// Name is the binary's name, used in the client's user agent.
	Name, Version string
	// LeaderElectionID names the Lease.
	LeaderElectionID string
	Scheme           *runtime.Scheme
	// ByObject adds per-type cache settings (Services are always trimmed to what the
	// controllers read, unless the Service entry brings a Transform of its own).
	ByObject map[client.Object]cache.ByObject
	// WebhookServer is the admission webhook server, for a binary that serves one (nil: none
	// listens).
	WebhookServer webhook.Server
}

// RESTConfig loads the kubeconfig (flag --kubeconfig, KUBECONFIG, or in-cluster) with the
// client limits of o.
func (o *Options) RESTConfig(s Spec) (*rest.Config, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a cluster: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
	cfg.UserAgent = s.Name + "/" + s.Version
	return cfg, nil
}

// ManagerOptions are the controller-runtime options for o and s.
func (o *Options) ManagerOptions(s Spec) ctrl.Options {
	metrics := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		metrics.SecureServing = true
		metrics.FilterProvider = metricsauth.Filter
		metrics.CertDir = o.MetricsCertDir
	}
	// Both controllers watch Services: keep only what they read, whatever else Spec asks of the
	// Service cache (a label selector, for instance).
	services := cache.ByObject{}
	byObject := map[client.Object]cache.ByObject{}
	for obj, opts := range s.ByObject {
		if _, ok := obj.(*corev1.Service); ok {
			services = opts
			continue
		}
		byObject[obj] = opts
	}
	if services.Transform == nil {
		services.Transform = servicecache.Strip
	}
	byObject[&corev1.Service{}] = services
	syncPeriod := o.SyncPeriod
	lease, renew, retry := o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	return ctrl.Options{
		Scheme:                        s.Scheme,
		WebhookServer:                 s.WebhookServer,
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              s.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &lease,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		Cache: cache.Options{
			SyncPeriod: &syncPeriod,
			// The controllers never read managedFields: dropping them halves the cache.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         byObject,
		},
	}
}

// registerClientMetrics adds, to the client metrics controller-runtime exports, how long requests
// waited on the client's own rate limiter (--kube-api-qps and --kube-api-burst):
// rest_client_rate_limiter_duration_seconds tells an operator, and the benchmark, whether a slow
// controller is held back by its own limits rather than by the apiserver.
func registerClientMetrics() {
	crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRateLimiterLatency)
}

// New creates the manager with its health probes: /healthz answers while the process runs,
// /readyz once the caches are synced.
func (o *Options) New(s Spec) (ctrl.Manager, error) {
	registerClientMetrics()
	cfg, err := o.RESTConfig(s)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, o.ManagerOptions(s))
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}
