package manager

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// A binary's own settings for the Service cache (the core's label selector) keep the trimming,
// and the cache gets one entry for Services, not two.
func TestServiceCacheSettingsKeepTheTrim(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"a": "b"})
	m := parse(t).ManagerOptions(Spec{ByObject: map[client.Object]cache.ByObject{
		&corev1.Service{}: {Label: sel},
		&corev1.Event{}:   {},
	}})
	if len(m.Cache.ByObject) != 2 {
		t.Fatalf("%d cache entries, want Services and Events", len(m.Cache.ByObject))
	}
	for obj, by := range m.Cache.ByObject {
		if _, ok := obj.(*corev1.Service); !ok {
			continue
		}
		if by.Label == nil || by.Label.String() != sel.String() || by.Transform == nil {
			t.Fatalf("Service cache %+v: want the binary's selector and the trim", by)
		}
		out, err := by.Transform(&corev1.Service{Spec: corev1.ServiceSpec{Selector: map[string]string{"x": "y"}}})
		if err != nil || out.(*corev1.Service).Spec.Selector != nil {
			t.Fatalf("the Service cache does not trim: %+v, %v", out, err)
		}
	}
}

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

func TestDefaults(t *testing.T) {
	o := parse(t)
	if o.MetricsAddr != ":8080" || o.MetricsSecure || o.ProbeAddr != ":8081" || !o.LeaderElect ||
		o.Workers != 16 || o.QPS != 100 || o.Burst != 200 || o.SyncPeriod != 10*time.Hour {
		t.Fatalf("defaults %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	m := o.ManagerOptions(Spec{LeaderElectionID: "x"})
	if m.PprofBindAddress != "0" {
		t.Fatalf("pprof is on by default (%q)", m.PprofBindAddress)
	}
	if got := parse(t, "--pprof-bind-address=127.0.0.1:6060").ManagerOptions(Spec{}).PprofBindAddress; got != "127.0.0.1:6060" {
		t.Fatalf("--pprof-bind-address gave %q", got)
	}
	if m.Metrics.SecureServing || m.Metrics.FilterProvider != nil {
		t.Fatal("metrics are secured without --metrics-secure")
	}
	if len(m.Cache.ByObject) != 1 || m.Cache.DefaultTransform == nil || *m.Cache.SyncPeriod != 10*time.Hour {
		t.Fatalf("cache options %+v", m.Cache)
	}
	if *m.LeaseDuration != 15*time.Second || *m.RenewDeadline != 10*time.Second || *m.RetryPeriod != 2*time.Second {
		t.Fatalf("leader election %s/%s/%s, want Kubernetes' 15s/10s/2s", *m.LeaseDuration, *m.RenewDeadline, *m.RetryPeriod)
	}
}

func TestLeaderElectionTimings(t *testing.T) {
	m := parse(t, "--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s").ManagerOptions(Spec{})
	if *m.LeaseDuration != time.Minute || *m.RenewDeadline != 40*time.Second || *m.RetryPeriod != 5*time.Second {
		t.Fatalf("leader election %s/%s/%s", *m.LeaseDuration, *m.RenewDeadline, *m.RetryPeriod)
	}
	for _, args := range [][]string{
		{"--leader-elect-renew-deadline=20s"},                                      // renew >= lease
		{"--leader-elect-retry-period=10s"},                                        // retry >= renew
		{"--leader-elect-retry-period=0s"},                                         // no retry
		{"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=60s"}, // renew == lease
	} {
		if err := parse(t, args...).Validate(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	if err := parse(t, "--leader-elect=false", "--leader-elect-retry-period=0s").Validate(); err != nil {
		t.Errorf("timings checked without leader election: %v", err)
	}
}

func TestMetricsSecure(t *testing.T) {
	m := parse(t, "--metrics-secure").ManagerOptions(Spec{})
	if !m.Metrics.SecureServing || m.Metrics.FilterProvider == nil {
		t.Fatal("--metrics-secure does not serve HTTPS behind authentication and authorization")
	}
}

// A mounted certificate (the charts' metrics.tls.secretName) is what the secure endpoint serves,
// so that a ServiceMonitor can verify it instead of skipping verification.
func TestMetricsCertDir(t *testing.T) {
	if m := parse(t, "--metrics-secure").ManagerOptions(Spec{}); m.Metrics.CertDir != "" {
		t.Errorf("cert dir %q without --metrics-cert-dir", m.Metrics.CertDir)
	}
	m := parse(t, "--metrics-secure", "--metrics-cert-dir=/etc/metrics-tls").ManagerOptions(Spec{})
	if m.Metrics.CertDir != "/etc/metrics-tls" {
		t.Errorf("cert dir %q, want /etc/metrics-tls", m.Metrics.CertDir)
	}
}

func TestValidate(t *testing.T) {
	for _, args := range [][]string{{"--workers=0"}, {"--kube-api-qps=0"}, {"--resync-period=0s"}} {
		if parse(t, args...).Validate() == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestClientThrottlingIsExported(t *testing.T) {
	registerClientMetrics()
	clientmetrics.RateLimiterLatency.Observe(context.Background(), "GET", url.URL{Host: "127.0.0.1:6443"}, 250*time.Millisecond)
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "rest_client_rate_limiter_duration_seconds" {
			if h := f.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.25 {
				t.Errorf("throttling histogram %v, want one wait of 0.25 s", h)
			}
			return
		}
	}
	t.Error("rest_client_rate_limiter_duration_seconds is not exported")
}

// Init, as a binary runs it: --version prints the version and exits 0 before anything is set up;
// a flag value that cannot work exits 2 naming the flag; good flags return and the binary goes on.
func TestInitAsABinaryRunsIt(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--version"}, 0, "v9.9.9\n"},
		{[]string{"--workers=0"}, 2, "--workers must be at least 1"},
		{[]string{"--workers=2"}, 0, "went on with 2 workers"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInitChild$")
		cmd.Env = append(os.Environ(), "MANAGER_INIT_CHILD="+strings.Join(c.args, " "))
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.out) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", c.args, code, out, c.code, c.out)
		}
	}
}

// TestInitChild is the binary TestInitAsABinaryRunsIt runs (it does nothing on its own).
func TestInitChild(t *testing.T) {
	args, ok := os.LookupEnv("MANAGER_INIT_CHILD")
	if !ok {
		return
	}
	// The binary's command line, on a flag set of its own (the test binary's flags are parsed).
	os.Args = append([]string{"binary"}, strings.Fields(args)...)
	flag.CommandLine = flag.NewFlagSet("binary", flag.ExitOnError)
	var o Options
	o.BindFlags(flag.CommandLine)
	o.Init("v9.9.9")
	fmt.Printf("went on with %d workers\n", o.Workers)
	os.Exit(0)
}
