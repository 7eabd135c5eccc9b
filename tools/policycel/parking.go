package policycel

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/charts"
)

// The driver chart's parking MutatingAdmissionPolicies.
const (
	ParkClaimedPolicy     = "metallb-iad-park-claimed"
	ParkAutoClaimedPolicy = "metallb-iad-park-auto-claimed"
)

// Parking is the driver chart's two parking policies, compiled with the apiserver's admission CEL
// compiler (the matchConditions as conditions, the mutations as ApplyConfiguration expressions,
// with the environment of new expressions at the default compatibility version).
type Parking struct {
	// Specs are the policies as the chart renders them: park-claimed, then park-auto-claimed.
	Specs    []admissionregistrationv1.MutatingAdmissionPolicySpec
	policies []mutatingPolicy
}

type mutatingPolicy struct {
	name       string
	params     bool
	conditions []namedResult
	mutations  []plugincel.CompilationResult
}

type namedResult struct {
	name string
	plugincel.CompilationResult
}

// LoadParking renders the driver chart from the checkout at root (as for an apiserver that serves
// the v1 MutatingAdmissionPolicy kind) and compiles its parking policies.
func LoadParking(root, namespace string, values map[string]any) (*Parking, error) {
	docs, err := renderDriverChart(root, namespace, values)
	if err != nil {
		return nil, err
	}
	found := map[string]admissionregistrationv1.MutatingAdmissionPolicy{}
	for _, doc := range docs {
		var p admissionregistrationv1.MutatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err == nil && p.Kind == "MutatingAdmissionPolicy" {
			found[p.Name] = p
		}
	}
	out := &Parking{}
	for _, name := range []string{ParkClaimedPolicy, ParkAutoClaimedPolicy} {
		p, ok := found[name]
		if !ok {
			return nil, fmt.Errorf("the metallb-iad chart renders no MutatingAdmissionPolicy %s", name)
		}
		c, err := compileMutating(name, p.Spec)
		if err != nil {
			return nil, err
		}
		out.Specs = append(out.Specs, p.Spec)
		out.policies = append(out.policies, c)
	}
	return out, nil
}

func compileMutating(name string, spec admissionregistrationv1.MutatingAdmissionPolicySpec) (mutatingPolicy, error) {
	if len(spec.Variables) > 0 {
		return mutatingPolicy{}, fmt.Errorf("%s: variables are not modelled offline", name)
	}
	compiler := plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	opts := plugincel.OptionalVariableDeclarations{HasParams: spec.ParamKind != nil, HasAuthorizer: true}
	p := mutatingPolicy{name: name, params: spec.ParamKind != nil}
	for _, mc := range spec.MatchConditions {
		r := compiler.CompileCELExpression(&matchconditions.MatchCondition{Name: mc.Name, Expression: mc.Expression}, opts, environment.NewExpressions)
		if r.Error != nil {
			return p, fmt.Errorf("%s: matchCondition %s: %w", name, mc.Name, r.Error)
		}
		p.conditions = append(p.conditions, namedResult{mc.Name, r})
	}
	mopts := opts
	mopts.HasPatchTypes = true
	for i, m := range spec.Mutations {
		if m.PatchType != admissionregistrationv1.PatchTypeApplyConfiguration || m.ApplyConfiguration == nil {
			return p, fmt.Errorf("%s: mutation %d is not an ApplyConfiguration", name, i)
		}
		r := compiler.CompileCELExpression(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, mopts, environment.NewExpressions)
		if r.Error != nil {
			return p, fmt.Errorf("%s: mutation %d: %w", name, i, r.Error)
		}
		p.mutations = append(p.mutations, r)
	}
	return p, nil
}

// ParkRequest is a Service write as the parking policies see it, and the IPAddressClasses the
// auto-claim policy's binding selects as params (all of them).
type ParkRequest struct {
	// Object is the Service as written; OldObject the stored one (nil on CREATE).
	Object, OldObject map[string]any
	// Classes are IPAddressClass objects, as unstructured maps.
	Classes []map[string]any
	// Namespace is the Service's namespace (namespaceObject: its name and labels); nil is a
	// namespace "tenant-example" without labels.
	Namespace map[string]any
}

// namespaceObject is the request's namespace as the policies see it.
func (req ParkRequest) namespaceObject() map[string]any {
	if req.Namespace != nil {
		return req.Namespace
	}
	return map[string]any{"metadata": map[string]any{"name": "tenant-example"}}
}

// ParkResult is what the policies did.
type ParkResult struct {
	// Object is the Service after the policies.
	Object map[string]any
	// Applied names the policies (and, for the auto-claim one, the class) that mutated it.
	Applied []string
}

// Evaluate runs the policies in order, each over the object the previous ones produced, the
// param-ful one once per class (as the apiserver does for a binding whose paramRef selects
// several objects). A condition that fails to evaluate is returned as an error: with
// failurePolicy Ignore the apiserver would skip the policy and silently lose the guarantee.
func (p *Parking) Evaluate(req ParkRequest) (ParkResult, error) {
	obj := req.Object
	res := ParkResult{}
	for _, pol := range p.policies {
		params := []map[string]any{nil}
		if pol.params {
			params = req.Classes
		}
		for _, param := range params {
			out, applied, err := pol.evaluate(obj, req.OldObject, param, req.namespaceObject())
			if err != nil {
				return res, err
			}
			if applied {
				name := pol.name
				if param != nil {
					name += "/" + fmt.Sprint(param["metadata"].(map[string]any)["name"])
				}
				res.Applied = append(res.Applied, name)
				obj = out
			}
		}
	}
	res.Object = obj
	return res, nil
}

func (pol mutatingPolicy) evaluate(obj, old, param, namespace map[string]any) (map[string]any, bool, error) {
	op := "UPDATE"
	var oldVal any = types.NullValue
	if old == nil {
		op = "CREATE"
	} else {
		oldVal = old
	}
	var paramVal any = types.NullValue
	if param != nil {
		paramVal = param
	}
	act := map[string]any{
		"object": obj, "oldObject": oldVal, "params": paramVal, "namespaceObject": namespace,
		"request": map[string]any{"operation": op, "namespace": namespace["metadata"].(map[string]any)["name"], "name": "web",
			"kind":     map[string]any{"group": "", "version": "v1", "kind": "Service"},
			"resource": map[string]any{"group": "", "version": "v1", "resource": "services"}},
	}
	for _, c := range pol.conditions {
		v, _, err := c.Program.Eval(act)
		if err != nil {
			return nil, false, fmt.Errorf("%s: matchCondition %s: %w", pol.name, c.name, err)
		}
		if ok, isBool := v.Value().(bool); !isBool {
			return nil, false, fmt.Errorf("%s: matchCondition %s gave %v", pol.name, c.name, v)
		} else if !ok {
			return obj, false, nil
		}
	}
	out := obj
	for i, m := range pol.mutations {
		v, _, err := m.Program.Eval(act)
		if err != nil {
			return nil, false, fmt.Errorf("%s: mutation %d: %w", pol.name, i, err)
		}
		ov, ok := v.(*dynamic.ObjectVal)
		if !ok {
			return nil, false, fmt.Errorf("%s: mutation %d gave %T", pol.name, i, v)
		}
		if err := ov.CheckTypeNamesMatchFieldPathNames(); err != nil {
			return nil, false, fmt.Errorf("%s: mutation %d: %w", pol.name, i, err)
		}
		applyConfig, ok := ov.Value().(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("%s: mutation %d gave %T", pol.name, i, ov.Value())
		}
		// The apiserver merges an apply configuration with the Service's schema; the deduced
		// schema merges maps the same way (annotations key by key), which is all these do.
		current := (&unstructured.Unstructured{Object: out}).DeepCopy()
		current.SetAPIVersion("v1")
		current.SetKind("Service")
		patchObj := &unstructured.Unstructured{Object: applyConfig}
		patchObj.SetAPIVersion("v1")
		patchObj.SetKind("Service")
		merged, err := patch.ApplyStructuredMergeDiff(managedfields.NewDeducedTypeConverter(), current, patchObj)
		if err != nil {
			return nil, false, fmt.Errorf("%s: mutation %d: %w", pol.name, i, err)
		}
		out = merged.(*unstructured.Unstructured).Object
	}
	return out, true, nil
}

// The driver chart's parking webhooks (one MutatingWebhookConfiguration), rendered where the
// cluster serves no MutatingAdmissionPolicy, and the condition of the auto-claim one that the
// driver keeps "true" while a class of its is marked for auto-claim.
const (
	ParkingWebhookConfiguration = "metallb-iad-parking"
	ParkClaimedWebhook          = "park-claimed.metallb-iad.local.sdn.cozystack.io"
	ParkAutoClaimedWebhook      = "park-auto-claimed.metallb-iad.local.sdn.cozystack.io"
	AutoClaimEnabledCondition   = "auto-claim-enabled"
)

// ParkingWebhook is the chart's parking webhooks' matchConditions, compiled with the apiserver's
// admission CEL compiler: which Service writes the apiserver sends to the driver at all.
type ParkingWebhook struct {
	Specs    []admissionregistrationv1.MutatingWebhook
	compiled [][]namedResult
}

// LoadParkingWebhook renders the driver chart from the checkout at root as for an apiserver
// without MutatingAdmissionPolicy and compiles its parking webhooks' matchConditions, with the
// auto-claim-enabled condition as the driver keeps it when autoClaimEnabled says so.
func LoadParkingWebhook(root, namespace string, values map[string]any, autoClaimEnabled bool) (*ParkingWebhook, error) {
	ch, err := charts.Load(charts.Dir(root, "metallb-iad"))
	if err != nil {
		return nil, err
	}
	manifest, err := charts.RenderFor(ch, "metallb-iad", namespace, values, nil)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(manifest, "\n---") {
		var c admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil || c.Kind != "MutatingWebhookConfiguration" || c.Name != ParkingWebhookConfiguration {
			continue
		}
		out := &ParkingWebhook{}
		compiler := plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		for _, w := range c.Webhooks {
			var conds []namedResult
			for _, mc := range w.MatchConditions {
				expr := mc.Expression
				if mc.Name == AutoClaimEnabledCondition {
					expr = fmt.Sprint(autoClaimEnabled)
				}
				r := compiler.CompileCELExpression(&matchconditions.MatchCondition{Name: mc.Name, Expression: expr},
					plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
				if r.Error != nil {
					return nil, fmt.Errorf("webhook %s: matchCondition %s: %w", w.Name, mc.Name, r.Error)
				}
				conds = append(conds, namedResult{mc.Name, r})
			}
			out.Specs = append(out.Specs, w)
			out.compiled = append(out.compiled, conds)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the metallb-iad chart renders no MutatingWebhookConfiguration %s", ParkingWebhookConfiguration)
}

// Calls says which of the webhooks the apiserver sends the write of req (in a tenant namespace)
// to: those whose every matchCondition holds. A condition that fails to evaluate is an error (the
// apiserver would then apply the failurePolicy).
func (w *ParkingWebhook) Calls(req ParkRequest) ([]string, error) {
	op := "UPDATE"
	var oldVal any = types.NullValue
	if req.OldObject == nil {
		op = "CREATE"
	} else {
		oldVal = req.OldObject
	}
	act := map[string]any{
		"object": req.Object, "oldObject": oldVal,
		"request": map[string]any{"operation": op, "namespace": "tenant-example", "name": "web",
			"kind":     map[string]any{"group": "", "version": "v1", "kind": "Service"},
			"resource": map[string]any{"group": "", "version": "v1", "resource": "services"}},
	}
	var called []string
	for i, conds := range w.compiled {
		all := true
		for _, c := range conds {
			v, _, err := c.Program.Eval(act)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: matchCondition %s: %w", w.Specs[i].Name, c.name, err)
			}
			ok, isBool := v.Value().(bool)
			if !isBool {
				return nil, fmt.Errorf("webhook %s: matchCondition %s gave %v", w.Specs[i].Name, c.name, v)
			}
			if !ok {
				all = false
				break
			}
		}
		if all {
			called = append(called, w.Specs[i].Name)
		}
	}
	return called, nil
}
