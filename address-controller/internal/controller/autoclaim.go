package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
)

// autoClaimSkip says why auto-claim must not create a claim for a Service ("" when it may),
// from what the Service's author asked for: a type, a claim, an opt-out, a load-balancer
// class, an IP or a MetalLB annotation (autoClaimSkipAsked).
//
// An address already in the Service's status skips it only when the Service had it before
// auto-claim applied to it, that is when it was created before enabledAt: the time the
// auto-claim class was marked (zero when the Service names its class itself, which asks for a
// reserved address whatever it has). A Service created afterwards may have been given an
// address by an auto-assigning pool in the moment before its claim existed: a race, not a
// choice, and no reason to leave it without the reserved address it is owed.
func autoClaimSkip(svc *corev1.Service, enabledAt time.Time) string {
	if why := autoClaimSkipAsked(svc); why != "" {
		return why
	}
	if autoclaim.HadAddressBefore(svc, enabledAt) {
		return "had an address before auto-claim was enabled"
	}
	return ""
}

// autoClaimSkipAsked is the part of autoClaimSkip that depends on the Service alone (shared
// with drivers: autoclaim.SkipAsked).
func autoClaimSkipAsked(svc *corev1.Service) string { return autoclaim.SkipAsked(svc) }

// claimFamily maps a Service's IP families to a claim family: two families are Dual.
func claimFamily(svc *corev1.Service) ipamv1.IPFamily {
	switch {
	case len(svc.Spec.IPFamilies) >= 2:
		return ipamv1.Dual
	case len(svc.Spec.IPFamilies) == 1 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol:
		return ipamv1.IPv6
	}
	return ipamv1.IPv4
}
