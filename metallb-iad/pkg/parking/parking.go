// Package parking is the rule by which a Service write is parked at admission: a LoadBalancer
// Service that names a claim, or that auto-claim will serve from a class of the MetalLB driver,
// gets MetalLB's pool annotation with autoclaim.ParkingPool, a pool no IPAddressPool can be, so
// that MetalLB gives it no address until the driver pins its claim's addresses (the pin patch
// takes the annotation off). Where the apiserver serves MutatingAdmissionPolicy (Kubernetes 1.36
// and later) the driver chart's two parking policies apply this rule in CEL; below that, the
// driver's parking webhook applies it with this function. The two must decide alike: the e2e
// module's policymodel test compares them on generated writes.
package parking

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// ServesNamespace: the class serves claims of the namespace (its namespaceSelector, then the
// namespaces its driver reports, driverkit.RefusesNamespace). Auto-claim makes no claim from a
// class for a namespace it does not serve, so no Service there is parked for one.
func ServesNamespace(class *ipamv1.IPAddressClass, namespace string, nsLabels map[string]string) bool {
	return driverkit.RefusesNamespace(class, namespace, nsLabels) == driverkit.NamespaceAdmitted
}

// NeedsNamespaceLabels: some class restricts the namespaces it serves, so that deciding needs
// the labels of the Service's namespace.
func NeedsNamespaceLabels(classes []ipamv1.IPAddressClass) bool {
	for i := range classes {
		if classes[i].Spec.NamespaceSelector != nil || classes[i].Status.ServedNamespaces != nil {
			return true
		}
	}
	return false
}

// Provisioner is the MetalLB driver's name in IPAddressClass.spec.provisioner.
const Provisioner = "metallb.drivers.local.sdn.cozystack.io"

// Request is one Service write as admission sees it: the object written, the stored object on
// an update (nil on a create), the cluster's classes, and the labels of the Service's namespace
// (a class may serve only some namespaces).
type Request struct {
	Object, OldObject *corev1.Service
	Classes           []ipamv1.IPAddressClass
	NamespaceLabels   map[string]string
}

// Reasons a write is parked, as Decide says them.
const (
	// NamesAClaim: the Service names a claim (local.sdn.cozystack.io/ip-address-claim).
	NamesAClaim = "names-a-claim"
	// AutoClaimedFrom, followed by "/" and the class: auto-claim will serve it from that class.
	AutoClaimedFrom = "auto-claimed-from"
)

// Decide says why the write of req is parked, or "" when it is left as it is:
//
//   - never a Service that is not a LoadBalancer, asks for a load-balancer class or
//     spec.loadBalancerIP, or carries any MetalLB pool, pin or sharing annotation (it chose its
//     address its own way, or is parked or pinned already);
//   - a Service that names a claim, on every create and update;
//   - otherwise a Service auto-claim serves from a class of this driver (the one its
//     ip-address-class annotation names, else a class marked as the auto-claim class; a class
//     being deleted serves none, nor a class that does not serve the Service's namespace: its
//     namespaceSelector, or the namespaces its driver reports, leave it out), unless it is being deleted, opted out of auto-claim, is a
//     driver's own Service, or, on an update, shows an address in the object written or the one
//     stored (an existing Service keeps what MetalLB gave it before auto-claim was turned on).
func Decide(req Request) string {
	svc := req.Object
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer ||
		svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != "" || svc.Spec.LoadBalancerIP != "" {
		return ""
	}
	for _, k := range autoclaim.MetalLBAnnotations {
		if _, ok := svc.Annotations[k]; ok {
			return ""
		}
	}
	if svc.Annotations[ipamv1.AnnotationServiceClaim] != "" {
		return NamesAClaim
	}
	if svc.DeletionTimestamp != nil {
		return ""
	}
	if v, ok := svc.Annotations[ipamv1.AnnotationAutoClaim]; ok && strings.EqualFold(v, "false") {
		return ""
	}
	if _, ok := svc.Labels[ipamv1.LabelDriverService]; ok {
		return ""
	}
	if req.OldObject != nil && (len(svc.Status.LoadBalancer.Ingress) > 0 || len(req.OldObject.Status.LoadBalancer.Ingress) > 0) {
		return ""
	}
	named := svc.Annotations[ipamv1.AnnotationServiceClass]
	for i := range req.Classes {
		c := &req.Classes[i]
		if c.Spec.Provisioner != Provisioner || c.DeletionTimestamp != nil {
			continue
		}
		if (named != "" && c.Name == named || named == "" && c.Annotations[ipamv1.AnnotationAutoClaimClass] == "true") &&
			ServesNamespace(c, svc.Namespace, req.NamespaceLabels) {
			return AutoClaimedFrom + "/" + c.Name
		}
	}
	return ""
}
