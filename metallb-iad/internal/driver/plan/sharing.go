package plan

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The hold shares its address (docs/design.md#the-hold-shares-its-address): a hold carries a
// sharing key of the driver's (HoldKey: its claim's), and a tenant Service pinned to the claim's
// IPs with the same key gets them from MetalLB while the holds still have them. MetalLB shares an IP between Services whose sharing
// keys are equal, whose backend keys are equal (empty unless externalTrafficPolicy is Local and
// the Service has a selector) and whose ports do not collide; the hold is selectorless and uses
// HoldPort alone. So attaching does not wait for MetalLB to process the hold's deletion (its
// queue may hold the tenant's key first), and the hold stays while the Service is attached:
// detaching leaves the IP held as it was. A Service that cannot share gets the hand-over of
// old: the hold goes first, then the pin.

// HoldPort is the one port of a placeholder (TCP): a tenant Service that uses it cannot share
// the IP with the hold.
const HoldPort = 1

// AnnotationCannotShare is set on a Service in the driver's cache only (never written), by the
// cache's transform, when CannotShare is not empty for the Service as the apiserver has it: the
// cache keeps neither ports nor selectors.
const AnnotationCannotShare = "metallb.drivers.local.sdn.cozystack.io/cached-cannot-share"

// CannotShare says why MetalLB would refuse the Service an IP its hold has under the driver's
// sharing key, "" when it would not.
func CannotShare(svc *corev1.Service) string {
	if why, ok := svc.Annotations[AnnotationCannotShare]; ok {
		return why
	}
	return CannotShareSpec(svc)
}

// CannotShareSpec is CannotShare from the Service's spec alone.
func CannotShareSpec(svc *corev1.Service) string {
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && len(svc.Spec.Selector) > 0 {
		return "externalTrafficPolicy Local with a selector"
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == HoldPort && (p.Protocol == corev1.ProtocolTCP || p.Protocol == "") {
			return "port TCP/1, which the hold uses"
		}
	}
	return ""
}

// SharingKeyPrefix starts every sharing key of the driver (metallb.io/allow-shared-ip): the
// prefix and a uid, of a claim (the key its Services and the holds of its addresses carry) or of
// an address bound to none (its hold's). A uid cannot be guessed, and a tenant cannot read another
// namespace's claims, nor write the annotation at all (the service-pins policy): no Service but
// the driver's own can share a held IP, even one written by a principal the policy lets through.
const SharingKeyPrefix = "metallb.drivers.local.sdn.cozystack.io/"

// SharingKey is the driver's sharing key for uid ("" for none).
func SharingKey(uid types.UID) string {
	if uid == "" {
		return ""
	}
	return SharingKeyPrefix + string(uid)
}

// HoldKey is the sharing key of an address's hold: its claim's, or the address's own while it
// is bound to no claim.
func HoldKey(a *ipamv1.IPAddress) string {
	if r := a.Spec.ClaimRef; r != nil && r.UID != "" {
		return SharingKey(r.UID)
	}
	return SharingKey(a.UID)
}

// DriverKey is the driver's sharing key a Service carries, "" when it carries none.
func DriverKey(svc *corev1.Service) string {
	if k := svc.Annotations[metallb.AnnotationAllowSharedIP]; len(k) > len(SharingKeyPrefix) && strings.HasPrefix(k, SharingKeyPrefix) {
		return k
	}
	return ""
}

// Shares reports whether MetalLB lets a tenant Service that carries key have the IP of a hold
// while the hold has it.
func Shares(svc *corev1.Service, key string, hold *corev1.Service) bool {
	return key != "" && DriverKey(hold) == key && CannotShare(svc) == ""
}
