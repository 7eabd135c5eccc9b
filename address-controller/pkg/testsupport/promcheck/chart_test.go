package promcheck_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/reserved-ips/address-controller/internal/controller"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/promcheck"
)

// Every alert expression and dashboard query of the address-controller chart names only metrics
// and labels the controller exports: its own (as its Register method registers them) and
// controller-runtime's standard ones.
func TestAddressControllerChartQueriesUseExportedMetrics(t *testing.T) {
	known, err := promcheck.Registered(func(r prometheus.Registerer) error { return controller.NewMetrics(nil).Register(r) })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"address_controller_claims", "address_controller_addresses", "address_controller_claim_bind_duration_seconds_bucket"} {
		if _, ok := known.Labels(want); !ok {
			t.Fatalf("the controller's metrics were not read: %v", known.Names())
		}
	}
	// The phase labels carry the API's phases: a query may match only those the CRDs allow.
	crds := filepath.Join("..", "..", "..", "config", "crd")
	for metric, crd := range map[string]string{
		"address_controller_claims":    "local.sdn.cozystack.io_ipaddressclaims.yaml",
		"address_controller_addresses": "local.sdn.cozystack.io_ipaddresses.yaml",
	} {
		phases, err := promcheck.CRDEnum(filepath.Join(crds, crd), "status", "phase")
		if err != nil {
			t.Fatal(err)
		}
		known.Values(metric, "phase", phases...)
	}
	problems, err := promcheck.CheckChart(context.Background(), filepath.Join("..", "..", "..", "..", "charts", "address-controller"), "cozy-address-controller", known, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The controller's README and the chart's README name every metric the controller registers.
func TestAddressControllerDocsListEveryMetric(t *testing.T) {
	known, err := promcheck.Registered(func(r prometheus.Registerer) error { return controller.NewMetrics(nil).Register(r) })
	if err != nil {
		t.Fatal(err)
	}
	missing, err := known.Undocumented(filepath.Join("..", "..", "..", "README.md"),
		filepath.Join("..", "..", "..", "..", "charts", "address-controller", "README.md.gotmpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("%s is not listed", m)
	}
}
