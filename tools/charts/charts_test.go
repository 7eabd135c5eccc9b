package charts

import (
	"path/filepath"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

var root = filepath.Join("..", "..")

func TestChartsLint(t *testing.T) {
	for _, name := range []string{"address-controller", "metallb-iad"} {
		for i, errs := range [][]error{
			Lint(Dir(root, name), nil),
			Lint(Dir(root, name), map[string]any{"deploy": false}),
			Lint(filepath.Join(root, "packages", "system", name), nil),
		} {
			wrapper := i == 2
			for _, err := range errs {
				// Cozystack's wrappers carry the chart under charts/ without declaring it
				// (TestPackagesFollowCozystackConventions), which the linter reports; Helm v4's
				// linter also reports a chart without templates/, which a wrapper is (its chart
				// vendored under charts/, and the Package's values).
				if wrapper && (strings.Contains(err.Error(), "chart metadata is missing these dependencies: "+name) ||
					strings.Contains(err.Error(), "templates/: directory does not exist")) {
					continue
				}
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

func render(t *testing.T, name string, values map[string]any) map[string]map[string]any {
	t.Helper()
	c, err := Load(Dir(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return renderChart(t, c, name, "cozy-"+name, values)
}

// renderChart renders a loaded chart as release in namespace and indexes the objects by kind/name.
func renderChart(t *testing.T, c *chart.Chart, release, namespace string, values map[string]any) map[string]map[string]any {
	t.Helper()
	manifest, err := RenderRelease(c, release, namespace, values)
	if err != nil {
		t.Fatalf("rendering %s with %v: %v", c.Name(), values, err)
	}
	return decodeIndex(t, manifest)
}

// decodeIndex decodes a manifest and indexes the objects by kind/name.
func decodeIndex(t *testing.T, manifest string) map[string]map[string]any {
	t.Helper()
	objs, err := kubeapply.Decode([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = o.Object
	}
	return out
}

func dig(obj map[string]any, path ...any) any {
	var cur any = obj
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

func TestAddressControllerChartRendering(t *testing.T) {
	objs := render(t, "address-controller", nil)
	dep := objs["Deployment/address-controller"]
	if dep == nil {
		t.Fatalf("no Deployment; got %v", keys(objs))
	}
	c := dig(dep, "spec", "template", "spec", "containers", 0).(map[string]any)
	if img := c["image"].(string); !strings.Contains(img, "@sha256:") {
		t.Errorf("default image %q is not a digest reference", img)
	}
	sc := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext %v", sc)
	}
	if dig(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Error("pod does not run as non-root")
	}
	if !strings.Contains(strings.Join(toStrings(c["args"]), " "), "--leader-elect=true") {
		t.Errorf("args %v lack leader election", c["args"])
	}
	if got := containerEnv(c, "GOMEMLIMIT"); got != "100MiB" {
		t.Errorf("GOMEMLIMIT %q, want the default memoryTarget 100MiB", got)
	}
	for _, k := range []string{"CustomResourceDefinition/ipaddresses.local.sdn.cozystack.io", "ClusterRole/address-controller",
		"ClusterRoleBinding/address-controller", "Role/address-controller-leader-election", "Service/address-controller-metrics",
		"ServiceAccount/address-controller", "ClusterRole/address-controller-tenant-view", "ClusterRole/address-controller-tenant-admin"} {
		if objs[k] == nil {
			t.Errorf("missing %s", k)
		}
	}
	// The generated role carries the controller's own permissions and nothing for leases.
	rules := dig(objs["ClusterRole/address-controller"], "rules").([]any)
	text := strings.ToLower(strings.Join(toStrings(rules), " "))
	if !strings.Contains(text, "ipaddressclaims") || strings.Contains(text, "leases") {
		t.Errorf("ClusterRole rules %v", rules)
	}
	// Tenant roles: labels for Cozystack's aggregation; claims only.
	view := objs["ClusterRole/address-controller-tenant-view"]
	if dig(view, "metadata", "labels", "rbac.cozystack.io/aggregate-to-tenant-view") != "true" {
		t.Error("tenant view role is not labelled for aggregation")
	}
	if dig(view, "metadata", "labels", "rbac.authorization.k8s.io/aggregate-to-view") != nil {
		t.Error("stock aggregation is on by default")
	}

	// Variations.
	objs = render(t, "address-controller", map[string]any{"deploy": false, "tenantRoles": map[string]any{"aggregateToDefaultRoles": true}})
	if objs["Deployment/address-controller"] != nil || objs["Service/address-controller-metrics"] != nil {
		t.Error("deploy=false still renders the workload")
	}
	if dig(objs["ClusterRole/address-controller-tenant-admin"], "metadata", "labels", "rbac.authorization.k8s.io/aggregate-to-admin") != "true" {
		t.Error("aggregateToDefaultRoles does not label the admin role")
	}
	objs = render(t, "address-controller", map[string]any{"tenantRoles": map[string]any{"enabled": false},
		"image": "registry.example.org/mirror/address-controller@sha256:" + strings.Repeat("a", 64)})
	if objs["ClusterRole/address-controller-tenant-view"] != nil {
		t.Error("tenantRoles.enabled=false still renders tenant roles")
	}
	for target, want := range map[string]string{"": "", "256MiB": "256MiB"} {
		objs := render(t, "address-controller", map[string]any{"memoryTarget": target})
		c := dig(objs["Deployment/address-controller"], "spec", "template", "spec", "containers", 0).(map[string]any)
		if got := containerEnv(c, "GOMEMLIMIT"); got != want {
			t.Errorf("memoryTarget %q: GOMEMLIMIT %q, want %q", target, got, want)
		}
	}
	if img := dig(objs["Deployment/address-controller"], "spec", "template", "spec", "containers", 0, "image"); !strings.HasPrefix(img.(string), "registry.example.org/mirror/") {
		t.Errorf("image value not used: %v", img)
	}
}

func TestMetalLBIADChartRendering(t *testing.T) {
	objs := render(t, "metallb-iad", map[string]any{"metallbNamespace": "cozy-metallb"})
	args := strings.Join(toStrings(dig(objs["Deployment/metallb-iad"], "spec", "template", "spec", "containers", 0, "args")), " ")
	if !strings.Contains(args, "--metallb-namespace=cozy-metallb") || !strings.Contains(args, "--namespace=cozy-metallb-iad") {
		t.Errorf("args %s", args)
	}
	if got := containerEnv(dig(objs["Deployment/metallb-iad"], "spec", "template", "spec", "containers", 0).(map[string]any), "GOMEMLIMIT"); got != "100MiB" {
		t.Errorf("GOMEMLIMIT %q, want the default memoryTarget 100MiB", got)
	}
	policy := objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"]
	binding := objs["ValidatingAdmissionPolicyBinding/metallb-iad-service-pins"]
	if policy == nil || binding == nil {
		t.Fatalf("policy or binding missing: %v", keys(objs))
	}
	if dig(policy, "spec", "failurePolicy") != "Fail" {
		t.Error("failurePolicy is not Fail")
	}
	if got := toStrings(dig(binding, "spec", "validationActions")); len(got) != 1 || got[0] != "Deny" {
		t.Errorf("default validationActions %v", got)
	}
	exempt := dig(policy, "spec", "variables", 0, "expression").(string)
	for _, want := range []string{"system:serviceaccount:cozy-metallb-iad:metallb-iad", "system:masters", "kubeadm:cluster-admins", "cozystack-cluster-admin"} {
		if !strings.Contains(exempt, want) {
			t.Errorf("exemption lacks %s: %s", want, exempt)
		}
	}
	if dig(binding, "spec", "matchResources", "namespaceSelector", "matchExpressions", 0, "key") != "namespace.cozystack.io/host" {
		t.Error("binding does not select tenant namespaces")
	}

	objs = render(t, "metallb-iad", map[string]any{"admissionPolicy": map[string]any{
		"validationActions": []any{"Warn", "Audit"}, "allowedGroups": []any{"net-admins"}, "allowedUsernames": []any{"ops@example.org"}}})
	if got := toStrings(dig(objs["ValidatingAdmissionPolicyBinding/metallb-iad-service-pins"], "spec", "validationActions")); strings.Join(got, ",") != "Warn,Audit" {
		t.Errorf("validationActions %v", got)
	}
	exempt = dig(objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"], "spec", "variables", 0, "expression").(string)
	if strings.Contains(exempt, "system:masters") || !strings.Contains(exempt, "net-admins") || !strings.Contains(exempt, "ops@example.org") {
		t.Errorf("a given allowedGroups list must replace the default one: %s", exempt)
	}
	// External IPs are guarded by default, and the guard can be turned off on its own.
	if n := externalIPValidations(t, render(t, "metallb-iad", nil)); n != 1 {
		t.Errorf("default policy has %d spec.externalIPs validations, want 1", n)
	}
	if n := externalIPValidations(t, render(t, "metallb-iad", map[string]any{"admissionPolicy": map[string]any{"guardExternalIPs": false}})); n != 0 {
		t.Errorf("guardExternalIPs=false still renders %d spec.externalIPs validations", n)
	}
	objs = render(t, "metallb-iad", map[string]any{"admissionPolicy": map[string]any{"enabled": false}})
	if objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"] != nil {
		t.Error("admissionPolicy.enabled=false still renders the policy")
	}
}

func TestSchemasRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		chart  string
		values map[string]any
		want   string
	}{
		{"address-controller", map[string]any{"workers": 0}, "workers"},
		{"address-controller", map[string]any{"image": "Not A Reference"}, "image"},
		{"address-controller", map[string]any{"image": "ghcr.io/x/y@sha256:short"}, "image"},
		{"address-controller", map[string]any{"logLevel": "verbose"}, "logLevel"},
		{"address-controller", map[string]any{"unknownKey": true}, "unknownKey"},
		{"metallb-iad", map[string]any{"admissionPolicy": map[string]any{"validationActions": []any{"Deny", "Warn"}}}, "validationActions"},
		{"metallb-iad", map[string]any{"admissionPolicy": map[string]any{"validationActions": []any{"Block"}}}, "validationActions"},
		{"metallb-iad", map[string]any{"admissionPolicy": map[string]any{"allowedGroups": []any{"it's"}}}, "allowedGroups"},
		{"metallb-iad", map[string]any{"metallbNamespace": "Cozy_MetalLB"}, "metallbNamespace"},
		{"metallb-iad", map[string]any{"memoryTarget": "128M"}, "memoryTarget"},
		{"address-controller", map[string]any{"memoryTarget": "lots"}, "memoryTarget"},
	} {
		c, err := Load(Dir(root, tc.chart))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Render(c, "ns", tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %v: error %v, want one naming %s", tc.chart, tc.values, err, tc.want)
		}
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		switch y := x.(type) {
		case string:
			out = append(out, y)
		default:
			out = append(out, strings.ReplaceAll(strings.TrimSpace(fmtAny(y)), "\n", " "))
		}
	}
	return out
}

func fmtAny(v any) string {
	var b strings.Builder
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			b.WriteString(k + ":" + fmtAny(val) + " ")
		}
	case []any:
		for _, val := range x {
			b.WriteString(fmtAny(val) + " ")
		}
	case string:
		b.WriteString(x)
	}
	return b.String()
}

// containerEnv is the value of a container's environment variable ("" when unset).
func containerEnv(c map[string]any, name string) string {
	env, _ := c["env"].([]any)
	for _, e := range env {
		if m, _ := e.(map[string]any); m["name"] == name {
			v, _ := m["value"].(string)
			return v
		}
	}
	return ""
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// externalIPValidations counts the service-pins policy's validations about spec.externalIPs.
func externalIPValidations(t *testing.T, objs map[string]map[string]any) int {
	t.Helper()
	vals, _ := dig(objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"], "spec", "validations").([]any)
	n := 0
	for _, v := range vals {
		if strings.Contains(v.(map[string]any)["expression"].(string), "addedExternalIPs") {
			n++
		}
	}
	return n
}
