package driver

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// With parking off (--parking=false, the chart's admissionPolicy.parking: false) the driver
// wants no Service parked: it parks none, and PlanAttach takes the annotation off one parked
// before (TestPlanAttachParks covers the unpark of a Service not wanted parked).
func TestNoParkingWantsNoServiceParked(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web", UID: "web-uid", Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	s.Annotations[ipamv1.AnnotationServiceClaim] = "ip"
	ctx := context.Background()
	if got, err := (&Driver{}).parkingWanted(ctx, s, true); err != nil || !got {
		t.Fatalf("parking on: a Service naming a claim is wanted parked=%v (%v), want true", got, err)
	}
	if got, err := (&Driver{NoParking: true}).parkingWanted(ctx, s, true); err != nil || got {
		t.Fatalf("parking off: a Service naming a claim is wanted parked=%v (%v), want false", got, err)
	}
}
