package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/cachewalk"
)

// Metrics are the core's own Prometheus metrics, beside controller-runtime's.
type Metrics struct {
	bindLatency prometheus.Histogram
	reader      client.Reader
	addresses   *prometheus.Desc
	claims      *prometheus.Desc
	// oldestPending is the creation time of the oldest claim still waiting for an address: the
	// alert on Pending claims reads its age, which a count of Pending claims cannot give (claims
	// Pending each for a moment, one after the other, keep a count above zero for ever).
	oldestPending *prometheus.Desc
}

// NewMetrics creates the metrics; counts are read from reader (the manager's cache) at scrape
// time, without copying the cached objects, so they are exact and cost nothing between scrapes.
func NewMetrics(reader client.Reader) *Metrics {
	return &Metrics{
		reader: reader,
		bindLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "address_controller_claim_bind_duration_seconds",
			Help:    "Time from a claim's creation until it is first Bound.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		addresses: prometheus.NewDesc("address_controller_addresses",
			"IPAddress objects by class and phase.", []string{"class", "phase"}, nil),
		claims: prometheus.NewDesc("address_controller_claims",
			"IPAddressClaim objects by phase.", []string{"phase"}, nil),
		oldestPending: prometheus.NewDesc("address_controller_oldest_pending_claim_timestamp_seconds",
			"Creation time (Unix seconds) of the oldest IPAddressClaim waiting for an address: Pending, or not yet "+
				"given a phase. Absent when no claim waits.", nil, nil),
	}
}

// Register adds the metrics to a registry (controller-runtime's metrics.Registry in main).
func (m *Metrics) Register(reg prometheus.Registerer) error {
	if err := reg.Register(m.bindLatency); err != nil {
		return err
	}
	return reg.Register(m)
}

func (m *Metrics) observeBind(d time.Duration) {
	if m != nil && d >= 0 {
		m.bindLatency.Observe(d.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.addresses
	ch <- m.claims
	ch <- m.oldestPending
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Walks over the cache that copy nothing: the objects are only read.
	byClassPhase := map[[2]string]int{}
	if err := cachewalk.Each(ctx, m.reader, &ipamv1.IPAddress{}, &ipamv1.IPAddressList{}, func(o client.Object) {
		a, ok := o.(*ipamv1.IPAddress)
		if !ok {
			return
		}
		byClassPhase[[2]string{a.Spec.ClassName, string(a.Status.Phase)}]++
	}); err != nil {
		log.Log.Error(err, "collecting address metrics")
		return
	}
	for k, n := range byClassPhase {
		ch <- prometheus.MustNewConstMetric(m.addresses, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	byPhase := map[string]int{}
	var oldest time.Time
	if err := cachewalk.Each(ctx, m.reader, &ipamv1.IPAddressClaim{}, &ipamv1.IPAddressClaimList{}, func(o client.Object) {
		c, ok := o.(*ipamv1.IPAddressClaim)
		if !ok {
			return
		}
		byPhase[string(c.Status.Phase)]++
		if waiting := c.Status.Phase == ipamv1.ClaimPending || c.Status.Phase == ""; waiting && c.DeletionTimestamp == nil {
			if created := c.CreationTimestamp.Time; oldest.IsZero() || created.Before(oldest) {
				oldest = created
			}
		}
	}); err != nil {
		log.Log.Error(err, "collecting claim metrics")
		return
	}
	for p, n := range byPhase {
		ch <- prometheus.MustNewConstMetric(m.claims, prometheus.GaugeValue, float64(n), p)
	}
	if !oldest.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.oldestPending, prometheus.GaugeValue, float64(oldest.Unix()))
	}
}
