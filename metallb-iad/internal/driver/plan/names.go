package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

const (
	// Provisioner is the driver's name, as IPAddressClass.spec.provisioner spells it.
	Provisioner = parking.Provisioner
	// Finalizer is the driver's teardown finalizer on the addresses it provisions.
	Finalizer = "metallb.drivers.local.sdn.cozystack.io/teardown"
	// AnnotationPinned marks a tenant Service the driver pinned; only such pins are removed.
	AnnotationPinned = "metallb.drivers.local.sdn.cozystack.io/pinned"
	// AnnotationReleasing records, while a pin is being removed, the IPs MetalLB must let go of.
	AnnotationReleasing = "metallb.drivers.local.sdn.cozystack.io/releasing"
	// AnnotationNudge is bumped on a placeholder MetalLB gave up on, to make it retry (and on an
	// attached Service once the driver released an allocation MetalLB kept for its IP).
	AnnotationNudge = "metallb.drivers.local.sdn.cozystack.io/nudge"
	// AnnotationPoolState records, on a provisioning placeholder, the state of its pool
	// (PoolState.Stamp) when it was created or last nudged.
	AnnotationPoolState = "metallb.drivers.local.sdn.cozystack.io/pool-state"
	// ClassParameterPool names the MetalLB IPAddressPool of a class.
	ClassParameterPool = "pool"

	// LabelRole is "provisioning" on a placeholder that waits for MetalLB to pick an address for a
	// claim, "hold" on one that holds an IPAddress, "release" on a release Service.
	LabelRole = "metallb.drivers.local.sdn.cozystack.io/role"
	// LabelAddress names the IPAddress a hold placeholder holds (or a release Service frees).
	LabelAddress = "metallb.drivers.local.sdn.cozystack.io/address"
	// LabelClaimUID and LabelFamily identify what a provisioning placeholder is for.
	LabelClaimUID = "metallb.drivers.local.sdn.cozystack.io/claim-uid"
	LabelFamily   = "metallb.drivers.local.sdn.cozystack.io/family"
	// AnnotationClaim records "namespace/name" of the claim a placeholder was made for.
	AnnotationClaim = "metallb.drivers.local.sdn.cozystack.io/claim"

	RoleProvisioning = "provisioning"
	RoleHold         = "hold"
	// RoleRelease is a short-lived ClusterIP Service under a name MetalLB keeps an allocation
	// for, which makes MetalLB let go of it (plan_release.go); never a placeholder.
	RoleRelease = "release"
)

// ProtectedServiceAnnotations are the annotations through which any writer of a Service can make
// MetalLB pick or pin an address. Tenants may not set them (see the admission policy); the
// driver never pins a Service that carries one it did not write.
var ProtectedServiceAnnotations = []string{
	metallb.AnnotationLoadBalancerIPs, metallb.AnnotationAddressPool, metallb.AnnotationAllowSharedIP,
	metallb.LegacyPrefix + "loadBalancerIPs", metallb.LegacyPrefix + "address-pool", metallb.LegacyPrefix + "allow-shared-ip",
}

// DriverAnnotations are the annotations the driver writes on Services (its own placeholders and
// the tenant Services it pins), which its Service cache keeps beside the core's
// (servicecache.StripKeeping).
var DriverAnnotations = []string{AnnotationPinned, AnnotationReleasing, AnnotationNudge, AnnotationPoolState, AnnotationClaim}

// familyTag is the short form of a family used in names.
func familyTag(f ipamv1.IPFamily) string {
	if f == ipamv1.IPv6 {
		return "v6"
	}
	return "v4"
}

// ProvisioningName is the deterministic name of the n-th provisioning placeholder of a claim's
// family (n is almost always 0; it grows only when a placeholder was handed over to hold an
// address that another claim already owned).
func ProvisioningName(claimUID string, family ipamv1.IPFamily, n int) string {
	sum := sha256.Sum256([]byte(claimUID))
	name := "claim-" + hex.EncodeToString(sum[:6]) + "-" + familyTag(family)
	if n > 0 {
		name += fmt.Sprintf("-%d", n)
	}
	return name
}

// HoldName is the name of the placeholder the driver creates to hold an existing address.
func HoldName(addressName string) string { return "hold-" + addressName }

// IngressIPs returns the parsed IPs of a Service's load-balancer status.
func IngressIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// LinkedClaim applies the link rule: the claim named by the Service's ip-address-claim
// annotation, else (auto-claim) a claim with the Service's own name; always in the Service's
// namespace. autoClaim reports which of the two applies: an auto-claim link only holds when
// that claim carries the auto-claim annotation.
func LinkedClaim(svc *corev1.Service) (name string, autoClaim bool) {
	if n := svc.Annotations[ipamv1.AnnotationServiceClaim]; n != "" {
		return n, false
	}
	return svc.Name, true
}

// PinValue is the loadBalancerIPs annotation for a claim's addresses, IPv4 first.
func PinValue(addresses []ipamv1.ClaimedAddress) string {
	var ips []string
	for _, f := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		for _, a := range addresses {
			if a.Family == f {
				ips = append(ips, a.Address)
			}
		}
	}
	return strings.Join(ips, ",")
}

// FamiliesFit reports whether a Service's IP families are exactly those of a claim.
func FamiliesFit(svc *corev1.Service, claim ipamv1.IPFamily) bool {
	var have []string
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			have = append(have, string(ipamv1.IPv4))
		case corev1.IPv6Protocol:
			have = append(have, string(ipamv1.IPv6))
		}
	}
	var want []string
	for _, f := range claim.Families() {
		want = append(want, string(f))
	}
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(have, want)
}

// ForeignPins lists the MetalLB annotations on a Service that the driver did not write (the
// parking pool of the chart's admission policy is not one: it requests nothing).
func ForeignPins(svc *corev1.Service) []string {
	var out []string
	for _, a := range ProtectedServiceAnnotations {
		if _, ok := svc.Annotations[a]; !ok {
			continue
		}
		if (a == metallb.AnnotationLoadBalancerIPs || a == metallb.AnnotationAllowSharedIP && DriverKey(svc) != "") &&
			svc.Annotations[AnnotationPinned] == "true" {
			continue // the driver's pin, and its sharing key beside it
		}
		if a == autoclaim.ParkingAnnotation && autoclaim.Parked(svc) {
			continue // parked by the chart's admission policy until the driver pins it
		}
		out = append(out, a)
	}
	if svc.Spec.LoadBalancerIP != "" {
		out = append(out, "spec.loadBalancerIP")
	}
	return out
}

// ParseIPList parses a comma-separated list of IPs (a loadBalancerIPs pin), skipping what is
// not an IP; the result is canonical, so that "2001:0db8::7" and "2001:db8::7" compare equal.
func ParseIPList(s string) []netip.Addr {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if ip, err := netip.ParseAddr(strings.TrimSpace(f)); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// RequestedIPs are the IPs a Service requests from MetalLB other than through this driver's pin:
// a loadBalancerIPs pin the driver did not write (or its legacy metallb.universe.tf twin, which
// MetalLB still reads), and spec.loadBalancerIP.
func RequestedIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	if svc.Annotations[AnnotationPinned] != "true" {
		out = PinIPs(svc)
	}
	out = append(out, ParseIPList(svc.Annotations[metallb.LegacyPrefix+"loadBalancerIPs"])...)
	out = append(out, ParseIPList(svc.Spec.LoadBalancerIP)...)
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

// PinIPs are the IPs a Service's metallb.io/loadBalancerIPs pin requests.
func PinIPs(svc *corev1.Service) []netip.Addr {
	return ParseIPList(svc.Annotations[metallb.AnnotationLoadBalancerIPs])
}

// ExternalIPs are the parsed IPs of a Service's spec.externalIPs.
func ExternalIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, s := range svc.Spec.ExternalIPs {
		if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// SameIPs reports whether two lists hold the same addresses, in any order.
func SameIPs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	return slices.Equal(x, y)
}
