package driver

import (
	"context"
	"math/big"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/cachewalk"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Metrics are the driver's Prometheus metrics. The gauges are counted from the cache at scrape
// time without copying objects (cachewalk: read-only walks over the informers' stores).
type Metrics struct {
	reader           client.Reader
	namespace        string
	metallbNamespace string
	served           prometheus.Histogram
	placeholder      *prometheus.Desc
	attached         *prometheus.Desc
	conflicts        *prometheus.Desc
	lost             *prometheus.Desc
	poolSize         *prometheus.Desc
	poolAddresses    *prometheus.Desc
}

// NewMetrics creates the metrics; gauges are read from the cache at scrape time.
func NewMetrics(reader client.Reader, namespace, metallbNamespace string) *Metrics {
	return &Metrics{
		reader:           reader,
		namespace:        namespace,
		metallbNamespace: metallbNamespace,
		served: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "metallb_iad_provision_duration_seconds",
			Help:    "Time from a claim's creation until the driver created its address from what MetalLB assigned.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}),
		placeholder: prometheus.NewDesc("metallb_iad_placeholders", "Placeholder Services by role (provisioning, hold; a hold stays beside the Service attached to its address when they share the IP).", []string{"role"}, nil),
		attached:    prometheus.NewDesc("metallb_iad_attached_addresses", "Reserved addresses attached to a tenant Service.", nil, nil),
		conflicts:   prometheus.NewDesc("metallb_iad_conflicts", "Reserved addresses some other Service holds.", nil, nil),
		lost:        prometheus.NewDesc("metallb_iad_lost_addresses", "Reserved addresses MetalLB can no longer serve (Lost=True).", nil, nil),
		// The size and its parts are two metrics, so that summing either over its labels means
		// something: sum(metallb_iad_pool_addresses) is the addresses of the pools.
		poolSize: prometheus.NewDesc("metallb_iad_pool_size_addresses",
			"Addresses of the MetalLB pool of each accepted class of this driver, per family: every address the pool's CIDRs and ranges hold.",
			[]string{"class", "pool", "family"}, nil),
		poolAddresses: prometheus.NewDesc("metallb_iad_pool_addresses",
			"The addresses of the MetalLB pool of each accepted class of this driver, per family, by state: reserved (IPAddresses of "+
				"the class) and free (the pool's size minus reserved, never below 0; it does not subtract pool addresses that "+
				"other Services hold outside a reservation).",
			[]string{"class", "pool", "family", "state"}, nil),
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
	ch <- m.lost
	ch <- m.poolSize
	ch <- m.poolAddresses
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Walks over the cache that copy nothing (a List copies every item): the objects are only read.
	byRole := map[string]int{plan.RoleProvisioning: 0, plan.RoleHold: 0}
	if err := cachewalk.Each(ctx, m.reader, &corev1.Service{}, &corev1.ServiceList{}, func(o client.Object) {
		if o.GetNamespace() != m.namespace {
			return
		}
		if role := o.GetLabels()[plan.LabelRole]; role == plan.RoleProvisioning || role == plan.RoleHold {
			byRole[role]++
		}
	}); err == nil {
		for _, role := range []string{plan.RoleProvisioning, plan.RoleHold} {
			ch <- prometheus.MustNewConstMetric(m.placeholder, prometheus.GaugeValue, float64(byRole[role]), role)
		}
	}
	var attached, conflicts, lost int
	byClass := map[string]map[ipamv1.IPFamily]int64{}
	if err := cachewalk.Each(ctx, m.reader, &ipamv1.IPAddress{}, &ipamv1.IPAddressList{}, func(o client.Object) {
		a, ok := o.(*ipamv1.IPAddress)
		if !ok {
			return
		}
		if ip, err := ipamv1.ParseCanonical(a.Spec.Address); err == nil {
			if byClass[a.Spec.ClassName] == nil {
				byClass[a.Spec.ClassName] = map[ipamv1.IPFamily]int64{}
			}
			byClass[a.Spec.ClassName][ipamv1.FamilyOf(ip)]++
		}
		if a.Status.AttachedTo != nil {
			attached++
		}
		if meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict) {
			conflicts++
		}
		if meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionLost) {
			lost++
		}
	}); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.attached, prometheus.GaugeValue, float64(attached))
	ch <- prometheus.MustNewConstMetric(m.conflicts, prometheus.GaugeValue, float64(conflicts))
	ch <- prometheus.MustNewConstMetric(m.lost, prometheus.GaugeValue, float64(lost))
	m.collectPools(ctx, ch, byClass)
}

// collectPools reports each accepted class's pool per family: its size, and the class's
// addresses and the rest, counted as the class's status.capacity counts them (plan.PoolSizes;
// the gauges are floats, so an IPv6 size is not capped).
func (m *Metrics) collectPools(ctx context.Context, ch chan<- prometheus.Metric, addressesOfClass map[string]map[ipamv1.IPFamily]int64) {
	var classes ipamv1.IPAddressClassList
	if err := m.reader.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range classes.Items {
		c := &classes.Items[i]
		name := plan.ParseClassParams(c).Pool
		if c.Spec.Provisioner != plan.Provisioner || name == "" || !meta.IsStatusConditionTrue(c.Status.Conditions, ipamv1.ConditionAccepted) {
			continue
		}
		var pool metallb.IPAddressPool
		if err := m.reader.Get(ctx, client.ObjectKey{Namespace: m.metallbNamespace, Name: name}, &pool); err != nil {
			continue
		}
		sizes := plan.PoolSizes(&pool)
		for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
			reserved := float64(addressesOfClass[c.Name][fam])
			if sizes[fam] == nil && reserved == 0 {
				continue
			}
			var size float64
			if sizes[fam] != nil {
				size, _ = new(big.Float).SetInt(sizes[fam]).Float64()
			}
			ch <- prometheus.MustNewConstMetric(m.poolSize, prometheus.GaugeValue, size, c.Name, name, string(fam))
			ch <- prometheus.MustNewConstMetric(m.poolAddresses, prometheus.GaugeValue, reserved, c.Name, name, string(fam), "reserved")
			ch <- prometheus.MustNewConstMetric(m.poolAddresses, prometheus.GaugeValue, max(size-reserved, 0), c.Name, name, string(fam), "free")
		}
	}
}
