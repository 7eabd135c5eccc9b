// Package promcheck checks that the PromQL expressions a chart ships (alert rules, dashboard
// queries) name only metrics and labels the controllers really export: the metrics a controller
// registers (read from the collectors themselves) and controller-runtime's standard ones (read
// from its registry after a probe controller has run).
package promcheck

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Metrics are the series the controllers export: each name with its labels and, where the code
// fixes them (API constants: phases, pool states), the values a label takes. The zero value is
// empty and ready to use.
type Metrics struct {
	labels map[string][]string
	values map[[2]string][]string
}

// Add records a metric family; a histogram or summary adds its _bucket/_sum/_count series.
func (m *Metrics) Add(name string, labels []string, histogram bool) {
	if m.labels == nil {
		m.labels = map[string][]string{}
	}
	m.labels[name] = union(m.labels[name], labels)
	if histogram {
		m.labels[name+"_bucket"] = union(m.labels[name+"_bucket"], append(slices.Clone(labels), "le"))
		m.labels[name+"_sum"] = union(m.labels[name+"_sum"], labels)
		m.labels[name+"_count"] = union(m.labels[name+"_count"], labels)
	}
}

// Values records the values the code exports for a label of a metric (every one of them: a
// query matching another value is an error).
func (m *Metrics) Values(name, label string, values ...string) {
	if m.values == nil {
		m.values = map[[2]string][]string{}
	}
	k := [2]string{name, label}
	m.values[k] = union(m.values[k], values)
}

// Labels returns a series' labels and whether it is exported at all.
func (m *Metrics) Labels(name string) ([]string, bool) {
	l, ok := m.labels[name]
	return l, ok
}

// LabelValues returns the values recorded for a label of a metric, if any were.
func (m *Metrics) LabelValues(name, label string) ([]string, bool) {
	v, ok := m.values[[2]string{name, label}]
	return v, ok
}

// Names returns every series name, sorted.
func (m *Metrics) Names() []string {
	out := make([]string, 0, len(m.labels))
	for k := range m.labels {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Undocumented returns the metric families (a histogram once, without its _bucket, _sum and
// _count series) that a document does not name in backquotes, for each document that misses one:
// "path: metric".
func (m *Metrics) Undocumented(paths ...string) ([]string, error) {
	var families []string
	for _, n := range m.Names() {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok {
				if _, isHistogram := m.labels[b+"_bucket"]; isHistogram {
					base = b
				}
			}
		}
		if !slices.Contains(families, base) {
			families = append(families, base)
		}
	}
	var out []string
	for _, p := range paths {
		doc, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, f := range families {
			if !regexp.MustCompile("`" + regexp.QuoteMeta(f) + "[`{]").Match(doc) {
				out = append(out, p+": "+f)
			}
		}
	}
	return out, nil
}

// Merge adds every series and label value of o.
func (m *Metrics) Merge(o *Metrics) *Metrics {
	for k, v := range o.labels {
		m.Add(k, v, false)
	}
	for k, v := range o.values {
		m.Values(k[0], k[1], v...)
	}
	return m
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// capture is a Registerer that remembers what is registered with it.
type capture struct{ collectors []prometheus.Collector }

func (c *capture) Register(col prometheus.Collector) error {
	c.collectors = append(c.collectors, col)
	return nil
}
func (c *capture) MustRegister(cols ...prometheus.Collector) {
	c.collectors = append(c.collectors, cols...)
}
func (c *capture) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// Registered returns the metrics that register (a controller's own Register method) adds to a
// registry, read from the descriptions of its collectors.
func Registered(register func(prometheus.Registerer) error) (*Metrics, error) {
	var c capture
	if err := register(&c); err != nil {
		return nil, err
	}
	out := &Metrics{}
	for _, col := range c.collectors {
		_, histogram := col.(prometheus.Histogram)
		if _, ok := col.(*prometheus.HistogramVec); ok {
			histogram = true
		}
		ch := make(chan *prometheus.Desc, 64)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("unparsable metric description %s", d)
			}
			var labels []string
			for _, l := range strings.Split(m[2], ",") {
				if l = strings.TrimSpace(l); l != "" {
					labels = append(labels, l)
				}
			}
			out.Add(m[1], labels, histogram)
		}
	}
	return out, nil
}

// ControllerRuntime returns controller-runtime's standard metrics as a running controller
// exports them: it starts a probe controller, makes it reconcile once, and reads the registry
// controller-runtime serves metrics from.
func ControllerRuntime(ctx context.Context) (*Metrics, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const name = "promcheck-probe"
	done := make(chan struct{}, 1)
	c, err := controller.NewUnmanaged(name, controller.Options{
		SkipNameValidation: ptr.To(true),
		Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			select {
			case done <- struct{}{}:
			default:
			}
			return reconcile.Result{}, nil
		}),
	})
	if err != nil {
		return nil, err
	}
	events := make(chan event.GenericEvent, 1)
	events <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "probe", Name: "probe"}}}
	if err := c.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("the probe controller did not reconcile")
	}
	// The reconcile's own metrics are recorded right after it returns.
	deadline := time.Now().Add(30 * time.Second)
	for {
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			return nil, err
		}
		out := &Metrics{}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				var labels []string
				for _, l := range s.GetLabel() {
					labels = append(labels, l.GetName())
				}
				out.Add(f.GetName(), labels, f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY)
			}
		}
		if _, ok := out.Labels("controller_runtime_reconcile_time_seconds_bucket"); ok {
			if _, ok := out.Labels("workqueue_depth"); ok {
				return out, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("controller-runtime's reconcile and workqueue metrics did not appear")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
