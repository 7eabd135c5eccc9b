package charts

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var parkingPolicies = []string{"metallb-iad-park-claimed", "metallb-iad-park-auto-claimed"}

// The core's names (address-controller/pkg/sdk/autoclaim, address-controller/api/v1alpha1): this
// module does not depend on the core's, so TestParkingValueIsTheCores reads them from its source.
const (
	parkingPool       = "metallb-iad/parked"
	parkingAnnotation = "metallb.io/address-pool"
	annServiceClaim   = "local.sdn.cozystack.io/ip-address-claim"
	annServiceClass   = "local.sdn.cozystack.io/ip-address-class"
	annAutoClaim      = "local.sdn.cozystack.io/auto-claim"
	annAutoClaimClass = "ipaddressclass.local.sdn.cozystack.io/is-auto-claim-class"
)

var metallbAnnotations = []string{
	"metallb.io/address-pool", "metallb.io/loadBalancerIPs", "metallb.io/allow-shared-ip",
	"metallb.universe.tf/address-pool", "metallb.universe.tf/loadBalancerIPs", "metallb.universe.tf/allow-shared-ip",
}

// stringConst reads the string constant name from a Go source file.
func stringConst(t *testing.T, path, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, n := range v.Names {
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && n.Name == name && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						return s
					}
				}
			}
		}
	}
	t.Fatalf("no string constant %s in %s", name, path)
	return ""
}

// The parked value the chart hard-codes (and these tests check it with) is the core's
// autoclaim.ParkingPool under autoclaim.ParkingAnnotation.
func TestParkingValueIsTheCores(t *testing.T) {
	path := filepath.Join(root, "address-controller", "pkg", "sdk", "autoclaim", "autoclaim.go")
	if got := stringConst(t, path, "ParkingPool"); got != parkingPool {
		t.Errorf("autoclaim.ParkingPool is %q, the chart's tests expect %q", got, parkingPool)
	}
	if got := stringConst(t, path, "ParkingAnnotation"); got != parkingAnnotation {
		t.Errorf("autoclaim.ParkingAnnotation is %q, the chart's tests expect %q", got, parkingAnnotation)
	}
	wk := filepath.Join(root, "address-controller", "api", "v1alpha1", "wellknown.go")
	for name, want := range map[string]string{"AnnotationServiceClaim": annServiceClaim, "AnnotationServiceClass": annServiceClass,
		"AnnotationAutoClaim": annAutoClaim, "AnnotationAutoClaimClass": annAutoClaimClass} {
		if got := stringConst(t, wk, name); got != want {
			t.Errorf("%s is %q, the chart's tests expect %q", name, got, want)
		}
	}
}

// renderDriverFor renders the driver chart for an apiserver serving kinds (see RenderFor).
func renderDriverFor(t *testing.T, values map[string]any, kinds []string) map[string]map[string]any {
	t.Helper()
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := RenderFor(c, "metallb-iad", "cozy-metallb-iad", values, kinds)
	if err != nil {
		t.Fatal(err)
	}
	return decodeIndex(t, manifest)
}

// The parking policies as docs/design.md#parking describes them: both MutatingAdmissionPolicies
// with their bindings, failurePolicy Ignore, CREATE and UPDATE of services (not their status), the
// parked value exactly parkingPool under parkingAnnotation (which the service-pins policy exempts),
// the auto-claim one with IPAddressClass params over all classes, and the bindings selecting the
// tenant namespaces like the service-pins binding.
func TestParkingPoliciesRendering(t *testing.T) {
	objs := render(t, "metallb-iad", nil)
	parked := "'" + parkingAnnotation + "': '" + parkingPool + "'"
	for _, name := range parkingPolicies {
		p, b := objs["MutatingAdmissionPolicy/"+name], objs["MutatingAdmissionPolicyBinding/"+name]
		if p == nil || b == nil {
			t.Fatalf("%s: policy or binding missing: %v", name, keys(objs))
		}
		if dig(p, "apiVersion") != "admissionregistration.k8s.io/v1" || dig(b, "apiVersion") != "admissionregistration.k8s.io/v1" {
			t.Errorf("%s: not admissionregistration.k8s.io/v1", name)
		}
		if dig(p, "spec", "failurePolicy") != "Ignore" {
			t.Errorf("%s: failurePolicy %v, want Ignore (a broken parking policy must not block Service writes)", name, dig(p, "spec", "failurePolicy"))
		}
		if dig(p, "spec", "reinvocationPolicy") != "Never" {
			t.Errorf("%s: reinvocationPolicy %v", name, dig(p, "spec", "reinvocationPolicy"))
		}
		rules, _ := dig(p, "spec", "matchConstraints", "resourceRules").([]any)
		if len(rules) != 1 || strings.Join(toStrings(dig(p, "spec", "matchConstraints", "resourceRules", 0, "resources")), ",") != "services" ||
			strings.Join(toStrings(dig(p, "spec", "matchConstraints", "resourceRules", 0, "operations")), ",") != "CREATE,UPDATE" ||
			strings.Join(toStrings(dig(p, "spec", "matchConstraints", "resourceRules", 0, "apiGroups")), ",") != "" {
			t.Errorf("%s: resourceRules %v, want CREATE and UPDATE of core services only", name, rules)
		}
		muts, _ := dig(p, "spec", "mutations").([]any)
		if len(muts) != 1 || dig(p, "spec", "mutations", 0, "patchType") != "ApplyConfiguration" {
			t.Fatalf("%s: mutations %v, want one ApplyConfiguration", name, muts)
		}
		if expr, _ := dig(p, "spec", "mutations", 0, "applyConfiguration", "expression").(string); !strings.Contains(expr, parked) {
			t.Errorf("%s: the mutation %q does not set %s", name, expr, parked)
		}
		if dig(b, "spec", "policyName") != name {
			t.Errorf("%s: binding names policy %v", name, dig(b, "spec", "policyName"))
		}
		sel := dig(b, "spec", "matchResources", "namespaceSelector", "matchExpressions").([]any)
		if len(sel) != 1 || dig(b, "spec", "matchResources", "namespaceSelector", "matchExpressions", 0, "key") != "namespace.cozystack.io/host" ||
			dig(b, "spec", "matchResources", "namespaceSelector", "matchExpressions", 0, "operator") != "Exists" {
			t.Errorf("%s: binding selects %v, want the tenant label", name, sel)
		}
	}
	auto := "MutatingAdmissionPolicy/metallb-iad-park-auto-claimed"
	if dig(objs[auto], "spec", "paramKind", "apiVersion") != "local.sdn.cozystack.io/v1alpha1" || dig(objs[auto], "spec", "paramKind", "kind") != "IPAddressClass" {
		t.Errorf("auto-claim policy paramKind %v", dig(objs[auto], "spec", "paramKind"))
	}
	if dig(objs["MutatingAdmissionPolicy/metallb-iad-park-claimed"], "spec", "paramKind") != nil {
		t.Error("the claimed policy has params")
	}
	ref, _ := dig(objs["MutatingAdmissionPolicyBinding/metallb-iad-park-auto-claimed"], "spec", "paramRef").(map[string]any)
	if sel, ok := ref["selector"].(map[string]any); !ok || len(sel) != 0 || ref["parameterNotFoundAction"] != "Allow" || ref["name"] != nil {
		t.Errorf("auto-claim binding paramRef %v, want every class (selector {}) and Allow when there is none", ref)
	}
	// The service-pins policy exempts exactly that value.
	var exempt bool
	for _, v := range dig(objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"], "spec", "variables").([]any) {
		e := v.(map[string]any)["expression"].(string)
		exempt = exempt || strings.Contains(e, "'"+parkingAnnotation+"'") && strings.Contains(e, "'"+parkingPool+"'")
	}
	if !exempt {
		t.Error("the service-pins policy does not mention the parked value")
	}

	// The namespace label follows the value, as for the service-pins binding.
	objs = render(t, "metallb-iad", map[string]any{"admissionPolicy": map[string]any{"namespaceLabel": "example.com/tenant"}})
	for _, name := range parkingPolicies {
		if got := dig(objs["MutatingAdmissionPolicyBinding/"+name], "spec", "matchResources", "namespaceSelector", "matchExpressions", 0, "key"); got != "example.com/tenant" {
			t.Errorf("%s: binding selects %v with namespaceLabel example.com/tenant", name, got)
		}
	}
}

// The parking policies are rendered only when the cluster serves the v1 MutatingAdmissionPolicy
// kind (as Helm sees it through discovery), admissionPolicy.parking and admissionPolicy.enabled
// are on; the service-pins and hand-over-events policies do not depend on the kind.
func TestParkingPoliciesGating(t *testing.T) {
	has := func(objs map[string]map[string]any) (maps, bindings int) {
		for _, name := range parkingPolicies {
			if objs["MutatingAdmissionPolicy/"+name] != nil {
				maps++
			}
			if objs["MutatingAdmissionPolicyBinding/"+name] != nil {
				bindings++
			}
		}
		return maps, bindings
	}
	if !slices.Contains(ServedKinds, "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") {
		t.Fatal("offline renders do not see the v1 MutatingAdmissionPolicy kind the project's apiserver serves")
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		kinds  []string
		want   int
		vap    bool
		// driverParks: the driver's own parking (--parking) follows the values, not the served
		// kinds: where the policies cannot be installed, the driver's parking is all there is.
		// (Also where the admission policies are turned off: issue 29, defect 3.)
		driverParks bool
		// parkingEvents: the parking-events policy is rendered.
		parkingEvents bool
		// webhook: the parking webhook's configuration is rendered (where the policies cannot be).
		webhook bool
	}{
		{"served, defaults", nil, ServedKinds, 2, true, true, true, false},
		{"not served (before 1.36)", nil, nil, 0, true, true, true, true},
		{"only the binding kind served", nil, []string{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding"}, 0, true, true, true, true},
		{"an older version served", nil, []string{"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, 0, true, true, true, true},
		{"parking off", map[string]any{"admissionPolicy": map[string]any{"parking": false}}, ServedKinds, 0, true, false, false, false},
		{"parking off, not served", map[string]any{"admissionPolicy": map[string]any{"parking": false}}, nil, 0, true, false, false, false},
		{"admission policies off", map[string]any{"admissionPolicy": map[string]any{"enabled": false}}, ServedKinds, 0, false, true, false, false},
		{"admission policies off, not served", map[string]any{"admissionPolicy": map[string]any{"enabled": false}}, nil, 0, false, true, false, false},
		{"deploy off", map[string]any{"deploy": false}, ServedKinds, 2, true, true, true, false},
		{"webhook asked for, served", map[string]any{"admissionPolicy": map[string]any{"parkingAdmission": "webhook"}}, ServedKinds, 0, true, true, true, true},
		{"policy asked for, served", map[string]any{"admissionPolicy": map[string]any{"parkingAdmission": "policy"}}, ServedKinds, 2, true, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderDriverFor(t, tc.values, tc.kinds)
			if m, b := has(objs); m != tc.want || b != tc.want {
				t.Errorf("%d policies and %d bindings, want %d of each", m, b, tc.want)
			}
			if d := objs["Deployment/metallb-iad"]; d != nil {
				args := toStrings(dig(d, "spec", "template", "spec", "containers", 0, "args"))
				if want := fmt.Sprintf("--parking=%v", tc.driverParks); !slices.Contains(args, want) {
					t.Errorf("driver args %v lack %s", args, want)
				}
			}
			if got := objs["MutatingWebhookConfiguration/metallb-iad-parking"] != nil; got != tc.webhook {
				t.Errorf("parking webhook configuration rendered: %v, want %v", got, tc.webhook)
			}
			if d := objs["Deployment/metallb-iad"]; d != nil {
				args := strings.Join(toStrings(dig(d, "spec", "template", "spec", "containers", 0, "args")), " ")
				if got := strings.Contains(args, "--parking-webhook-bind-address="); got != tc.webhook {
					t.Errorf("the driver serves the parking webhook: %v, want %v (args %s)", got, tc.webhook, args)
				}
			}
			if (objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"] != nil) != tc.vap {
				t.Errorf("service-pins policy rendered: %v, want %v", objs["ValidatingAdmissionPolicy/metallb-iad-service-pins"] != nil, tc.vap)
			}
			// The parking-events policy goes with parking itself, MutatingAdmissionPolicy served
			// or not (the driver parks without the mutating policies too), while the admission
			// policies are on.
			for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				if got := objs[kind+"/metallb-iad-parking-events"] != nil; got != tc.parkingEvents {
					t.Errorf("%s metallb-iad-parking-events rendered: %v, want %v", kind, got, tc.parkingEvents)
				}
				// The hand-over-events policy goes with the admission policies, parking or not:
				// every attach hands an address over.
				if got := objs[kind+"/metallb-iad-handover-events"] != nil; got != tc.vap {
					t.Errorf("%s metallb-iad-handover-events rendered: %v, want %v", kind, got, tc.vap)
				}
			}
		})
	}
}

// The parking webhook as docs/design.md#parking-below-kubernetes-136 describes it, where the
// cluster serves no MutatingAdmissionPolicy: one mutating webhook for CREATE and UPDATE of
// Services in tenant namespaces, failurePolicy Fail by default (a write it must see is refused
// while no replica answers, never admitted unparked), no caBundle from the chart (the driver keeps
// it), called through the chart's Service on the driver's webhook port, or a URL for a driver run
// outside the cluster; the driver is told to serve it, with the names its RBAC grants.
func TestParkingWebhookRendering(t *testing.T) {
	objs := renderDriverFor(t, map[string]any{"networkPolicy": map[string]any{"enabled": true}}, nil)
	w := objs["MutatingWebhookConfiguration/metallb-iad-parking"]
	if w == nil {
		t.Fatalf("no parking webhook configuration: %v", keys(objs))
	}
	hooks, _ := dig(w, "webhooks").([]any)
	if len(hooks) != 2 || dig(hooks[0].(map[string]any), "name") != "park-claimed.metallb-iad.local.sdn.cozystack.io" ||
		dig(hooks[1].(map[string]any), "name") != "park-auto-claimed.metallb-iad.local.sdn.cozystack.io" {
		t.Fatalf("webhooks %v, want park-claimed and park-auto-claimed", hooks)
	}
	for _, hk := range hooks {
		h := hk.(map[string]any)
		for path, want := range map[string]any{
			"failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": float64(5), "reinvocationPolicy": "Never",
			"clientConfig.service.name": "metallb-iad-parking-webhook", "clientConfig.service.namespace": "cozy-metallb-iad",
			"clientConfig.service.path": "/park", "clientConfig.service.port": float64(443),
			"namespaceSelector.matchExpressions.0.key": "namespace.cozystack.io/host", "namespaceSelector.matchExpressions.0.operator": "Exists",
		} {
			var keys []any
			for _, k := range strings.Split(path, ".") {
				if n, err := strconv.Atoi(k); err == nil {
					keys = append(keys, n)
				} else {
					keys = append(keys, k)
				}
			}
			if got := dig(h, keys...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %s = %v, want %v", h["name"], path, got, want)
			}
		}
		if dig(h, "clientConfig", "caBundle") != nil {
			t.Errorf("%s: the chart sets the caBundle, which the driver keeps: an upgrade would overwrite it", h["name"])
		}
		if strings.Join(toStrings(dig(h, "rules", 0, "operations")), ",") != "CREATE,UPDATE" || strings.Join(toStrings(dig(h, "rules", 0, "resources")), ",") != "services" {
			t.Errorf("%s: rules %v, want CREATE and UPDATE of services (not their status)", h["name"], dig(h, "rules"))
		}
	}
	// With no live configuration to look at (no cluster, or a first install), auto-claim is off:
	// the driver turns the last condition of park-auto-claimed on when a class is marked.
	conds, _ := dig(hooks[1].(map[string]any), "matchConditions").([]any)
	last, _ := conds[len(conds)-1].(map[string]any)
	if last["name"] != "auto-claim-enabled" || last["expression"] != "false" {
		t.Errorf("park-auto-claimed ends with %v, want auto-claim-enabled: \"false\"", last)
	}
	svc := objs["Service/metallb-iad-parking-webhook"]
	if svc == nil || dig(svc, "spec", "ports", 0, "port") != float64(443) || dig(svc, "spec", "ports", 0, "targetPort") != "parking-webhook" {
		t.Fatalf("the webhook's Service %v", svc)
	}
	dep := objs["Deployment/metallb-iad"]
	if sel := dig(svc, "spec", "selector"); fmt.Sprint(sel) != fmt.Sprint(dig(dep, "spec", "selector", "matchLabels")) {
		t.Errorf("the webhook's Service selects %v, the driver's pods are %v", sel, dig(dep, "spec", "selector", "matchLabels"))
	}
	args := toStrings(dig(dep, "spec", "template", "spec", "containers", 0, "args"))
	for _, want := range []string{"--parking-webhook-bind-address=:9443", "--parking-webhook-service=metallb-iad-parking-webhook",
		"--parking-webhook-secret=metallb-iad-parking-webhook-tls"} {
		if !slices.Contains(args, want) {
			t.Errorf("driver args %v lack %s", args, want)
		}
	}
	var port bool
	for _, p := range dig(dep, "spec", "template", "spec", "containers", 0, "ports").([]any) {
		port = port || p.(map[string]any)["name"] == "parking-webhook" && p.(map[string]any)["containerPort"] == float64(9443)
	}
	if !port {
		t.Error("the driver's container has no parking-webhook port 9443")
	}
	var admitted bool
	for _, r := range dig(objs["NetworkPolicy/metallb-iad"], "spec", "ingress").([]any) {
		admitted = admitted || fmt.Sprint(dig(r.(map[string]any), "ports", 0, "port")) == "9443"
	}
	if !admitted {
		t.Error("the NetworkPolicy does not admit the apiserver to the webhook port")
	}
	// The driver's RBAC grants exactly the chart's names: the configuration's caBundle and the
	// Secret, by name.
	role := string(mustRead(t, filepath.Join(root, "charts", "metallb-iad", "files", "role.yaml")))
	for _, name := range []string{"metallb-iad-parking\n", "metallb-iad-parking-webhook-tls\n"} {
		if !strings.Contains(role, "  - "+name) {
			t.Errorf("the driver's RBAC does not name %q", strings.TrimSpace(name))
		}
	}

	// A driver outside the cluster: the URL, and no Service.
	objs = renderDriverFor(t, map[string]any{"deploy": false, "admissionPolicy": map[string]any{"parkingWebhook": map[string]any{
		"url": "https://127.0.0.1:9443/park", "failurePolicy": "Ignore", "timeoutSeconds": 2}}}, nil)
	for i := range 2 {
		h := dig(objs["MutatingWebhookConfiguration/metallb-iad-parking"], "webhooks", i).(map[string]any)
		if dig(h, "clientConfig", "url") != "https://127.0.0.1:9443/park" || dig(h, "clientConfig", "service") != nil ||
			dig(h, "failurePolicy") != "Ignore" || dig(h, "timeoutSeconds") != float64(2) {
			t.Errorf("with a URL: clientConfig %v, failurePolicy %v, timeout %v", dig(h, "clientConfig"), dig(h, "failurePolicy"), dig(h, "timeoutSeconds"))
		}
	}
	if objs["Service/metallb-iad-parking-webhook"] != nil {
		t.Error("a Service for a driver that runs outside the cluster")
	}

	// Asking for the policies where the cluster has none, or for an unknown mode, fails the render
	// with a message that says what to do.
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]string{"policy": "use auto or webhook", "sometimes": "'auto', 'policy', 'webhook'"} {
		_, err := RenderFor(c, "metallb-iad", "cozy-metallb-iad", map[string]any{"admissionPolicy": map[string]any{"parkingAdmission": mode}}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parkingAdmission %s without the policies: %v, want an error saying %q", mode, err, want)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
