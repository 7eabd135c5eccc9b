// Package autoclaim holds the auto-claim rules that the core and a driver must apply alike: a
// driver that keeps foreign addresses off Services which will use an auto-claim needs the same
// answer to "could auto-claim serve this Service?" as the core that creates the claim.
package autoclaim

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// MetalLBAnnotations are MetalLB's annotations (and their deprecated twins): a Service carrying
// any of them chose its address its own way, and auto-claim leaves it alone.
var MetalLBAnnotations = []string{
	"metallb.io/address-pool", "metallb.io/loadBalancerIPs", "metallb.io/allow-shared-ip",
	"metallb.universe.tf/address-pool", "metallb.universe.tf/loadBalancerIPs", "metallb.universe.tf/allow-shared-ip",
}

// ParkingPool is the value of MetalLB's address-pool annotation with which a driver's admission
// policy parks a Service that names a claim or will use an auto-claim, until the driver pins its
// claim's addresses: no IPAddressPool can have that name (a slash is not allowed in object names),
// so MetalLB gives a parked Service no address at all, never a foreign one
// (docs/design.md#never-a-foreign-address). Such a Service did not choose its address its own way:
// auto-claim still serves it.
const ParkingPool = "metallb-iad/parked"

// ParkingAnnotation is the annotation that carries ParkingPool.
const ParkingAnnotation = "metallb.io/address-pool"

// Parked reports whether a Service is parked (ParkingPool).
func Parked(svc *corev1.Service) bool {
	return svc.Annotations[ParkingAnnotation] == ParkingPool
}

// SkipAsked says why auto-claim never creates a claim for a Service, from what its author asked
// for alone ("" when auto-claim may serve it, given a class): not a LoadBalancer, being
// deleted, naming a claim, opted out (the annotation, or the label of a driver's own Service), a load-balancer class, spec.loadBalancerIP, or a MetalLB
// pool, pin or sharing annotation (the parking pool excepted). The core adds one rule that depends on time (an address the
// Service had before auto-claim was enabled for it); see the core's README.
func SkipAsked(svc *corev1.Service) string {
	switch {
	case svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return "not a LoadBalancer"
	case svc.DeletionTimestamp != nil:
		return "being deleted"
	case svc.Annotations[ipamv1.AnnotationServiceClaim] != "":
		return "names a claim"
	case strings.EqualFold(svc.Annotations[ipamv1.AnnotationAutoClaim], "false"):
		return "opted out"
	case hasLabel(svc, ipamv1.LabelDriverService):
		// A driver's own Service, which the core does not even cache.
		return "carries the label " + ipamv1.LabelDriverService
	case svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != "":
		return "has a loadBalancerClass"
	case svc.Spec.LoadBalancerIP != "":
		return "sets spec.loadBalancerIP"
	}
	for _, a := range MetalLBAnnotations {
		if a == ParkingAnnotation && Parked(svc) {
			continue
		}
		if _, ok := svc.Annotations[a]; ok {
			return "carries " + a
		}
	}
	return ""
}

func hasLabel(svc *corev1.Service, key string) bool {
	_, ok := svc.Labels[key]
	return ok
}

// HadAddressBefore reports whether a Service's address predates auto-claim being enabled for
// it at enabledAt (zero: never, as for a Service that names its class itself): it has an
// address in status and was created no later than the second auto-claim was enabled
// (creationTimestamp has one-second precision; a Service of that very second is taken to be the
// older one, so that enabling auto-claim never re-addresses a running Service). A Service
// created afterwards that shows an address got it from an auto-assigning pool in the moment
// before its claim existed: a race, not a reason to skip it.
func HadAddressBefore(svc *corev1.Service, enabledAt time.Time) bool {
	return len(svc.Status.LoadBalancer.Ingress) > 0 && !enabledAt.IsZero() &&
		svc.CreationTimestamp.Unix() <= enabledAt.Unix()
}

// Accepted: the class's driver has accepted it (condition Accepted True).
func Accepted(class *ipamv1.IPAddressClass) bool {
	return meta.IsStatusConditionTrue(class.Status.Conditions, ipamv1.ConditionAccepted)
}

// PickClass returns the class auto-claim takes a Service's claim from when the Service names no
// class: of the classes marked is-auto-claim-class, not being deleted, that serve the Service's
// namespace (driverkit.RefusesNamespace; nsLabels are the namespace's labels), the newest, then
// the lowest name (as Kubernetes picks a default StorageClass). It also returns the names of the
// other marked classes that serve the namespace. A marked class that refuses the namespace does
// not hide an older one that serves it: the admission rules park a Service when any marked class
// of their driver serves its namespace, and a parked Service must get a claim.
func PickClass(classes []ipamv1.IPAddressClass, namespace string, nsLabels map[string]string) (*ipamv1.IPAddressClass, []string) {
	var serving []*ipamv1.IPAddressClass
	for i := range classes {
		c := &classes[i]
		if c.DeletionTimestamp == nil && c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true" &&
			driverkit.RefusesNamespace(c, namespace, nsLabels) == driverkit.NamespaceAdmitted {
			serving = append(serving, c)
		}
	}
	if len(serving) == 0 {
		return nil, nil
	}
	slices.SortFunc(serving, func(a, b *ipamv1.IPAddressClass) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var others []string
	for _, c := range serving[1:] {
		others = append(others, c.Name)
	}
	return serving[0], others
}

// NeedsNamespaceLabels: some marked class restricts the namespaces it serves, so that PickClass
// needs the labels of the Service's namespace.
func NeedsNamespaceLabels(classes []ipamv1.IPAddressClass) bool {
	for i := range classes {
		c := &classes[i]
		if c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true" && (c.Spec.NamespaceSelector != nil || c.Status.ServedNamespaces != nil) {
			return true
		}
	}
	return false
}
