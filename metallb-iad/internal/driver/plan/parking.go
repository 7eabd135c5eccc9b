package plan

import (
	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

// Parking (docs/design.md#parking, docs/design.md#never-a-foreign-address): the chart's admission
// policies give a Service that names a claim, or will use an auto-claim of this driver's class,
// MetalLB's pool annotation with autoclaim.ParkingPool, so that MetalLB assigns it nothing until
// the driver pins its claim's addresses (the pin patch removes the parking annotation). The driver
// keeps the same rule where the policies cannot: it parks a Service in the write that unpins it
// (the policy cannot tell an auto-claimed Service that still shows the address being released from
// one that had an address before auto-claim), and takes the parking annotation off a Service that
// no longer qualifies (it stopped naming a claim, opted out of auto-claim, or its class is not this
// driver's), which the policies never do. ParkingWanted mirrors the policies' conditions, so the
// two never undo each other.

// Parkable: a Service MetalLB would serve that requests no address of its own (no
// loadBalancerClass, no MetalLB annotation or spec.loadBalancerIP but the driver's pin and the
// parking pool), and none of the driver's own.
func Parkable(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil &&
		(svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == "") &&
		svc.Labels[LabelRole] == "" && len(ForeignPins(svc)) == 0
}

// ParkingWanted says whether a Service should be parked while it has no pin of this driver:
// it is parkable and it links to a claim (names one, or has its auto-claim), or auto-claim
// will serve it with a class of this driver (autoClaimParks).
func ParkingWanted(svc *corev1.Service, linked bool, classes []ipamv1.IPAddressClass, nsLabels map[string]string) bool {
	if !Parkable(svc) {
		return false
	}
	if linked || svc.Annotations[ipamv1.AnnotationServiceClaim] != "" {
		return true
	}
	return autoClaimParks(svc, classes, nsLabels)
}

// autoClaimParks mirrors the chart's metallb-iad-park-auto-claimed policy: auto-claim may
// serve the Service (autoclaim.SkipAsked) with a class of this driver — the one its
// ip-address-class annotation names, else one marked as the auto-claim class — that serves the
// Service's namespace (nsLabels: its labels), and the Service shows no address, or only the one this driver is taking back (its pin or releasing record):
// one that had its address before auto-claim was enabled keeps it.
func autoClaimParks(svc *corev1.Service, classes []ipamv1.IPAddressClass, nsLabels map[string]string) bool {
	// Judged as the Service stands once this driver's pin is off (the unpin of an auto-claimed
	// Service is when parking matters most).
	asked := svc
	if svc.Annotations[AnnotationPinned] == "true" {
		asked = svc.DeepCopy()
		delete(asked.Annotations, metallb.AnnotationLoadBalancerIPs)
		delete(asked.Annotations, AnnotationPinned)
		if DriverKey(asked) != "" {
			delete(asked.Annotations, metallb.AnnotationAllowSharedIP)
		}
	}
	if autoclaim.SkipAsked(asked) != "" {
		return false
	}
	_, releasing := svc.Annotations[AnnotationReleasing]
	if len(svc.Status.LoadBalancer.Ingress) > 0 && svc.Annotations[AnnotationPinned] != "true" && !releasing {
		return false
	}
	named := svc.Annotations[ipamv1.AnnotationServiceClass]
	for i := range classes {
		c := &classes[i]
		if c.Spec.Provisioner != Provisioner {
			continue
		}
		// A class the Service names serves it even while being deleted (the core claims from
		// it); a marked class being deleted is no longer picked for auto-claim.
		if (named != "" && c.Name == named || named == "" && c.DeletionTimestamp == nil && c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true") &&
			parking.ServesNamespace(c, svc.Namespace, nsLabels) {
			return true
		}
	}
	return false
}

// parkingUntouched: a Service the driver neither parks nor unparks — one being deleted (its
// parked state no longer matters, and the policy might put back what the driver took off) and
// one that carries the driver's role label outside its namespace (not the driver's, and not to
// be fought over with the policy).
func parkingUntouched(svc *corev1.Service) bool {
	return svc.DeletionTimestamp != nil || svc.Labels[LabelRole] != ""
}
