package policycel

// Generated requests for the fuzz test and the e2e sample: every choice comes from one byte, so a
// fuzz input or a seeded random source drives it.

var (
	// The parking value (autoclaim.ParkingPool) and a look-alike of it are among the values: the
	// policy admits the former in MetalLB's pool annotation only.
	annotationValues = []*string{nil, ptr(""), ptr("203.0.113.7"), ptr("203.0.113.8"), ptr("true"), ptr("pool-a"),
		ptr("metallb-iad/parked"), ptr("metallb-iad/Parked")}
	ipValues         = []string{"", "203.0.113.7", "203.0.113.8"}
	externalIPValues = [][]any{nil, {"203.0.113.1"}, {"203.0.113.2"}, {"203.0.113.1", "203.0.113.2"}}
	// unprotectedAnnotations may change freely (a tenant's own, the claim link, look-alikes).
	unprotectedAnnotations = []string{"local.sdn.cozystack.io/ip-address-claim", "example.com/owner",
		"Metallb.io/loadBalancerIPs", "metallb.io/loadbalancerips", "metallb.io/other"}
)

func ptr(s string) *string { return &s }

// Users a request may come from: index 0 is a tenant, 1 the driver, 2 a cluster admin by group,
// 3 a ServiceAccount of another namespace with the driver's name, 4 a tenant claiming an admin
// group's look-alike.
func Users(driverUser string) []struct {
	Name   string
	Groups []string
} {
	return []struct {
		Name   string
		Groups []string
	}{
		{"tenant-admin", []string{"tenant-example-admins", "system:authenticated"}},
		{driverUser, []string{"system:serviceaccounts", "system:authenticated"}},
		{"oidc:alice", []string{"cozystack-cluster-admin", "system:authenticated"}},
		{"system:serviceaccount:tenant-example:metallb-iad", []string{"system:serviceaccounts"}},
		{"mallory", []string{"system:Masters", "system:authenticated"}},
	}
}

// GenRequest builds a Service write from b (any length; missing bytes read as 0).
func GenRequest(b []byte, driverUser string) Request {
	at := func(i int) int {
		if i < len(b) {
			return int(b[i])
		}
		return 0
	}
	i := 0
	next := func() int { v := at(i); i++; return v }
	create := next()%4 == 0
	user := Users(driverUser)[next()%5]
	oldObj, newObj := service(), service()
	keys := append(append([]string{}, ProtectedAnnotations...), unprotectedAnnotations...)
	for _, k := range keys {
		o, n := annotationValues[next()%len(annotationValues)], annotationValues[next()%len(annotationValues)]
		if next()%4 != 1 {
			n = o // most fields stay as they were (a 1 changes one)
		}
		setAnnotation(oldObj, k, o)
		setAnnotation(newObj, k, n)
	}
	o, n := ipValues[next()%len(ipValues)], ipValues[next()%len(ipValues)]
	if next()%4 != 1 {
		n = o
	}
	setSpec(oldObj, "loadBalancerIP", o)
	setSpec(newObj, "loadBalancerIP", n)
	eo, en := externalIPValues[next()%len(externalIPValues)], externalIPValues[next()%len(externalIPValues)]
	if next()%4 != 1 {
		en = eo
	}
	setSpec(oldObj, "externalIPs", eo)
	setSpec(newObj, "externalIPs", en)
	req := Request{Object: newObj, OldObject: oldObj, Username: user.Name, Groups: user.Groups}
	if create {
		req.OldObject = nil
	}
	return req
}

func service() map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "web", "namespace": "tenant-example"},
		"spec":     map[string]any{"type": "ClusterIP", "ports": []any{map[string]any{"port": int64(80)}}}}
}

func setAnnotation(obj map[string]any, k string, v *string) {
	if v == nil {
		return
	}
	md := obj["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[k] = *v
}

func setSpec(obj map[string]any, k string, v any) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return
		}
	case []any:
		if len(x) == 0 {
			return
		}
	}
	obj["spec"].(map[string]any)[k] = v
}
