package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReclaimPolicy says what happens to an address when its claim is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type ReclaimPolicy string

const (
	// ReclaimRetain keeps the address, Released, for the same tenant to take back or an admin to
	// free.
	ReclaimRetain ReclaimPolicy = "Retain"
	// ReclaimDelete deletes the address, returning the IP to its pool.
	ReclaimDelete ReclaimPolicy = "Delete"
)

// IPAddressClassSpec describes a kind of address and the driver that provisions it.
type IPAddressClassSpec struct {
	// provisioner is the name of the driver that provisions addresses of this class, for
	// example metallb.drivers.local.sdn.cozystack.io. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="provisioner is immutable"
	Provisioner string `json:"provisioner"`

	// reclaimPolicy is copied to every address the class provisions and decides what happens to
	// it when its claim goes: with Retain (the default) the address turns Released and stays
	// reserved in the old claim's name; with Delete it is deleted at once.
	// +optional
	// +kubebuilder:default=Retain
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// releaseDelay, when set, returns a Released address of this class to Available once it
	// has been Released for this long (for example 720h). When it is unset, nothing frees a
	// Released address automatically: it waits for an admin to delete the address or to
	// clear its claimRef.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="releaseDelay must not be negative"
	ReleaseDelay *metav1.Duration `json:"releaseDelay,omitempty"`

	// maxAddressesPerNamespace, when set, caps the addresses of this class that the claims of
	// one namespace may hold. Every address of the class whose claimRef names the namespace
	// counts, Bound or Released (a Released address until an admin frees it or releaseDelay
	// passes), and so does every address a claim of the namespace has asked the driver for and
	// not received yet. A claim that would go over the limit stays Pending with reason
	// AddressLimitReached: it binds nothing and asks no driver. Lowering the limit takes no
	// address away. Unset: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxAddressesPerNamespace *int32 `json:"maxAddressesPerNamespace,omitempty"`

	// namespaceSelector, when set, chooses by their labels the namespaces whose claims may take
	// addresses of this class (the label kubernetes.io/metadata.name selects namespaces by
	// name). A claim of any other namespace stays Pending with reason NamespaceNotAllowed: it
	// binds nothing and asks no driver. Changing the selector takes no address away. Unset:
	// every namespace may claim, unless the class's driver reports that its backend serves only
	// some of them (status.servedNamespaces); an empty selector ({}) matches every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// parameters are passed to the driver, which documents them (the MetalLB driver reads
	// "pool"). The core does not interpret them.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`
}

// IPAddressClassStatus is written by the class's driver.
type IPAddressClassStatus struct {
	// conditions: Accepted (True, or False with a reason) is written by the driver.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// families are the IP families the class's driver can provision and serve, as it reports
	// them together with Accepted (the MetalLB driver: the families of its pool's addresses that
	// the cluster's Services can have). A claim asking for a family not listed stays Pending with
	// reason FamilyNotServed and is given nothing, not even its other family. Empty: the driver
	// reports none, and claims of every family are tried.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.all(f, f == 'IPv4' || f == 'IPv6')",message="families lists IPv4 and IPv6 only"
	Families []IPFamily `json:"families,omitempty"`

	// capacity counts, per family, the addresses of the class's backend as the driver reports
	// them: how many it has, how many IPAddresses of the class exist, and how many are left.
	// The driver refreshes it as addresses come and go, at most about once every 30 seconds per
	// class, so it may lag that long. Empty: the driver reports no capacity.
	// +optional
	// +listType=map
	// +listMapKey=family
	// +kubebuilder:validation:MaxItems=2
	Capacity []FamilyCapacity `json:"capacity,omitempty"`

	// servedNamespaces, when the class's driver sets it, are the only namespaces its backend
	// serves addresses of this class to (the MetalLB driver copies them from its pool's
	// spec.serviceAllocation). Claims of other namespaces are refused as spec.namespaceSelector
	// refuses them. Unset: the backend serves every namespace.
	// +optional
	ServedNamespaces *NamespaceSet `json:"servedNamespaces,omitempty"`
}

// FamilyCapacity is how many addresses of one family a class's backend has, how many of them are
// reserved, and how many are left.
type FamilyCapacity struct {
	// family: IPv4 or IPv6.
	// +kubebuilder:validation:Enum=IPv4;IPv6
	Family IPFamily `json:"family"`
	// size is the number of addresses of the family in the backend (the MetalLB driver: every
	// address of the pool's CIDRs and ranges of the family), at most 9223372036854775807 (an IPv6
	// range larger than that reads as that).
	// +kubebuilder:validation:Minimum=0
	Size int64 `json:"size"`
	// reserved is the number of IPAddresses of the class and family, in any phase.
	// +kubebuilder:validation:Minimum=0
	Reserved int64 `json:"reserved"`
	// free is size minus reserved, and never below 0. Addresses of the backend that something
	// other than a reservation uses (another Service MetalLB gave one to) are not subtracted.
	// +kubebuilder:validation:Minimum=0
	Free int64 `json:"free"`
}

// NamespaceSet is a set of namespaces: those it names and those any of its selectors matches. An
// empty set holds no namespace.
type NamespaceSet struct {
	// names lists namespaces by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	Names []string `json:"names,omitempty"`
	// selectors match namespaces by their labels.
	// +optional
	// +listType=atomic
	Selectors []metav1.LabelSelector `json:"selectors,omitempty"`
}

// IPAddressClass is a kind of IP address tenants can claim, and the driver that provisions it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipclass,categories=ipam
// +kubebuilder:printcolumn:name="Provisioner",type=string,JSONPath=`.spec.provisioner`
// +kubebuilder:printcolumn:name="Reclaim",type=string,JSONPath=`.spec.reclaimPolicy`
// +kubebuilder:printcolumn:name="Release-Delay",type=string,JSONPath=`.spec.releaseDelay`
// +kubebuilder:printcolumn:name="Max-Per-Namespace",type=integer,JSONPath=`.spec.maxAddressesPerNamespace`,priority=1
// +kubebuilder:printcolumn:name="Families",type=string,JSONPath=`.status.families`,priority=1
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="IPv4-Free",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv4")].free`
// +kubebuilder:printcolumn:name="IPv6-Free",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv6")].free`
// +kubebuilder:printcolumn:name="IPv4-Size",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv4")].size`,priority=1
// +kubebuilder:printcolumn:name="IPv4-Reserved",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv4")].reserved`,priority=1
// +kubebuilder:printcolumn:name="IPv6-Size",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv6")].size`,priority=1
// +kubebuilder:printcolumn:name="IPv6-Reserved",type=integer,JSONPath=`.status.capacity[?(@.family=="IPv6")].reserved`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPAddressClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec IPAddressClassSpec `json:"spec"`
	// +optional
	Status IPAddressClassStatus `json:"status,omitempty"`
}

// IPAddressClassList is a list of IPAddressClass.
// +kubebuilder:object:root=true
type IPAddressClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IPAddressClass{}, &IPAddressClassList{})
}
