package manager

import (
	"flag"
	"testing"
	"time"
)

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
		o.Workers != 4 || o.QPS != 50 || o.Burst != 100 || o.SyncPeriod != 10*time.Hour {
		t.Fatalf("defaults %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	m := o.ManagerOptions(Spec{LeaderElectionID: "x"})
	if m.Metrics.SecureServing || m.Metrics.FilterProvider != nil {
		t.Fatal("metrics are secured without --metrics-secure")
	}
	if len(m.Cache.ByObject) != 1 || m.Cache.DefaultTransform == nil || *m.Cache.SyncPeriod != 10*time.Hour {
		t.Fatalf("cache options %+v", m.Cache)
	}
}

func TestMetricsSecure(t *testing.T) {
	m := parse(t, "--metrics-secure").ManagerOptions(Spec{})
	if !m.Metrics.SecureServing || m.Metrics.FilterProvider == nil {
		t.Fatal("--metrics-secure does not serve HTTPS behind authentication and authorization")
	}
}

func TestValidate(t *testing.T) {
	for _, args := range [][]string{{"--workers=0"}, {"--kube-api-qps=0"}, {"--resync-period=0s"}} {
		if parse(t, args...).Validate() == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
