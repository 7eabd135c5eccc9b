package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPFamily selects which addresses a claim requests.
// +kubebuilder:validation:Enum=IPv4;IPv6;Dual
type IPFamily string

const (
	IPv4 IPFamily = "IPv4"
	IPv6 IPFamily = "IPv6"
	// Dual requests one IPv4 and one IPv6 address.
	Dual IPFamily = "Dual"
)

// ClaimPhase is the lifecycle phase of a claim.
// +kubebuilder:validation:Enum=Pending;Bound;Lost
type ClaimPhase string

const (
	// ClaimPending: some requested family has no address yet.
	ClaimPending ClaimPhase = "Pending"
	// ClaimBound: every requested family has an address.
	ClaimBound ClaimPhase = "Bound"
	// ClaimLost: the claim was Bound and an address went away or was lost.
	ClaimLost ClaimPhase = "Lost"
)

// IPAddressClaimSpec is a tenant's request for addresses. Only the tenant writes it.
// +kubebuilder:validation:XValidation:rule="!has(self.addressName) || self.family != 'Dual'",message="addressName names one address and cannot be used with family Dual"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="className is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.addressName) == has(oldSelf.addressName) && (!has(self.addressName) || self.addressName == oldSelf.addressName)",message="addressName is immutable"
type IPAddressClaimSpec struct {
	// className is the IPAddressClass to claim from. Empty means: the class of the address
	// named by addressName when that is set, otherwise the class marked as default (the class
	// the claim resolved to is recorded in status.className and kept). Immutable once the claim
	// exists, like a PersistentVolumeClaim's storageClassName: to change class, create a new
	// claim.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClassName string `json:"className,omitempty"`

	// family is IPv4 (the default), IPv6, or Dual (one address of each). Immutable once the
	// claim exists.
	// +optional
	// +kubebuilder:default=IPv4
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="family is immutable"
	Family IPFamily `json:"family,omitempty"`

	// addressName binds exactly this IPAddress (by object name, such as ip-203-0-113-7)
	// instead of any Available address of the class; it must be Available (or pre-bound to
	// this claim, without a uid or with this claim's: a Released address an earlier claim of
	// the same name left is not this claim's) and of the claim's family. A claim with addressName and no className takes
	// the class of that address. Single-family claims only. Immutable once the claim exists.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AddressName string `json:"addressName,omitempty"`
}

// ClaimedAddress is one address bound to a claim.
type ClaimedAddress struct {
	// name of the IPAddress object.
	Name string `json:"name"`
	// address is the IP itself.
	Address string `json:"address"`
	// family of the address: IPv4 or IPv6.
	Family IPFamily `json:"family"`
}

// ClaimUser names an object, in the claim's namespace, that one of the claim's addresses is
// attached to (a Service, with the MetalLB driver).
type ClaimUser struct {
	// kind of the object, such as Service.
	Kind string `json:"kind"`
	// name of the object, in the claim's namespace.
	Name string `json:"name"`
}

// IPAddressClaimStatus is written by the core only.
type IPAddressClaimStatus struct {
	// observedGeneration is the claim's metadata.generation that the core last wrote this status
	// for. A claim the core has not written a status for yet reads 0, so that tools comparing it
	// with metadata.generation (kstatus, and Flux and Argo CD through it) see the claim as still
	// in progress.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase: Pending (some family has no address yet), Bound (every family has one) or Lost
	// (was Bound, and an address went away or its driver lost it).
	// +optional
	Phase ClaimPhase `json:"phase,omitempty"`
	// className is the class the claim resolved to; it does not change afterwards, even if the
	// default class does.
	// +optional
	ClassName string `json:"className,omitempty"`
	// addresses bound to the claim, IPv4 first. Read the IPs with
	// jsonpath='{.status.addresses[*].address}'.
	// +optional
	// +listType=atomic
	Addresses []ClaimedAddress `json:"addresses,omitempty"`
	// usedBy lists the objects the claim's addresses are attached to, as their driver reports
	// them on the addresses (the Service that serves the addresses, with the MetalLB driver).
	// Empty while no object uses them.
	// +optional
	// +listType=atomic
	UsedBy []ClaimUser `json:"usedBy,omitempty"`
	// conditions: Bound, whose reason and message say what the claim waits for (such as
	// WaitingForAddress, ClassNotFound, NoDefaultClass, ClassNotAccepted, AddressNotFound,
	// AddressUnusable, AddressLost, AddressLimitReached, NamespaceNotAllowed, FamilyNotServed);
	// and Ready, the same verdict under the type that
	// kubectl wait --for=condition=Ready and generic health checks read: True with reason Bound
	// once every family has an address, False with Bound's reason otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPAddressClaim is a tenant's request for IP addresses of a class. The addresses belong to the
// claim, not to the Services that use them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ipclaim,categories=ipam
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.status.className`
// +kubebuilder:printcolumn:name="Family",type=string,JSONPath=`.spec.family`
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.status.addresses[*].address`
// +kubebuilder:printcolumn:name="Used-By",type=string,JSONPath=`.status.usedBy[*].name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPAddressClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec IPAddressClaimSpec `json:"spec,omitempty"`
	// status is written by the core only; a claim it has not written yet reads as phase Pending
	// with observedGeneration 0.
	// +optional
	// +kubebuilder:default={phase:"Pending",observedGeneration:0}
	Status IPAddressClaimStatus `json:"status,omitempty"`
}

// IPAddressClaimList is a list of IPAddressClaim.
// +kubebuilder:object:root=true
type IPAddressClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPAddressClaim{}, &IPAddressClaimList{})
}
