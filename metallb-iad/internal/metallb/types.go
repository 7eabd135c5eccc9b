// Package metallb holds the small part of MetalLB's API the driver reads (IPAddressPool), and
// the annotations it writes on Services. Importing MetalLB's own module would pull in its whole
// dependency graph for three fields.
//
// +kubebuilder:object:generate=true
// +groupName=metallb.io
package metallb

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Annotations MetalLB reads on Services; each has a deprecated twin under metallb.universe.tf/.
const (
	AnnotationLoadBalancerIPs = "metallb.io/loadBalancerIPs"
	AnnotationAddressPool     = "metallb.io/address-pool"
	AnnotationAllowSharedIP   = "metallb.io/allow-shared-ip"
	LegacyPrefix              = "metallb.universe.tf/"
)

var (
	GroupVersion  = schema.GroupVersion{Group: "metallb.io", Version: "v1beta1"}
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	AddToScheme   = SchemeBuilder.AddToScheme
)

// IPAddressPoolSpec is the part of MetalLB's pool spec the driver checks.
type IPAddressPoolSpec struct {
	Addresses  []string `json:"addresses"`
	AutoAssign *bool    `json:"autoAssign,omitempty"`
	// ServiceAllocation limits which Services MetalLB gives the pool's addresses to; nil: any.
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// ServiceAllocation is a pool's spec.serviceAllocation: the namespaces (listed, or selected by
// their labels) and the Services (selected by their labels) whose requests the pool serves.
type ServiceAllocation struct {
	Priority           int                    `json:"priority,omitempty"`
	Namespaces         []string               `json:"namespaces,omitempty"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// IPAddressPoolStatus is MetalLB's count of a pool's addresses by family, which its controller
// keeps up to date as it assigns and frees them (MetalLB v0.15 and later): assigned, and
// available (free). All zero for a family: not reported.
type IPAddressPoolStatus struct {
	AssignedIPv4  int64 `json:"assignedIPv4"`
	AssignedIPv6  int64 `json:"assignedIPv6"`
	AvailableIPv4 int64 `json:"availableIPv4"`
	AvailableIPv6 int64 `json:"availableIPv6"`
}

// IPAddressPool is MetalLB's pool (metallb.io/v1beta1), read only.
// +kubebuilder:object:root=true
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              IPAddressPoolSpec   `json:"spec"`
	Status            IPAddressPoolStatus `json:"status,omitempty"`
}

// IPAddressPoolList is a list of IPAddressPool.
// +kubebuilder:object:root=true
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPAddressPool{}, &IPAddressPoolList{})
}
