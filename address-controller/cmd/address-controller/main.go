// Command address-controller is the class-agnostic core of the local.sdn.cozystack.io API: it
// binds IPAddressClaims to IPAddresses, releases and reclaims them, and protects every object
// with finalizers. Drivers, such as metallb-iad, provision the addresses.
package main

import (
	"cmp"
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/internal/controller"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

// spec is what the core's manager is made of: its scheme, its Lease and its cache settings.
func spec() manager.Spec {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return manager.Spec{
		Name: "address-controller", Version: version, Scheme: scheme,
		LeaderElectionID: "address-controller.local.sdn.cozystack.io",
		ByObject:         controller.CacheByObject(),
	}
}

func main() {
	var opts manager.Options
	opts.BindFlags(flag.CommandLine)
	quietWait := flag.Duration("pending-reason-after", 2*time.Minute,
		"how long a claim that waits only for its driver reads plain Pending before its status says what it waits for, counted from its creation or from the last bind of its class, whichever is later, and at most 8 times this after creation (0: at once)")
	log := opts.Init(version)
	mgr, err := opts.New(spec())
	if err != nil {
		log.Error(err, "setting up")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.Setup(ctx, mgr, controller.Options{Workers: opts.Workers, RegisterMetrics: true, QuietWait: cmp.Or(*quietWait, -1)}); err != nil {
		log.Error(err, "setting up the controllers")
		os.Exit(1)
	}
	log.Info("starting", "version", version, "workers", opts.Workers, "leaderElection", opts.LeaderElect, "metricsSecure", opts.MetricsSecure)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}
