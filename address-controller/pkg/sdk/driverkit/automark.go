package driverkit

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// MarkAutoClaim copies a claim's auto-claim mark onto an address the driver is about to create
// pre-bound to it (call it on PreBoundAddress's result). The core deletes a marked address whose
// claim is gone whatever the reclaim policy, as it deletes every address of an auto-claim: the
// mark is what it decides from when the driver's address arrives after the claim has gone.
func MarkAutoClaim(a *ipamv1.IPAddress, claim *ipamv1.IPAddressClaim) *ipamv1.IPAddress {
	if ref := metav1.GetControllerOf(claim); ref != nil && ref.Kind == "Service" && ref.APIVersion == "v1" &&
		claim.Annotations[ipamv1.AnnotationAutoClaim] == "true" {
		metav1.SetMetaDataAnnotation(&a.ObjectMeta, ipamv1.AnnotationAutoClaim, "true")
	}
	return a
}
