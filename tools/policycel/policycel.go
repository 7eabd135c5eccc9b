// Package policycel evaluates the driver chart's service-pins ValidatingAdmissionPolicy with the
// CEL environment the apiserver uses (k8s.io/apiserver/pkg/cel/environment), outside any
// cluster. The policy is rendered from the chart, so what is evaluated is what ships; the fuzz
// test and the e2e sample compare it with the rule of docs/design.md#the-service-pins-policy.
package policycel

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/charts"
)

// PolicyName is the policy's name in the driver chart.
const PolicyName = "metallb-iad-service-pins"

// Policy is the compiled policy.
type Policy struct {
	// Spec is the policy as the chart renders it.
	Spec      admissionregistrationv1.ValidatingAdmissionPolicySpec
	variables []compiled
	checks    []check
}

type compiled struct {
	name string
	prg  cel.Program
}

type check struct {
	expr, message cel.Program
}

// Load renders the driver chart from the checkout at root into namespace with values, and
// compiles its service-pins policy.
func Load(root, namespace string, values map[string]any) (*Policy, error) {
	docs, err := renderDriverChart(root, namespace, values)
	if err != nil {
		return nil, err
	}
	for _, doc := range docs {
		var vap admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &vap); err != nil || vap.Kind != "ValidatingAdmissionPolicy" || vap.Name != PolicyName {
			continue
		}
		return Compile(vap.Spec)
	}
	return nil, fmt.Errorf("the metallb-iad chart renders no ValidatingAdmissionPolicy %s", PolicyName)
}

// Compile compiles every variable, validation and message of spec, as the apiserver would for a
// new policy (the environment of new expressions, at the default compatibility version).
func Compile(spec admissionregistrationv1.ValidatingAdmissionPolicySpec) (*Policy, error) {
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).NewExpressionsEnv()
	env, err := base.Extend(
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("params", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		return nil, err
	}
	prog := func(expr string) (cel.Program, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("compiling %q: %w", expr, iss.Err())
		}
		return env.Program(ast)
	}
	p := &Policy{Spec: spec}
	for _, v := range spec.Variables {
		prg, err := prog(v.Expression)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		p.variables = append(p.variables, compiled{v.Name, prg})
	}
	for _, v := range spec.Validations {
		c := check{}
		if c.expr, err = prog(v.Expression); err != nil {
			return nil, err
		}
		if v.MessageExpression != "" {
			if c.message, err = prog(v.MessageExpression); err != nil {
				return nil, err
			}
		}
		p.checks = append(p.checks, c)
	}
	return p, nil
}

// Request is one admission request for a Service.
type Request struct {
	// Object is the Service after the write; OldObject before it (nil on CREATE). Both as
	// unstructured maps, as JSON decodes them.
	Object, OldObject map[string]any
	Username          string
	Groups            []string
}

// Decision is the policy's verdict.
type Decision struct {
	Allowed bool
	// Message is the first failing validation's message.
	Message string
}

// Evaluate runs the policy over req. An evaluation error counts as a denial, as with
// failurePolicy Fail.
func (p *Policy) Evaluate(req Request) (Decision, error) {
	var old any = types.NullValue
	if req.OldObject != nil {
		old = req.OldObject
	}
	groups := make([]any, len(req.Groups))
	for i, g := range req.Groups {
		groups[i] = g
	}
	userInfo := map[string]any{"username": req.Username}
	if len(req.Groups) > 0 {
		userInfo["groups"] = groups
	}
	vars := map[string]any{}
	act := map[string]any{
		"object": req.Object, "oldObject": old, "params": types.NullValue,
		"request":   map[string]any{"userInfo": userInfo, "operation": operation(req)},
		"variables": vars,
	}
	for _, v := range p.variables {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			return Decision{}, fmt.Errorf("variable %s: %w", v.name, err)
		}
		vars[v.name] = val
	}
	for i, c := range p.checks {
		val, _, err := c.expr.Eval(act)
		if err != nil {
			return Decision{}, fmt.Errorf("validation %d: %w", i, err)
		}
		if ok, isBool := val.Value().(bool); isBool && ok {
			continue
		}
		msg := p.Spec.Validations[i].Message
		if c.message != nil {
			if m, _, err := c.message.Eval(act); err == nil {
				msg = fmt.Sprint(refValue(m))
			}
		}
		return Decision{Allowed: false, Message: msg}, nil
	}
	return Decision{Allowed: true}, nil
}

func operation(req Request) string {
	if req.OldObject == nil {
		return "CREATE"
	}
	return "UPDATE"
}

func refValue(v ref.Val) any { return v.Value() }

// renderDriverChart renders the driver chart from the checkout at root and returns its
// manifest's documents.
func renderDriverChart(root, namespace string, values map[string]any) ([]string, error) {
	ch, err := charts.Load(charts.Dir(root, "metallb-iad"))
	if err != nil {
		return nil, err
	}
	manifest, err := charts.Render(ch, namespace, values)
	if err != nil {
		return nil, err
	}
	return strings.Split(manifest, "\n---"), nil
}
