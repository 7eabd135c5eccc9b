// Command metallb-iad is the MetalLB driver for the local.sdn.cozystack.io API.
package main

import (
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/webhook"
)

var version = "dev"

func main() {
	var opts manager.Options
	opts.BindFlags(flag.CommandLine)
	var (
		namespace = flag.String("namespace", envOr("POD_NAMESPACE", "cozy-metallb-iad"), "namespace of the placeholder Services")
		metallbNS = flag.String("metallb-namespace", "metallb-system", "namespace of MetalLB's IPAddressPools (cozy-metallb on Cozystack)")
		nudge     = flag.Duration("nudge-after", 3*time.Second, "how long a placeholder waits for MetalLB before it is touched to make MetalLB retry")
		parking   = flag.Bool("parking", true, "park a LoadBalancer Service that names a claim, or that auto-claim will serve from a class of this driver, until its claim's addresses are pinned (the chart's admissionPolicy.parking); false also takes the parking annotation off Services parked before")
		notServed = flag.Duration("not-served-after", plan.DefaultNotServedAfter, "how long a Service the driver pinned to its claim's address may wait for MetalLB before the driver reports it (Held=False NotServed on the address, a Warning on the Service); 0 turns the report off")
		window    = flag.Int("provisioning-window", plan.DefaultProvisioningWindow, "how many provisioning placeholders of one pool and family may wait for MetalLB at a time (never more than MetalLB counts free addresses in the pool, but at least one); claims beyond them wait their turn without a Service")
		relAfter  = flag.Duration("release-after", plan.DefaultReleaseAfter, "how long a Service the driver pinned waits unserved before the driver releases the names MetalLB may keep its address under after a restart; 0 (the default) turns this off, because MetalLB merely slow to serve sets it off too (the release for a refused hold, which MetalLB names itself, is always on)")
		wh        webhook.Options
		whHosts   string
	)
	flag.StringVar(&wh.BindAddress, "parking-webhook-bind-address", "0", "address of the parking webhook, which parks Services at admission where the apiserver has no MutatingAdmissionPolicy (Kubernetes before 1.36; the chart sets it there); 0 turns it off")
	flag.StringVar(&wh.Configuration, "parking-webhook-configuration", "metallb-iad-parking", "MutatingWebhookConfiguration of the parking webhook, whose caBundle the driver keeps")
	flag.StringVar(&wh.Secret, "parking-webhook-secret", "metallb-iad-parking-webhook-tls", "Secret, in --namespace, holding the parking webhook's certificate and authority (the driver creates and renews it)")
	flag.StringVar(&wh.Service, "parking-webhook-service", "metallb-iad-parking-webhook", "Service, in --namespace, through which the apiserver calls the parking webhook (its DNS names go into the certificate); empty when the configuration calls a URL")
	flag.StringVar(&whHosts, "parking-webhook-hosts", "", "more names or IP addresses for the parking webhook's certificate, comma-separated (the host of the configuration's URL, for a driver outside the cluster)")
	log := opts.Init(version)
	wh.Namespace = *namespace
	for _, h := range strings.Split(whHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			wh.Hosts = append(wh.Hosts, h)
		}
	}
	var certs *webhook.Certs
	var whServer ctrlwebhook.Server
	if wh.BindAddress != "0" && wh.BindAddress != "" {
		certs = wh.Certs()
		var err error
		if whServer, err = wh.Server(certs); err != nil {
			log.Error(err, "invalid flags")
			os.Exit(2)
		}
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, metallb.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	serviceLabels := driver.NewServiceLabels()
	mgr, err := opts.New(manager.Spec{
		Name: "metallb-iad", Version: version, Scheme: scheme,
		LeaderElectionID: "metallb-iad.local.sdn.cozystack.io",
		ByObject: func() map[client.Object]cache.ByObject {
			by := driver.CacheByObject(*namespace, serviceLabels)
			by[&metallb.IPAddressPool{}] = cache.ByObject{Namespaces: map[string]cache.Config{*metallbNS: {}}}
			return by
		}(),
		WebhookServer: whServer,
	})
	if err != nil {
		log.Error(err, "setting up")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	d := &driver.Driver{Namespace: *namespace, MetalLBNamespace: *metallbNS, Workers: opts.Workers, NudgeAfter: *nudge,
		ReleaseAfter: *relAfter, NotServedAfter: *notServed, NoParking: !*parking, ProvisioningWindow: *window,
		ServiceLabels: serviceLabels}
	if *notServed <= 0 {
		d.NotServedAfter = -1 // off
	}
	d.Metrics = driver.NewMetrics(mgr.GetCache(), *namespace, *metallbNS)
	if err := d.Metrics.Register(metrics.Registry); err != nil {
		log.Error(err, "registering metrics")
		os.Exit(1)
	}
	if err := d.SetupWithManager(ctx, mgr); err != nil {
		log.Error(err, "setting up the driver")
		os.Exit(1)
	}
	if certs != nil {
		if err := webhook.Setup(mgr, certs); err != nil {
			log.Error(err, "setting up the parking webhook")
			os.Exit(1)
		}
	}
	log.Info("starting", "version", version, "namespace", *namespace, "metallbNamespace", *metallbNS, "workers", opts.Workers,
		"metricsSecure", opts.MetricsSecure, "parkingWebhook", wh.BindAddress)
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
