package policycel

import "strings"

// Annotations and the auto-claim mark the parking policies read, as the core spells them
// (address-controller/api/v1alpha1).
const (
	AnnotationServiceClaim   = "local.sdn.cozystack.io/ip-address-claim"
	AnnotationServiceClass   = "local.sdn.cozystack.io/ip-address-class"
	AnnotationAutoClaim      = "local.sdn.cozystack.io/auto-claim"
	AnnotationAutoClaimClass = "ipaddressclass.local.sdn.cozystack.io/is-auto-claim-class"
	// LabelDriverService marks a driver's own Service: the core neither caches nor auto-claims it.
	LabelDriverService = "local.sdn.cozystack.io/driver"
)

// MetalLBAnnotations are MetalLB's pool, pin and sharing annotations under both prefixes.
var MetalLBAnnotations = ProtectedAnnotations[:6]

// ParkingRule is docs/design.md#parking written as plain Go, independently of the policies' CEL
// (and of the core's code, which this module does not import; the e2e module's policymodel test
// compares it with autoclaim.SkipAsked): which policy parks the Service of req, with the class for
// the auto-claim one ("metallb-iad-park-auto-claimed/<class>"), or "" for neither.
func ParkingRule(req ParkRequest) string {
	obj := req.Object
	ann := annotations(obj)
	sp := spec(obj)
	if str(sp["type"]) != "LoadBalancer" || str(sp["loadBalancerClass"]) != "" || str(sp["loadBalancerIP"]) != "" {
		return ""
	}
	for _, k := range MetalLBAnnotations {
		if _, ok := ann[k]; ok {
			return "" // asked another way, or parked or pinned already
		}
	}
	if str(ann[AnnotationServiceClaim]) != "" {
		return ParkClaimedPolicy
	}
	md, _ := obj["metadata"].(map[string]any)
	if md["deletionTimestamp"] != nil {
		return ""
	}
	if v, ok := ann[AnnotationAutoClaim]; ok && strings.EqualFold(str(v), "false") {
		return "" // opted out, compared as the core does
	}
	if lbl, _ := md["labels"].(map[string]any); lbl != nil {
		if _, ok := lbl[LabelDriverService]; ok {
			return "" // a driver's own Service: the core never sees it
		}
	}
	if req.OldObject != nil && (hasIngress(obj) || hasIngress(req.OldObject)) {
		return "" // an existing Service with an address keeps it
	}
	named := str(ann[AnnotationServiceClass])
	for _, c := range req.Classes {
		cmd, _ := c["metadata"].(map[string]any)
		if str(spec(c)["provisioner"]) != Provisioner || cmd["deletionTimestamp"] != nil {
			continue
		}
		marks, _ := cmd["annotations"].(map[string]any)
		if named != "" && cmd["name"] == named || named == "" && marks[AnnotationAutoClaimClass] == "true" {
			return ParkAutoClaimedPolicy + "/" + str(cmd["name"])
		}
	}
	return ""
}

func hasIngress(obj map[string]any) bool {
	st, _ := obj["status"].(map[string]any)
	lb, _ := st["loadBalancer"].(map[string]any)
	ing, _ := lb["ingress"].([]any)
	return len(ing) > 0
}
