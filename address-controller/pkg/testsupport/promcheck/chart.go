package promcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"text/template"

	"sigs.k8s.io/yaml"
)

// CRDEnum returns the values a CRD's schema allows at a field (its enum): the values of a label
// that is an API field, such as a phase.
func CRDEnum(crdFile string, path ...string) ([]string, error) {
	data, err := os.ReadFile(crdFile)
	if err != nil {
		return nil, err
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return nil, err
	}
	if len(crd.Spec.Versions) != 1 {
		return nil, fmt.Errorf("%s: %d versions, want one", crdFile, len(crd.Spec.Versions))
	}
	n := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, p := range path {
		next, ok := n.Properties[p]
		if !ok {
			return nil, fmt.Errorf("%s: no field %v", crdFile, path)
		}
		n = next
	}
	if len(n.Enum) == 0 {
		return nil, fmt.Errorf("%s: field %v has no enum", crdFile, path)
	}
	return n.Enum, nil
}

type schemaNode struct {
	Properties map[string]schemaNode
	Enum       []string
}

// Expression is one PromQL expression a chart ships and where.
type Expression struct {
	Where, Expr string
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// ChartExpressions reads the alert expressions of a chart (files/alerts.yaml, rendered with the
// chart's default values and the namespace given, as the PrometheusRule template renders it) and
// the queries of its Grafana dashboard (files/dashboard.json). A dashboard variable
// label_values(m, l) becomes `group by (l) (m)`, so that m must exist and carry l.
func ChartExpressions(chartDir, namespace string) ([]Expression, error) {
	var values map[string]any
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return nil, err
	}
	text, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("alerts").Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, err
	}
	var rendered bytes.Buffer
	if err := tmpl.Execute(&rendered, map[string]any{"Release": map[string]any{"Namespace": namespace}, "Values": values}); err != nil {
		return nil, err
	}
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(rendered.Bytes(), &rules); err != nil {
		return nil, err
	}
	var out []Expression
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, Expression{Where: "alert " + r.Alert + r.Record, Expr: r.Expr})
		}
	}

	data, err = os.ReadFile(filepath.Join(chartDir, "files", "dashboard.json"))
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels     []dashboardPanel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var panels func([]dashboardPanel)
	panels = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Expression{Where: "panel " + p.Title, Expr: t.Expr})
			}
			panels(p.Panels) // a collapsed row keeps its panels inside it
		}
	}
	panels(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			return nil, fmt.Errorf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, q)
		}
		out = append(out, Expression{Where: "variable " + v.Name, Expr: fmt.Sprintf("group by (%s) (%s)", m[2], m[1])})
	}
	return out, nil
}

// dashboardPanel is a Grafana panel: its queries, and the panels of a collapsed row.
type dashboardPanel struct {
	Title   string
	Targets []struct{ Expr string }
	Panels  []dashboardPanel
}

// CheckChart checks every expression a chart ships (ChartExpressions) against the metrics
// known, merged with controller-runtime's standard ones, and returns a problem per unknown
// metric, label or label value. Fewer than minExpressions expressions read is itself an error:
// a chart whose rules moved would otherwise pass with nothing checked.
func CheckChart(ctx context.Context, chartDir, namespace string, known *Metrics, minExpressions int) ([]error, error) {
	std, err := ControllerRuntime(ctx)
	if err != nil {
		return nil, err
	}
	known.Merge(std)
	exprs, err := ChartExpressions(chartDir, namespace)
	if err != nil {
		return nil, err
	}
	if len(exprs) < minExpressions {
		return nil, fmt.Errorf("only %d expressions read from the chart %s (want at least %d)", len(exprs), chartDir, minExpressions)
	}
	var problems []error
	for _, e := range exprs {
		for _, err := range Check(e.Expr, known) {
			problems = append(problems, fmt.Errorf("%s: %w", e.Where, err))
		}
	}
	return problems, nil
}
