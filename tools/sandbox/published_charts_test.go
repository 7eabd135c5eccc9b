package sandbox

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/mirror/mirrortest"
)

// The out-of-tree path end to end on real parts: both charts published as `make release`
// publishes them (charts.PublishChart, the Helm SDK) into the CNCF distribution registry on
// loopback, pulled back from there by the sandbox, installed into its real kube-apiserver, and
// both controllers running as the ServiceAccounts those releases created.
func TestChartsFromARegistryRunBothControllers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reg := mirrortest.Start(t, "registry.reserved-ips.test", false)
	repo := reg.Addr + "/cozystack/charts"
	const version = "v0.0.0-registry.1"
	for _, c := range []Controller{AddressController, MetalLBIAD} {
		ref, err := charts.PublishChart(charts.Dir(root, c.Name), "oci://"+repo, version, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("published %s", ref)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pulled := map[string]bool{}
	s, err := Start(ctx, Options{
		Logf:         t.Logf,
		ControlPlane: controlplane.Options{Dir: t.TempDir()},
		Charts: func(name string) (*charts.Chart, error) {
			pulled[name] = true
			return charts.PullChart(repo, name, version, true)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the sandbox: %v", err)
		}
	}()

	for _, c := range []Controller{AddressController, MetalLBIAD} {
		if !pulled[c.Name] {
			t.Errorf("the sandbox did not take %s from the registry", c.Name)
		}
		// The release in the cluster is the published chart.
		rel, err := charts.Get(s.Kubeconfig, c.Namespace, c.Name)
		if err != nil {
			t.Fatalf("release %s/%s: %v", c.Namespace, c.Name, err)
		}
		if rel.Chart.Metadata.Version != charts.ChartVersion(version) || rel.Info.Status != "deployed" {
			t.Errorf("%s: release of chart %s, %s; want the published %s, deployed", c.Name, rel.Chart.Metadata.Version, rel.Info.Status, charts.ChartVersion(version))
		}
		// The controller is up (the sandbox waited for its /readyz) and serves metrics.
		url := s.Endpoints[c.Name+"/metrics"]
		resp, err := http.Get(url) //nolint:gosec,noctx // loopback test endpoint
		if err != nil {
			t.Fatalf("%s metrics: %v", c.Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s metrics: %s", c.Name, resp.Status)
		}
	}
}
