package plan

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Whether MetalLB will serve a Service at all. The driver attaches a claim's addresses only to a
// Service MetalLB will serve: attaching deletes the address's hold, so an attach to a Service
// MetalLB ignores or refuses would leave the IP free in MetalLB for anyone else to take.

// ForeignClass reports whether a Service names another load-balancer implementation in
// spec.loadBalancerClass: MetalLB (run, as here, without a class of its own) leaves such a
// Service alone.
func ForeignClass(svc *corev1.Service) bool {
	return svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != ""
}

// NamespaceLabels is one namespace's name and labels.
type NamespaceLabels struct {
	Name   string
	Labels map[string]string
}

// AllocationExcludes says why MetalLB gives none of the pool's addresses to the Service under the
// pool's spec.serviceAllocation, or "" when the allocation admits it. It decides as MetalLB's
// allocator does: the namespaces the allocation lists, together with every namespace of the
// cluster (namespaces) one of its namespace selectors matches, form a set that, unless empty, must
// include the Service's namespace; and when service selectors are given, one of them must match
// the Service's labels. So an allocation that lists and selects nothing admits every Service, and
// so does one whose namespace selectors match no namespace and that lists none (MetalLB's set is
// empty then too). A selector MetalLB cannot parse makes it reject the pool: the driver then takes
// the Service as not served. namespaces is read only when the allocation has namespace selectors.
func AllocationExcludes(pool *metallb.IPAddressPool, namespaces []NamespaceLabels, svc *corev1.Service) string {
	alloc := pool.Spec.ServiceAllocation
	if alloc == nil {
		return ""
	}
	allowed := slices.Clone(alloc.Namespaces)
	for i := range alloc.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&alloc.NamespaceSelectors[i])
		if err != nil {
			return fmt.Sprintf("IPAddressPool %s has a namespace selector MetalLB cannot use (%v)", pool.Name, err)
		}
		for _, ns := range namespaces {
			if sel.Matches(labels.Set(ns.Labels)) {
				allowed = append(allowed, ns.Name)
			}
		}
	}
	if len(allowed) > 0 && !slices.Contains(allowed, svc.Namespace) {
		return fmt.Sprintf("IPAddressPool %s serves only the namespaces its spec.serviceAllocation lists or selects, not %s", pool.Name, svc.Namespace)
	}
	if len(alloc.ServiceSelectors) == 0 {
		return ""
	}
	for i := range alloc.ServiceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&alloc.ServiceSelectors[i])
		if err != nil {
			return fmt.Sprintf("IPAddressPool %s has a service selector MetalLB cannot use (%v)", pool.Name, err)
		}
		if sel.Matches(labels.Set(svc.Labels)) {
			return ""
		}
	}
	return fmt.Sprintf("IPAddressPool %s serves only the Services its spec.serviceAllocation.serviceSelectors match, and none matches this one's labels", pool.Name)
}
