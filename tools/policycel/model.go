package policycel

import (
	"slices"
	"strings"
)

// The parking value of MetalLB's pool annotation, as the core spells it (ParkingPool
// and ParkingAnnotation in address-controller/pkg/sdk/autoclaim; this module does not
// depend on the core's, and TestParkingConstantsAreTheCores compares them).
const (
	ParkingPool       = "metallb-iad/parked"
	ParkingAnnotation = "metallb.io/address-pool"
)

// ProtectedAnnotations are the Service annotations the service-pins policy protects
// (docs/design.md#the-service-pins-policy): MetalLB's pool, pin and sharing annotations under both
// prefixes, and the driver's pinned marker; and the driver's releasing record (with which the
// driver finishes an unpin: a tenant could otherwise make it take back an address it does not hold,
// or hide a Conflict).
var ProtectedAnnotations = []string{
	"metallb.io/loadBalancerIPs", "metallb.io/address-pool", "metallb.io/allow-shared-ip",
	"metallb.universe.tf/loadBalancerIPs", "metallb.universe.tf/address-pool", "metallb.universe.tf/allow-shared-ip",
	"metallb.drivers.local.sdn.cozystack.io/pinned", "metallb.drivers.local.sdn.cozystack.io/releasing",
}

// DefaultAllowedGroups are the chart's default exempt groups.
var DefaultAllowedGroups = []string{"system:masters", "kubeadm:cluster-admins", "cozystack-cluster-admin"}

// Rule is docs/design.md#the-service-pins-policy written as plain Go, independently of the policy's
// CEL: who is exempt, and which fields a write may not set, change or remove.
type Rule struct {
	DriverUser    string
	AllowedUsers  []string
	AllowedGroups []string
	// ExternalIPs: adding an address to spec.externalIPs is protected too (CVE-2020-8554);
	// dropping one stays allowed. Set when the rendered policy reads externalIPs.
	ExternalIPs bool
}

// Allows says whether the rule admits req.
func (r Rule) Allows(req Request) bool {
	if req.Username == r.DriverUser || slices.Contains(r.AllowedUsers, req.Username) ||
		slices.ContainsFunc(req.Groups, func(g string) bool { return slices.Contains(r.AllowedGroups, g) }) {
		return true
	}
	return len(r.Changed(req)) == 0
}

// Changed lists the protected fields req sets, changes or removes. MetalLB's pool annotation
// with the parking value (ParkingPool) counts as absent: it requests no address.
func (r Rule) Changed(req Request) []string {
	var out []string
	newAnn, oldAnn := protected(annotations(req.Object)), protected(annotations(req.OldObject))
	for _, k := range ProtectedAnnotations {
		nv, nok := newAnn[k]
		ov, ook := oldAnn[k]
		if nok != ook || nv != ov {
			out = append(out, "metadata.annotations["+k+"]")
		}
	}
	if str(spec(req.Object)["loadBalancerIP"]) != str(spec(req.OldObject)["loadBalancerIP"]) {
		out = append(out, "spec.loadBalancerIP")
	}
	if r.ExternalIPs {
		old := strs(spec(req.OldObject)["externalIPs"])
		for _, ip := range strs(spec(req.Object)["externalIPs"]) {
			if !slices.Contains(old, ip) {
				out = append(out, "spec.externalIPs")
				break
			}
		}
	}
	return out
}

// protected is ann without the parking value of the pool annotation.
func protected(ann map[string]any) map[string]any {
	if ann[ParkingAnnotation] != ParkingPool {
		return ann
	}
	out := map[string]any{}
	for k, v := range ann {
		if k != ParkingAnnotation {
			out[k] = v
		}
	}
	return out
}

func annotations(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	a, _ := md["annotations"].(map[string]any)
	return a
}

func spec(obj map[string]any) map[string]any {
	s, _ := obj["spec"].(map[string]any)
	return s
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		out = append(out, str(x))
	}
	return out
}

// MentionsExternalIPs reports whether the policy reads spec.externalIPs.
func (p *Policy) MentionsExternalIPs() bool {
	for _, v := range p.Spec.Variables {
		if strings.Contains(v.Expression, "externalIPs") {
			return true
		}
	}
	for _, v := range p.Spec.Validations {
		if strings.Contains(v.Expression, "externalIPs") {
			return true
		}
	}
	return false
}
