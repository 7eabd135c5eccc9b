// Command address-controller is the class-agnostic core of the local.sdn.cozystack.io API: it
// binds IPAddressClaims to IPAddresses, releases and reclaims them, and protects every object
// with finalizers. Drivers, such as metallb-iad, provision the addresses.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/internal/controller"
	"github.com/cozystack/reserved-ips/address-controller/pkg/servicecache"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	var (
		metricsAddr  = flag.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
		probeAddr    = flag.String("health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
		leaderElect  = flag.Bool("leader-elect", true, "elect a leader so that only one replica acts at a time")
		leaderNS     = flag.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
		workers      = flag.Int("workers", 4, "concurrent reconciles per controller")
		qps          = flag.Float64("kube-api-qps", 50, "sustained requests per second to the apiserver")
		burst        = flag.Int("kube-api-burst", 100, "request burst to the apiserver")
		syncPeriod   = flag.Duration("resync-period", 10*time.Hour, "how often every object is reconciled even without events")
		printVersion = flag.Bool("version", false, "print the version and exit")
	)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *printVersion {
		fmt.Println(version)
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if *workers < 1 {
		log.Error(nil, "--workers must be at least 1", "workers", *workers)
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a cluster")
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cfg.UserAgent = "address-controller/" + version

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:        *probeAddr,
		LeaderElection:                *leaderElect,
		LeaderElectionID:              "address-controller.local.sdn.cozystack.io",
		LeaderElectionNamespace:       *leaderNS,
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			SyncPeriod: syncPeriod,
			// The controllers never read managedFields: dropping them halves the cache.
			DefaultTransform: cache.TransformStripManagedFields(),
			// Auto-claim watches every Service; keep only what it reads.
			ByObject: map[client.Object]cache.ByObject{&corev1.Service{}: {Transform: servicecache.Strip}},
		},
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.Setup(ctx, mgr, controller.Options{Workers: *workers, RegisterMetrics: true}); err != nil {
		log.Error(err, "setting up the controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	}); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}
	log.Info("starting", "version", version, "workers", *workers, "leaderElection", *leaderElect)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
