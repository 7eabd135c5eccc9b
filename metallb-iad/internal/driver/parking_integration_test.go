package driver

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Issue 10, defect 10: a Service the chart's admission policy parked (MetalLB's pool annotation
// with autoclaim.ParkingPool) is attached like any other; the pin replaces the parking annotation
// in one patch (MetalLB refuses a pin with another pool), and a Service parked again while
// attached gets its parking annotation removed. The parking annotation is never a ForeignPin.
func TestParkedServiceIsAttached(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "parked", "203.0.113.224/28")
	startFakeMetalLB(t, "parked", netip.MustParsePrefix("203.0.113.224/28"))
	ns := newNamespace(t, "parked")
	const ip = "203.0.113.225"
	boundClaimWithAddress(t, ns, "c", "parked", ip)
	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c", autoclaim.ParkingAnnotation: autoclaim.ParkingPool})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pinnedUnparked := func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		_, parked := s.Annotations[autoclaim.ParkingAnnotation]
		return !parked && s.Annotations[AnnotationPinned] == "true" && s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip, nil
	}
	eventually(t, "the parked Service to be pinned and unparked", pinnedUnparked)
	waitServiceIngress(t, ns, "web", ip)

	// Parked again while attached (the parking value is no protected annotation): MetalLB would
	// refuse the pin with that pool, so the driver takes the parking annotation off again.
	eventually(t, "the Service to be parked again", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
		return admin.Update(ctx, &s) == nil, nil
	})
	eventually(t, "the parking annotation to be removed from the attached Service", pinnedUnparked)

	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if evs := driverEvents(t, ns, string(s.UID), ReasonForeignPin); len(evs) > 0 {
		t.Fatalf("the parking annotation was taken for a foreign pin: %s", evs[0].Note)
	}
}
