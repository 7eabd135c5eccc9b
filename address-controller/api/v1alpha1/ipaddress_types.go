package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AddressPhase is the lifecycle phase of an IPAddress, derived by the core on every pass.
// +kubebuilder:validation:Enum=Available;Bound;Released;Conflict;Lost
type AddressPhase string

const (
	// AddressAvailable: no claim; any claim of the class and family may bind it.
	AddressAvailable AddressPhase = "Available"
	// AddressBound: bound to a live claim.
	AddressBound AddressPhase = "Bound"
	// AddressReleased: its claim is gone; kept under Retain until an admin or releaseDelay frees it.
	AddressReleased AddressPhase = "Released"
	// AddressConflict: the driver found something else holding the IP.
	AddressConflict AddressPhase = "Conflict"
	// AddressLost: the driver can no longer hold the IP.
	AddressLost AddressPhase = "Lost"
)

// ClaimReference points at the claim an address is bound to.
type ClaimReference struct {
	// namespace of the claim.
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// name of the claim.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// uid of the claim; the core fills it in when an admin pre-binds by name only. An address
	// whose uid names an older claim of the same name is not bound to the new one.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// AttachmentReference names the object an address is attached to (a Service, for the MetalLB
// driver). Written by the driver; read-only for everyone else.
type AttachmentReference struct {
	// kind of the object using the address, such as Service.
	Kind string `json:"kind"`
	// namespace of the object using the address (empty for a cluster-scoped object).
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the object using the address.
	Name string `json:"name"`
	// uid of the object using the address, so that a re-created object of the same name is
	// told apart.
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// IPAddressSpec is one IP address of a class.
type IPAddressSpec struct {
	// address is the IP address in canonical form (203.0.113.7, 2001:db8::7). Immutable.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip.isCanonical(self)",message="address must be an IPv4 or IPv6 address in canonical form, such as 203.0.113.7 or 2001:db8::7"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="address is immutable"
	Address string `json:"address"`

	// className is the IPAddressClass the address belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable"
	ClassName string `json:"className"`

	// reclaimPolicy applies when the bound claim is deleted; copied from the class when the
	// address is provisioned.
	// +optional
	// +kubebuilder:default=Retain
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// claimRef is the claim the address is bound to: the only record of a binding. An admin
	// may clear it on a Released address to make it Available again.
	// +optional
	ClaimRef *ClaimReference `json:"claimRef,omitempty"`
}

// IPAddressStatus is written by the core (phase, releasedAt) and the driver (attachedTo,
// driver conditions).
type IPAddressStatus struct {
	// phase: Available, Bound, Released, Conflict or Lost.
	// +optional
	Phase AddressPhase `json:"phase,omitempty"`
	// releasedAt is when the address became Released; releaseDelay counts from here.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
	// attachedTo is the object currently using the address (written by the driver).
	// +optional
	AttachedTo *AttachmentReference `json:"attachedTo,omitempty"`
	// conditions: Held, Conflict and Lost are written by the driver.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPAddress is one IP address, provisioned by a driver (or pre-provisioned by an admin) and
// bound to at most one claim. Its name is derived from the address (see AddressName), so one IP
// never has two IPAddress objects.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipaddr,categories=ipam
// +kubebuilder:selectablefield:JSONPath=".spec.claimRef.namespace"
// +kubebuilder:selectablefield:JSONPath=".spec.claimRef.name"
// +kubebuilder:validation:XValidation:rule="self.spec.address.contains(':') ? (self.metadata.name.matches('^ip-([0-9a-f]{4}-){7}[0-9a-f]{4}$') && ip(self.metadata.name.substring(3).replace('-', ':')) == ip(self.spec.address)) : self.metadata.name == 'ip-' + self.spec.address.replace('.', '-')",message="metadata.name must be derived from spec.address: ip-203-0-113-7 for 203.0.113.7, ip-2001-0db8-0000-0000-0000-0000-0000-0007 for 2001:db8::7"
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Claim-Namespace",type=string,JSONPath=`.spec.claimRef.namespace`
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.spec.claimRef.name`
// +kubebuilder:printcolumn:name="Attached-To",type=string,JSONPath=`.status.attachedTo.name`,priority=1
// +kubebuilder:printcolumn:name="Reclaim",type=string,JSONPath=`.spec.reclaimPolicy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPAddress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec IPAddressSpec `json:"spec"`
	// +optional
	Status IPAddressStatus `json:"status,omitempty"`
}

// IPAddressList is a list of IPAddress.
// +kubebuilder:object:root=true
type IPAddressList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddress `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPAddress{}, &IPAddressList{})
}
