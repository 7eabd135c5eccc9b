package driver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
)

// controllerReconciles is how many passes the named controller of the driver has made.
func controllerReconciles(t *testing.T, controller string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// A class's capacity writes (status.capacity) decide nothing for the Services parked for it: they
// look at none of them again.
func TestClassCapacityUpdatesWakeNoParkedService(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "capacitypark", "203.0.113.200/29")
	ns := newNamespace(t, "capacitypark")
	const n = 20
	for i := range n {
		if err := admin.Create(ctx, tenantService(ns, fmt.Sprintf("s%d", i),
			map[string]string{autoclaim.ParkingAnnotation: autoclaim.ParkingPool, ipamv1.AnnotationServiceClaim: "never"})); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, ns)
	before := controllerReconciles(t, "metallb-iad-service")
	for i := range 5 {
		var c ipamv1.IPAddressClass
		if err := admin.Get(ctx, client.ObjectKey{Name: "capacitypark"}, &c); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Status.Capacity = []ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: int64(1000 + i)}}
		if err := admin.Status().Patch(ctx, &c, patch); err != nil {
			t.Fatal(err)
		}
	}
	consistently(t, 2*time.Second, "capacity updates to wake no parked Service", func() (bool, error) {
		if got := controllerReconciles(t, "metallb-iad-service") - before; got >= n {
			return false, fmt.Errorf("%v Service passes after 5 capacity updates", got)
		}
		return true, nil
	})
}
