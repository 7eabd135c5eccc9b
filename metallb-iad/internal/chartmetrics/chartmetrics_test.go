// Package chartmetrics checks the metallb-iad chart's alert rules and dashboard against the
// metrics the driver exports.
package chartmetrics

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/promcheck"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Every alert expression and dashboard query of the metallb-iad chart names only metrics, labels
// and label values the driver exports: its own (as its Register method registers them, with the
// values of the pool gauge's state label read from what it collects) and controller-runtime's
// standard ones.
func TestMetalLBIADChartQueriesUseExportedMetrics(t *testing.T) {
	known, err := promcheck.Registered(newDriverMetrics(t, nil).Register)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"metallb_iad_placeholders", "metallb_iad_pool_addresses", "metallb_iad_pool_size_addresses", "metallb_iad_lost_addresses"} {
		if _, ok := known.Labels(want); !ok {
			t.Fatalf("the driver does not register %s: %v", want, known.Names())
		}
	}
	known.Values("metallb_iad_placeholders", "role", plan.RoleProvisioning, plan.RoleHold)
	states, families := collectedPoolLabels(t)
	known.Values("metallb_iad_pool_addresses", "state", states...)
	known.Values("metallb_iad_pool_addresses", "family", families...)
	known.Values("metallb_iad_pool_size_addresses", "family", families...)
	if slices.Contains(states, "size") {
		t.Error("metallb_iad_pool_addresses mixes the pool's size with its parts")
	}
	problems, err := promcheck.CheckChart(context.Background(), filepath.Join("..", "..", "..", "charts", "metallb-iad"), "cozy-metallb-iad", known, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The driver's README and the chart's README name every metric the driver registers.
func TestMetalLBIADDocsListEveryMetric(t *testing.T) {
	known, err := promcheck.Registered(newDriverMetrics(t, nil).Register)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := known.Undocumented(filepath.Join("..", "..", "README.md"),
		filepath.Join("..", "..", "..", "charts", "metallb-iad", "README.md.gotmpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("%s is not listed", m)
	}
}

// collectedPoolLabels returns the values of metallb_iad_pool_addresses's state and family labels,
// as the driver's collector emits them for an accepted class whose pool exists (read from a fake client: only the
// collector's output matters here, the driver's integration tests count against an apiserver).
func collectedPoolLabels(t *testing.T) (states, families []string) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{ipamv1.AddToScheme, metallb.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	class := &ipamv1.IPAddressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "public"},
		Spec:       ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: "public"}},
	}
	class.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: metav1.Now()}}
	// newDriverMetrics names every namespace parameter cozy-metallb-iad, MetalLB's too.
	pool := &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: "cozy-metallb-iad", Name: "public"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28", "2001:db8::/120"}}}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(class, pool).WithStatusSubresource(class)
	if err := index.Register(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := newDriverMetrics(t, b.Build()).Register(reg); err != nil {
		t.Fatal(err)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gathered {
		if f.GetName() != "metallb_iad_pool_addresses" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "state":
					states = append(states, l.GetValue())
				case "family":
					families = append(families, l.GetValue())
				}
			}
		}
	}
	if len(states) == 0 {
		t.Fatal("the driver's collector emitted no pool gauge for an accepted class")
	}
	slices.Sort(states)
	slices.Sort(families)
	return slices.Compact(states), slices.Compact(families)
}

// builderIndexer registers field indexes on a fake client builder.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// newDriverMetrics calls driver.NewMetrics with reader (nil: none) and cozy-metallb-iad for each
// of its string parameters, whatever their number (the driver gains parameters as it grows); the
// metrics' descriptions do not depend on them.
func newDriverMetrics(t *testing.T, reader client.Reader) interface {
	Register(prometheus.Registerer) error
} {
	t.Helper()
	fn := reflect.ValueOf(driver.NewMetrics)
	args := make([]reflect.Value, fn.Type().NumIn())
	for i := range args {
		in := fn.Type().In(i)
		if reader != nil && in.Kind() == reflect.Interface && reflect.TypeOf(reader).Implements(in) {
			args[i] = reflect.ValueOf(reader)
			continue
		}
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
