package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// servedSince is the Kubernetes minor release whose apiserver first serves a kind the charts
// ship, for the kinds newer than the oldest release considered (kinds not listed are older).
var servedSince = map[string]int{
	"admissionregistration.k8s.io/v1, Kind=ValidatingAdmissionPolicy":        30,
	"admissionregistration.k8s.io/v1, Kind=ValidatingAdmissionPolicyBinding": 30,
	"admissionregistration.k8s.io/v1, Kind=MutatingAdmissionPolicy":          36,
	"admissionregistration.k8s.io/v1, Kind=MutatingAdmissionPolicyBinding":   36,
}

// acceptedBy reports why an apiserver of Kubernetes 1.<minor> would refuse an object (nil: it
// accepts it). A new CEL expression is compiled, as the apiserver does, with the libraries of its
// compatibility version — the release before it.
func acceptedBy(t *testing.T, minor int, o unstructured.Unstructured) error {
	gvk := o.GroupVersionKind().String()
	if since, ok := servedSince[gvk]; ok && minor < since {
		return fmt.Errorf("%s is served from 1.%d", gvk, since)
	}
	envSet := environment.MustBaseEnvSet(version.MajorMinor(1, uint(minor-1)))
	switch o.GetKind() {
	case "CustomResourceDefinition":
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				t.Fatal(err)
			}
			s, err := schema.NewStructural(&internal)
			if err != nil {
				t.Fatal(err)
			}
			if err := compileRules(s, true, envSet); err != nil {
				return fmt.Errorf("CRD %s %s: %w", o.GetName(), v.Name, err)
			}
		}
	case "MutatingAdmissionPolicy":
		// As the apiserver compiles one: conditions with params when it has a paramKind, and
		// mutations with the Object types of apply configurations and JSON patches.
		var p admissionregistrationv1.MutatingAdmissionPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
			t.Fatal(err)
		}
		compiler := plugincel.NewCompiler(envSet)
		opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
		var exprs []plugincel.ExpressionAccessor
		for _, mc := range p.Spec.MatchConditions {
			exprs = append(exprs, &matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression})
		}
		if len(p.Spec.Variables) > 0 {
			t.Fatalf("%s: compiling variables of a MutatingAdmissionPolicy is not modelled here", o.GetName())
		}
		for _, e := range exprs {
			if r := compiler.CompileCELExpression(e, opts, environment.NewExpressions); r.Error != nil {
				return fmt.Errorf("%s %s: %q: %w", o.GetKind(), o.GetName(), e.GetExpression(), r.Error)
			}
		}
		mopts := opts
		mopts.HasPatchTypes = true
		for _, m := range p.Spec.Mutations {
			var e plugincel.ExpressionAccessor
			switch {
			case m.ApplyConfiguration != nil:
				e = &patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}
			case m.JSONPatch != nil:
				e = &patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}
			default:
				return fmt.Errorf("%s %s: a mutation without an expression", o.GetKind(), o.GetName())
			}
			if r := compiler.CompileCELExpression(e, mopts, environment.NewExpressions); r.Error != nil {
				return fmt.Errorf("%s %s: %q: %w", o.GetKind(), o.GetName(), e.GetExpression(), r.Error)
			}
		}
	case "MutatingWebhookConfiguration":
		// Each webhook's matchConditions, as the apiserver compiles them (no params, an
		// authorizer).
		var c admissionregistrationv1.MutatingWebhookConfiguration
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &c); err != nil {
			t.Fatal(err)
		}
		compiler := plugincel.NewCompiler(envSet)
		for _, w := range c.Webhooks {
			for _, mc := range w.MatchConditions {
				e := &matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression}
				if r := compiler.CompileCELExpression(e, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions); r.Error != nil {
					return fmt.Errorf("%s %s webhook %s: %q: %w", o.GetKind(), o.GetName(), w.Name, mc.Expression, r.Error)
				}
			}
		}
	case "ValidatingAdmissionPolicy":
		env, err := envSet.NewExpressionsEnv().Extend(
			cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
			cel.Variable("request", cel.DynType), cel.Variable("params", cel.DynType),
			cel.Variable("namespaceObject", cel.DynType), cel.Variable("authorizer", cel.DynType),
			cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
		if err != nil {
			t.Fatal(err)
		}
		for _, expr := range policyExpressions(o.Object) {
			if _, iss := env.Compile(expr); iss.Err() != nil {
				return fmt.Errorf("%s %s: %q: %w", o.GetKind(), o.GetName(), expr, iss.Err())
			}
		}
	}
	return nil
}

// kindsServedBy is the part of ServedKinds an apiserver of Kubernetes 1.<minor> serves.
func kindsServedBy(minor int) []string {
	var out []string
	for _, k := range ServedKinds {
		i := strings.LastIndex(k, "/")
		since, ok := servedSince[k[:i]+", Kind="+k[i+1:]]
		if !ok {
			panic("servedSince does not know " + k)
		}
		if minor >= since {
			out = append(out, k)
		}
	}
	return out
}

// compileRules compiles every x-kubernetes-validations rule of a structural schema, recursively.
func compileRules(s *schema.Structural, root bool, envSet *environment.EnvSet) error {
	if len(s.XValidations) > 0 {
		results, err := schemacel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envSet, schemacel.NewExpressionsEnvLoader())
		if err != nil {
			return err
		}
		for i, r := range results {
			if r.Error != nil {
				return fmt.Errorf("rule %q: %v", s.XValidations[i].Rule, r.Error)
			}
		}
	}
	for _, p := range s.Properties {
		if err := compileRules(&p, false, envSet); err != nil {
			return err
		}
	}
	if s.Items != nil {
		if err := compileRules(s.Items, false, envSet); err != nil {
			return err
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
		return compileRules(s.AdditionalProperties.Structural, false, envSet)
	}
	return nil
}

// policyExpressions collects every CEL expression of an admission policy.
func policyExpressions(obj map[string]any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if s, ok := val.(string); ok && (k == "expression" || k == "messageExpression" || k == "valueExpression") {
					out = append(out, s)
				}
				walk(val)
			}
		case []any:
			for _, val := range x {
				walk(val)
			}
		}
	}
	walk(obj["spec"])
	return out
}

// Each chart's kubeVersion is the oldest Kubernetes that an end-to-end suite runs
// (binaries.KubernetesVersions) and whose apiserver serves every kind the chart ships and accepts
// every CEL rule and policy expression in it (docs/design.md#supported-kubernetes): older releases
// are refused by Helm, and what the chart admits is what is tested.
func TestKubeVersionIsTheOldestThatAcceptsTheChart(t *testing.T) {
	// The versions the end-to-end suites of make test run: the local suite the default, the kind
	// suite KIND_KUBERNETES_VERSION's default (the Makefile).
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KIND_KUBERNETES_VERSION \?= \$\(or \$\(KUBERNETES_VERSION\),(v[0-9.]+)\)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no default KIND_KUBERNETES_VERSION")
	}
	suites := []string{binaries.DefaultKubernetesVersion, string(m[1])}
	tested := 0
	for _, v := range suites {
		if !slices.Contains(binaries.KubernetesVersions, v) {
			t.Fatalf("an end-to-end suite runs Kubernetes %s, which is not pinned (%v)", v, binaries.KubernetesVersions)
		}
		if m := binaries.KubernetesMinor(v); tested == 0 || m < tested {
			tested = m
		}
	}
	for _, name := range []string{"address-controller", "metallb-iad"} {
		t.Run(name, func(t *testing.T) {
			c, err := Load(Dir(root, name))
			if err != nil {
				t.Fatal(err)
			}
			oldest, reason := 0, ""
			for minor := 37; minor >= 25; minor-- {
				// Rendered as Helm would for that release's apiserver: a kind the chart renders
				// only where it is served (.Capabilities.APIVersions.Has) is left out before it.
				manifest, err := RenderFor(c, c.Name(), "cozy-"+name, nil, kindsServedBy(minor))
				if err != nil {
					t.Fatal(err)
				}
				objs, err := kubeapply.Decode([]byte(manifest))
				if err != nil {
					t.Fatal(err)
				}
				var refused error
				for _, o := range objs {
					if refused = acceptedBy(t, minor, *o); refused != nil {
						break
					}
				}
				if refused != nil {
					reason = refused.Error()
					break
				}
				oldest = minor
			}
			if oldest == 0 {
				t.Fatalf("not even 1.37 accepts the chart: %s", reason)
			}
			floor := max(oldest, tested)
			want := fmt.Sprintf(">=1.%d.0-0", floor)
			if c.Metadata.KubeVersion != want {
				t.Errorf("kubeVersion %q, want %q (1.%d refuses it: %s; the oldest tested is 1.%d)", c.Metadata.KubeVersion, want, oldest-1, reason, tested)
			}
			if !strings.Contains(readme(t, name), fmt.Sprintf("Kubernetes 1.%d", floor)) {
				t.Errorf("README does not state the minimum, Kubernetes 1.%d", floor)
			}
		})
	}
}
