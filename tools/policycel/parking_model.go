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
		if (named != "" && cmd["name"] == named || named == "" && marks[AnnotationAutoClaimClass] == "true") && servesNamespace(c, req.namespaceObject()) {
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

// servesNamespace: the class serves the namespace's claims: its spec.namespaceSelector matches the
// namespace's labels (when set), and its status.servedNamespaces names the namespace or has a
// selector that matches them (when set). A selector Kubernetes would refuse matches nothing.
func servesNamespace(class, ns map[string]any) bool {
	nmd, _ := ns["metadata"].(map[string]any)
	labels, _ := nmd["labels"].(map[string]any)
	if sel, ok := spec(class)["namespaceSelector"].(map[string]any); ok && !selectorMatches(sel, labels) {
		return false
	}
	st, _ := class["status"].(map[string]any)
	served, ok := st["servedNamespaces"].(map[string]any)
	if !ok {
		return true
	}
	names, _ := served["names"].([]any)
	for _, n := range names {
		if n == nmd["name"] {
			return true
		}
	}
	sels, _ := served["selectors"].([]any)
	for _, s := range sels {
		if m, ok := s.(map[string]any); ok && selectorMatches(m, labels) {
			return true
		}
	}
	return false
}

// selectorMatches matches a LabelSelector (unstructured) against labels, as Kubernetes does.
func selectorMatches(sel, labels map[string]any) bool {
	ml, _ := sel["matchLabels"].(map[string]any)
	for k, v := range ml {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	exprs, _ := sel["matchExpressions"].([]any)
	for _, e := range exprs {
		m, _ := e.(map[string]any)
		values, _ := m["values"].([]any)
		got, has := labels[str(m["key"])]
		in := false
		for _, v := range values {
			in = in || has && v == got
		}
		var ok bool
		switch str(m["operator"]) {
		case "In":
			ok = len(values) > 0 && in
		case "NotIn":
			ok = len(values) > 0 && !in
		case "Exists":
			ok = len(values) == 0 && has
		case "DoesNotExist":
			ok = len(values) == 0 && !has
		}
		if !ok {
			return false
		}
	}
	return true
}
