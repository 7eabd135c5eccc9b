// Package v1alpha1 is the local.sdn.cozystack.io/v1alpha1 API: IP addresses as a first-class,
// class-provisioned resource, modelled on storage (IPAddressClass ~ StorageClass, IPAddress ~
// PersistentVolume, IPAddressClaim ~ PersistentVolumeClaim).
//
// +kubebuilder:object:generate=true
// +groupName=local.sdn.cozystack.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "local.sdn.cozystack.io", Version: "v1alpha1"}
	// SchemeBuilder registers the API's types.
	SchemeBuilder = &schemeBuilder{}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// schemeBuilder collects the API's types; it keeps the package free of controller-runtime, so
// that importing the API brings in apimachinery alone.
type schemeBuilder struct{ objects []runtime.Object }

// Register adds types to be registered by AddToScheme.
func (b *schemeBuilder) Register(objects ...runtime.Object) {
	b.objects = append(b.objects, objects...)
}

// AddToScheme registers every type of the API, and the group-version's common options, in s.
func (b *schemeBuilder) AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, b.objects...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
