package driver

import (
	"context"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The pool-capacity gauge (issue 14): size from the pool's CIDRs and ranges, reserved from the
// class's addresses, free the rest; counted from the driver's cache.
func TestPoolCapacityGauge(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "gauge", "203.0.113.160/28", "203.0.113.200-203.0.113.203", "2001:db8:99::/126")
	for _, ip := range []string{"203.0.113.161", "203.0.113.201"} {
		a := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
			Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "gauge", ReclaimPolicy: ipamv1.ReclaimRetain}}
		if err := admin.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(testDriver.Metrics); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gauge to show the gauge class's pool", func() (bool, error) {
		got := map[string]float64{}
		families, err := reg.Gather()
		if err != nil {
			return false, err
		}
		for _, f := range families {
			if f.GetName() != "metallb_iad_pool_addresses" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["class"] == "gauge" && labels["pool"] == "gauge" {
					got[labels["state"]] = m.GetGauge().GetValue()
				}
			}
		}
		t.Logf("gauge: %v", got)
		return got["size"] == 16+4+4 && got["reserved"] == 2 && got["free"] == 22, nil
	})
}
