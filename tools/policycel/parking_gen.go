package policycel

// Generated Service writes and IPAddressClasses for the parking policies' fuzz test: every choice
// comes from one byte.

// Provisioner is the metallb-iad driver's provisioner name, as its classes carry it.
const Provisioner = "metallb.drivers.local.sdn.cozystack.io"

var (
	parkTypes        = []string{"LoadBalancer", "LoadBalancer", "ClusterIP", "NodePort", ""}
	parkLBClasses    = []string{"", "", "example.com/lb"}
	parkLBIPs        = []string{"", "", "203.0.113.9"}
	parkClaimValues  = []*string{nil, nil, ptr(""), ptr("web-ip")}
	parkAutoValues   = []*string{nil, nil, ptr("false"), ptr("FALSE"), ptr("False"), ptr("fal\u017fe"), ptr("true"), ptr(""), ptr("no")}
	parkClassValues  = []*string{nil, nil, ptr(""), ptr("gold"), ptr("silver")}
	parkMetalLBValue = []*string{nil, nil, nil, nil, nil, ptr("metallb-iad/parked"), ptr("pool-a"), ptr("203.0.113.10")}
	parkIngress      = [][]any{nil, nil, {map[string]any{"ip": "203.0.113.11"}}, {}}
	parkClassNames   = []string{"gold", "silver", "bronze"}
	parkProvisioners = []string{Provisioner, Provisioner, "other.drivers.example.com"}
	parkMarks        = []*string{nil, ptr("true"), ptr("false"), ptr("True")}
	// The driver label, on a few Services (its value does not matter, an empty one included).
	parkDriverLabel = []*string{nil, nil, nil, nil, nil, ptr(Provisioner), ptr("")}
)

// GenParkRequest builds a Service write and the classes that exist from b (missing bytes read
// as 0).
func GenParkRequest(b []byte) ParkRequest {
	i := 0
	next := func() int {
		v := 0
		if i < len(b) {
			v = int(b[i])
		}
		i++
		return v
	}
	pick := func(n int) int { return next() % n }
	create := pick(3) == 0
	svc := func() map[string]any {
		s := service()
		spec := s["spec"].(map[string]any)
		if t := parkTypes[pick(len(parkTypes))]; t != "" {
			spec["type"] = t
		}
		setSpec(s, "loadBalancerClass", parkLBClasses[pick(len(parkLBClasses))])
		setSpec(s, "loadBalancerIP", parkLBIPs[pick(len(parkLBIPs))])
		setAnnotation(s, "local.sdn.cozystack.io/ip-address-claim", parkClaimValues[pick(len(parkClaimValues))])
		setAnnotation(s, "local.sdn.cozystack.io/auto-claim", parkAutoValues[pick(len(parkAutoValues))])
		setAnnotation(s, "local.sdn.cozystack.io/ip-address-class", parkClassValues[pick(len(parkClassValues))])
		if pick(2) == 0 { // half the Services carry no MetalLB annotation at all
			for _, k := range ProtectedAnnotations[:6] {
				setAnnotation(s, k, parkMetalLBValue[pick(len(parkMetalLBValue))])
			}
		}
		if pick(8) == 0 {
			s["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		if v := parkDriverLabel[pick(len(parkDriverLabel))]; v != nil {
			s["metadata"].(map[string]any)["labels"] = map[string]any{LabelDriverService: *v}
		}
		if ing := parkIngress[pick(len(parkIngress))]; ing != nil {
			s["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": ing}}
		}
		return s
	}
	req := ParkRequest{Object: svc()}
	if !create {
		req.OldObject = svc()
	}
	for n := pick(4); n > 0; n-- {
		name := parkClassNames[pick(len(parkClassNames))]
		c := map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClass",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"provisioner": parkProvisioners[pick(len(parkProvisioners))]}}
		if m := parkMarks[pick(len(parkMarks))]; m != nil {
			c["metadata"].(map[string]any)["annotations"] = map[string]any{"ipaddressclass.local.sdn.cozystack.io/is-auto-claim-class": *m}
		}
		if pick(6) == 0 {
			c["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		dup := false
		for _, o := range req.Classes {
			dup = dup || o["metadata"].(map[string]any)["name"] == name
		}
		if !dup {
			req.Classes = append(req.Classes, c)
		}
	}
	// (Drawn last, so that earlier choices read the bytes they did.) The namespaces a class
	// serves, and the Service's namespace's labels.
	for _, c := range req.Classes {
		if sel := parkSelectors[pick(len(parkSelectors))]; sel != nil {
			c["spec"].(map[string]any)["namespaceSelector"] = sel
		}
		switch pick(8) {
		case 1:
			c["status"] = map[string]any{"servedNamespaces": map[string]any{"names": []any{"tenant-example"}}}
		case 2:
			c["status"] = map[string]any{"servedNamespaces": map[string]any{"names": []any{"another-tenant"}}}
		case 3:
			if sel := parkSelectors[pick(len(parkSelectors))]; sel != nil {
				c["status"] = map[string]any{"servedNamespaces": map[string]any{"selectors": []any{sel}}}
			}
		}
	}
	md := map[string]any{"name": "tenant-example"}
	if l := parkNamespaceLabels[pick(len(parkNamespaceLabels))]; l != nil {
		md["labels"] = l
	}
	// Whether each class's driver has accepted it (mostly: a missing byte reads as accepted).
	for _, c := range req.Classes {
		if cond := parkAcceptance[pick(len(parkAcceptance))]; cond != nil {
			st, _ := c["status"].(map[string]any)
			if st == nil {
				st = map[string]any{}
				c["status"] = st
			}
			st["conditions"] = []any{cond}
		}
	}
	req.Namespace = map[string]any{"metadata": md}
	return req
}

var (
	// Class selectors of the namespaces they serve: none (most often), labels, each operator,
	// and ones Kubernetes would refuse (an unknown operator, In without values).
	parkSelectors = []map[string]any{nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
		{"matchLabels": map[string]any{"tier": "gold"}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "In", "values": []any{"gold", "silver"}}}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "NotIn", "values": []any{"gold"}}}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "Exists"}}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "DoesNotExist"}}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "Bogus"}}},
		{"matchExpressions": []any{map[string]any{"key": "tier", "operator": "In"}}},
		{},
	}
	parkNamespaceLabels = []map[string]any{nil, {"tier": "gold"}, {"tier": "bronze"}, {"team": "a"}}
	// A class's Accepted condition: True (most often), none yet, False, and another type.
	parkAcceptance = []map[string]any{
		{"type": "Accepted", "status": "True", "reason": "Accepted"},
		{"type": "Accepted", "status": "True", "reason": "Accepted"},
		{"type": "Accepted", "status": "True", "reason": "Accepted"},
		nil,
		{"type": "Accepted", "status": "False", "reason": "PoolRefused"},
		{"type": "Ready", "status": "True", "reason": "Ready"},
	}
)
