// Package promcheck checks that the PromQL expressions a chart ships (alert rules, dashboard
// queries) name only metrics and labels the controllers really export: the metrics a controller
// registers (read from the collectors themselves) and controller-runtime's standard ones (read
// from its registry after a probe controller has run).
package promcheck

import (
	"context"
	"fmt"
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

// Metrics maps a series name to the names of its labels.
type Metrics map[string][]string

// Add records a metric family; a histogram or summary adds its _bucket/_sum/_count series.
func (m Metrics) Add(name string, labels []string, histogram bool) {
	m[name] = union(m[name], labels)
	if histogram {
		m[name+"_bucket"] = union(m[name+"_bucket"], append(slices.Clone(labels), "le"))
		m[name+"_sum"] = union(m[name+"_sum"], labels)
		m[name+"_count"] = union(m[name+"_count"], labels)
	}
}

// Merge adds every series of o.
func (m Metrics) Merge(o Metrics) Metrics {
	for k, v := range o {
		m[k] = union(m[k], v)
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
func Registered(register func(prometheus.Registerer) error) (Metrics, error) {
	var c capture
	if err := register(&c); err != nil {
		return nil, err
	}
	out := Metrics{}
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
func ControllerRuntime(ctx context.Context) (Metrics, error) {
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
		out := Metrics{}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				var labels []string
				for _, l := range s.GetLabel() {
					labels = append(labels, l.GetName())
				}
				out.Add(f.GetName(), labels, f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY)
			}
		}
		if _, ok := out["controller_runtime_reconcile_time_seconds_bucket"]; ok {
			if _, ok := out["workqueue_depth"]; ok {
				return out, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("controller-runtime's reconcile and workqueue metrics did not appear")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
