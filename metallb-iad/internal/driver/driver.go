package driver

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// Driver is the MetalLB driver's set of controllers.
type Driver struct {
	// Namespace is where placeholder Services live (cozy-metallb-iad on Cozystack).
	Namespace string
	// MetalLBNamespace is where MetalLB's pools are (cozy-metallb on Cozystack).
	MetalLBNamespace string
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// NudgeAfter is how long a placeholder may wait for MetalLB before it is touched to make
	// MetalLB try again (it does not retry a failed allocation on its own). 3s when zero.
	NudgeAfter time.Duration
	// Metrics, when set, receives the driver's metrics.
	Metrics *Metrics

	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder

	// said remembers the last warning given per object, so a condition that lasts is reported
	// once, not on every pass.
	said sync.Map
	// firstSeen records when a stamped claim was first seen, for the provisioning latency metric.
	firstSeen sync.Map
}

// SetupWithManager registers the indexes and every controller of the driver.
func (d *Driver) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	d.client, d.reader = mgr.GetClient(), mgr.GetAPIReader()
	d.recorder = mgr.GetEventRecorder("metallb-iad")
	if d.NudgeAfter == 0 {
		d.NudgeAfter = 3 * time.Second
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(mgr.GetCache(), d.Namespace)
	}
	if err := setupIndexes(ctx, mgr); err != nil {
		return err
	}
	for _, setup := range []func(ctrl.Manager) error{d.setupClasses, d.setupClaims, d.setupAddresses, d.setupServices} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: max(d.Workers, 1)}
}

// warnOnce emits a Warning event unless the same one was the last said about the object.
func (d *Driver) warnOnce(obj client.Object, reason, format string, args ...any) {
	key := string(obj.GetUID()) + "/" + reason
	msg := reason + ":" + format
	if prev, ok := d.said.Load(key); ok && prev.(string) == msg {
		return
	}
	d.said.Store(key, msg)
	d.recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Reconcile", format, args...)
}

// forget clears warnOnce's memory of a reason, so it is said again if it comes back.
func (d *Driver) forget(obj client.Object, reason string) {
	d.said.Delete(string(obj.GetUID()) + "/" + reason)
}

// Metrics are the driver's Prometheus metrics.
type Metrics struct {
	reader      client.Reader
	namespace   string
	served      prometheus.Histogram
	placeholder *prometheus.Desc
	attached    *prometheus.Desc
	conflicts   *prometheus.Desc
}

// NewMetrics creates the metrics; gauges are read from the cache at scrape time.
func NewMetrics(reader client.Reader, namespace string) *Metrics {
	return &Metrics{
		reader:    reader,
		namespace: namespace,
		served: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metallb_iad_provision_duration_seconds",
			Help:    "Time from first seeing a claim stamped for this driver until MetalLB served its address.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		placeholder: prometheus.NewDesc("metallb_iad_placeholders", "Placeholder Services by role (provisioning, hold).", []string{"role"}, nil),
		attached:    prometheus.NewDesc("metallb_iad_attached_addresses", "Reserved addresses attached to a tenant Service.", nil, nil),
		conflicts:   prometheus.NewDesc("metallb_iad_conflicts", "Reserved addresses some other Service holds.", nil, nil),
	}
}

// Register adds the metrics to a registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	if err := reg.Register(m.served); err != nil {
		return err
	}
	return reg.Register(m)
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.placeholder
	ch <- m.attached
	ch <- m.conflicts
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var svcs corev1.ServiceList
	if err := m.reader.List(ctx, &svcs, client.InNamespace(m.namespace)); err == nil {
		byRole := map[string]int{RoleProvisioning: 0, RoleHold: 0}
		for _, s := range svcs.Items {
			if r := s.Labels[LabelRole]; r != "" {
				byRole[r]++
			}
		}
		for r, n := range byRole {
			ch <- prometheus.MustNewConstMetric(m.placeholder, prometheus.GaugeValue, float64(n), r)
		}
	}
	attached, conflicts, err := countAddresses(ctx, m.reader)
	if err == nil {
		ch <- prometheus.MustNewConstMetric(m.attached, prometheus.GaugeValue, float64(attached))
		ch <- prometheus.MustNewConstMetric(m.conflicts, prometheus.GaugeValue, float64(conflicts))
	}
}
