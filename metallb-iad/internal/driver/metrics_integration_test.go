package driver

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The pool gauges: per family, the size from the pool's CIDRs and ranges under its own metric,
// and its parts, reserved (the class's addresses) and free (the rest), under another; counted
// from the driver's cache.
func TestPoolCapacityGauge(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "gauge", "203.0.113.160/28", "203.0.113.200-203.0.113.203", "2001:db8:99::/126")
	createAddresses(t, "gauge", "203.0.113.161", "203.0.113.201")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(testDriver.Metrics); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"size IPv4": 16 + 4, "reserved IPv4": 2, "free IPv4": 18,
		"size IPv6": 4, "reserved IPv6": 0, "free IPv6": 4,
	}
	eventually(t, "the gauges to show the gauge class's pool", func() (bool, error) {
		got := map[string]float64{}
		families, err := reg.Gather()
		if err != nil {
			return false, err
		}
		for _, f := range families {
			if f.GetName() != "metallb_iad_pool_addresses" && f.GetName() != "metallb_iad_pool_size_addresses" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{"state": "size"}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["class"] == "gauge" && labels["pool"] == "gauge" {
					got[labels["state"]+" "+labels["family"]] = m.GetGauge().GetValue()
				}
			}
		}
		t.Logf("gauges: %v", got)
		return reflect.DeepEqual(got, want), nil
	})
	_ = ctx
}

// createAddresses creates IPAddresses of class, as an admin pre-provisions them.
func createAddresses(t *testing.T, class string, ips ...string) {
	t.Helper()
	for _, ip := range ips {
		a := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
			Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: class, ReclaimPolicy: ipamv1.ReclaimRetain}}
		if err := admin.Create(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
}

// classCapacity reads a class's status.capacity.
func classCapacity(t *testing.T, name string) []ipamv1.FamilyCapacity {
	t.Helper()
	var c ipamv1.IPAddressClass
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	return c.Status.Capacity
}

// A class's status.capacity: written with its acceptance, then, as addresses come, at most once
// per CapacityEvery (a change of the counts alone waits for it), and the counts per family are
// the pool's size, the class's addresses and the rest.
func TestClassCapacity(t *testing.T) {
	needAPIServer(t)
	newPoolClass(t, "capacity", "203.0.113.176/29", "2001:db8:98::/126")
	eventually(t, "the class's capacity with its acceptance", func() (bool, error) {
		return slices.Equal(classCapacity(t, "capacity"), []ipamv1.FamilyCapacity{
			{Family: ipamv1.IPv4, Size: 8, Free: 8}, {Family: ipamv1.IPv6, Size: 4, Free: 4}}), nil
	})
	written := time.Now()
	createAddresses(t, "capacity", "203.0.113.177", "203.0.113.178", "2001:db8:98::1")
	want := []ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: 8, Reserved: 2, Free: 6}, {Family: ipamv1.IPv6, Size: 4, Reserved: 1, Free: 3}}
	eventuallyWithin(t, 2*DefaultCapacityEvery, "the capacity to count the class's addresses", func() (bool, error) {
		return slices.Equal(classCapacity(t, "capacity"), want), nil
	})
	if d := time.Since(written); d < DefaultCapacityEvery-time.Second {
		t.Errorf("the capacity was written again %s after the last write, sooner than every %s", d.Round(time.Millisecond), DefaultCapacityEvery)
	}
}
