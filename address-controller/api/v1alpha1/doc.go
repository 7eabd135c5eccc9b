// Package v1alpha1 is the local.sdn.cozystack.io/v1alpha1 API: IP addresses as a first-class,
// class-provisioned resource, modelled on storage (IPAddressClass ~ StorageClass, IPAddress ~
// PersistentVolume, IPAddressClaim ~ PersistentVolumeClaim).
//
// +kubebuilder:object:generate=true
// +groupName=local.sdn.cozystack.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "local.sdn.cozystack.io", Version: "v1alpha1"}
	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
