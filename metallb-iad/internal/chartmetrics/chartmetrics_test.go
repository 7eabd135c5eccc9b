// Package chartmetrics checks the metallb-iad chart's alert rules and dashboard against the
// metrics the driver exports.
package chartmetrics

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cozystack/reserved-ips/address-controller/pkg/promcheck"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver"
)

// expectedDriverMetrics are metrics the chart relies on that the driver is to export (the pool
// capacity gauge, being added to internal/driver). Until the driver registers them they are
// taken from here; once it does, what it registers must agree.
var expectedDriverMetrics = map[string][]string{
	"metallb_iad_pool_addresses": {"class", "pool", "state"},
}

// Every alert expression and dashboard query of the metallb-iad chart names only metrics and
// labels the driver exports: its own (as its Register method registers them), the pool gauge
// above, and controller-runtime's standard ones.
func TestMetalLBIADChartQueriesUseExportedMetrics(t *testing.T) {
	known, err := promcheck.Registered(func(r prometheus.Registerer) error { return newDriverMetrics(t).Register(r) })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := known["metallb_iad_placeholders"]; !ok {
		t.Fatalf("the driver's metrics were not read: %v", known)
	}
	for name, labels := range expectedDriverMetrics {
		if got, ok := known[name]; ok {
			if !equal(got, labels) {
				t.Errorf("the driver registers %s with labels %v; the chart expects %v", name, got, labels)
			}
			continue
		}
		t.Logf("%s is not registered by the driver yet; checking against the expected labels %v", name, labels)
		known.Add(name, labels, false)
	}
	std, err := promcheck.ControllerRuntime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	known.Merge(std)
	exprs, err := promcheck.ChartExpressions(filepath.Join("..", "..", "..", "charts", "metallb-iad"), "cozy-metallb-iad")
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 8 {
		t.Fatalf("only %d expressions read from the chart", len(exprs))
	}
	for _, e := range exprs {
		for _, err := range promcheck.Check(e.Expr, known) {
			t.Errorf("%s: %v", e.Where, err)
		}
	}
}

// newDriverMetrics calls driver.NewMetrics with a nil reader and namespace names for its string
// parameters, whatever their number (the driver gains parameters as it grows); the metrics'
// descriptions do not depend on them.
func newDriverMetrics(t *testing.T) interface {
	Register(prometheus.Registerer) error
} {
	t.Helper()
	fn := reflect.ValueOf(driver.NewMetrics)
	args := make([]reflect.Value, fn.Type().NumIn())
	for i := range args {
		in := fn.Type().In(i)
		if in.Kind() == reflect.String {
			args[i] = reflect.ValueOf("cozy-metallb-iad").Convert(in)
		} else {
			args[i] = reflect.Zero(in)
		}
	}
	m, ok := fn.Call(args)[0].Interface().(interface {
		Register(prometheus.Registerer) error
	})
	if !ok {
		t.Fatal("driver.NewMetrics returns no Register method")
	}
	return m
}

func equal(a, b []string) bool {
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	if len(a) != len(b) {
		return false
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}
