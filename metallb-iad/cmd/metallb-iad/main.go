// Command metallb-iad is the MetalLB driver for the local.sdn.cozystack.io API.
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
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/servicecache"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

var version = "dev"

func main() {
	var (
		namespace    = flag.String("namespace", envOr("POD_NAMESPACE", "cozy-metallb-iad"), "namespace of the placeholder Services")
		metallbNS    = flag.String("metallb-namespace", "metallb-system", "namespace of MetalLB's IPAddressPools (cozy-metallb on Cozystack)")
		metricsAddr  = flag.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
		probeAddr    = flag.String("health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
		leaderElect  = flag.Bool("leader-elect", true, "elect a leader so that only one replica acts at a time")
		leaderNS     = flag.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's)")
		workers      = flag.Int("workers", 4, "concurrent reconciles per controller")
		qps          = flag.Float64("kube-api-qps", 50, "sustained requests per second to the apiserver")
		burst        = flag.Int("kube-api-burst", 100, "request burst to the apiserver")
		nudge        = flag.Duration("nudge-after", 3*time.Second, "how long a placeholder waits for MetalLB before it is touched to make MetalLB retry")
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
		log.Error(nil, "--workers must be at least 1")
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, metallb.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a cluster")
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	cfg.UserAgent = "metallb-iad/" + version

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:        *probeAddr,
		LeaderElection:                *leaderElect,
		LeaderElectionID:              "metallb-iad.local.sdn.cozystack.io",
		LeaderElectionNamespace:       *leaderNS,
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			SyncPeriod:       syncPeriod,
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Service{}:        {Transform: servicecache.Strip},
				&metallb.IPAddressPool{}: {Namespaces: map[string]cache.Config{*metallbNS: {}}},
			},
		},
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	d := &driver.Driver{Namespace: *namespace, MetalLBNamespace: *metallbNS, Workers: *workers, NudgeAfter: *nudge}
	d.Metrics = driver.NewMetrics(mgr.GetCache(), *namespace, *metallbNS)
	if err := d.Metrics.Register(metrics.Registry); err != nil {
		log.Error(err, "registering metrics")
		os.Exit(1)
	}
	if err := d.SetupWithManager(ctx, mgr); err != nil {
		log.Error(err, "setting up the driver")
		os.Exit(1)
	}
	_ = mgr.AddHealthzCheck("healthz", healthz.Ping)
	_ = mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	})
	log.Info("starting", "version", version, "namespace", *namespace, "metallbNamespace", *metallbNS, "workers", *workers)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
