package plan

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// AutoClaimOf reports whether a claim of the Service's name is the Service's auto-claim: it
// carries the auto-claim annotation and, while it has a controller, that controller is this very
// Service (a re-created Service of the same name does not use the dying claim of the old one).
func AutoClaimOf(claim *ipamv1.IPAddressClaim, svc *corev1.Service) bool {
	if claim.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
		return false
	}
	if owner := metav1.GetControllerOf(claim); owner != nil && owner.Kind == "Service" && owner.UID != svc.UID {
		return false
	}
	return true
}

// Orphaned decides whether the holds labelled with address (nil: no such IPAddress) are left
// over: no address of that name, or one being deleted whose teardown is done (the core let go
// and this driver's finalizer is gone).
func Orphaned(name string, a *ipamv1.IPAddress) bool {
	if name == "" || a == nil {
		return true
	}
	return driverkit.TeardownMayStart(a) && !slices.Contains(a.Finalizers, Finalizer)
}
