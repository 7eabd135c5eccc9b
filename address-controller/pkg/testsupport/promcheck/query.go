package promcheck

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// TargetLabels are attached by the scraper (ServiceMonitor or VMServiceScrape), not by the
// controllers, and may be used on any series.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// Selector is one series selector of an expression: the metric name and its label matchers.
type Selector struct {
	Metric string
	Labels []string
	// Matchers are the selector's label matchers (not the metric name), in order.
	Matchers []*labels.Matcher
}

// Parsed is what an expression refers to.
type Parsed struct {
	Selectors []Selector
	Grouping  []string // labels named in by/without/on/ignoring/group_left/group_right, sorted
}

// grafanaBuiltins are the variables Grafana fills in outside label values, and what stands for
// them while the expression is parsed: a duration for ranges, a number for the _ms/_s forms.
var grafanaBuiltins = regexp.MustCompile(`\$\{?(__rate_interval|__interval|__range)(_ms|_s)?\}?`)

func substituteGrafana(expr string) string {
	return grafanaBuiltins.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasSuffix(strings.TrimSuffix(v, "}"), "_ms") || strings.HasSuffix(strings.TrimSuffix(v, "}"), "_s") {
			return "300"
		}
		return "5m"
	})
}

var promql = parser.NewParser(parser.Options{})

// Parse parses a PromQL expression with Prometheus's own parser (after substituting Grafana's
// built-in interval variables; other variables may stand only inside label values, where they
// are strings) and returns the selectors and grouping labels of its syntax tree.
func Parse(expr string) (Parsed, error) {
	tree, err := promql.ParseExpr(substituteGrafana(expr))
	if err != nil {
		return Parsed{}, fmt.Errorf("%q: %w", expr, err)
	}
	var p Parsed
	var walkErr error
	parser.Inspect(tree, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				walkErr = fmt.Errorf("%q: a selector without a metric name", expr)
				return walkErr
			}
			s := Selector{Metric: n.Name}
			for _, m := range n.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					continue
				}
				s.Labels = append(s.Labels, m.Name)
				s.Matchers = append(s.Matchers, m)
			}
			p.Selectors = append(p.Selectors, s)
		case *parser.AggregateExpr:
			p.Grouping = append(p.Grouping, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				p.Grouping = append(p.Grouping, n.VectorMatching.MatchingLabels...)
				p.Grouping = append(p.Grouping, n.VectorMatching.Include...)
			}
		}
		return nil
	})
	if walkErr != nil {
		return Parsed{}, walkErr
	}
	sort.Strings(p.Grouping)
	p.Grouping = slices.Compact(p.Grouping)
	if len(p.Grouping) == 0 {
		p.Grouping = nil
	}
	return p, nil
}

// Check reports every metric of expr that known lacks, every label that neither the metric (for
// a matcher) nor any metric of the expression (for grouping) has, nor the scraper adds, and every
// matcher value that is not among the values the code exports for that label, where known lists
// them (API constants such as phases and pool states).
func Check(expr string, known *Metrics) []error {
	p, err := Parse(expr)
	if err != nil {
		return []error{err}
	}
	if len(p.Selectors) == 0 {
		return []error{fmt.Errorf("%q selects no metric", expr)}
	}
	var errs []error
	var all []string
	for _, s := range p.Selectors {
		labels, ok := known.Labels(s.Metric)
		if !ok {
			errs = append(errs, fmt.Errorf("%q: metric %s is not exported by the controllers", expr, s.Metric))
			continue
		}
		all = union(all, labels)
		for _, l := range s.Labels {
			if !slices.Contains(labels, l) && !slices.Contains(TargetLabels, l) {
				errs = append(errs, fmt.Errorf("%q: metric %s has no label %s (it has %v)", expr, s.Metric, l, labels))
			}
		}
		for _, m := range s.Matchers {
			if err := checkValue(s.Metric, m, known); err != nil {
				errs = append(errs, fmt.Errorf("%q: %w", expr, err))
			}
		}
	}
	for _, l := range p.Grouping {
		if !slices.Contains(all, l) && !slices.Contains(TargetLabels, l) {
			errs = append(errs, fmt.Errorf("%q: no metric of the expression has the label %s", expr, l))
		}
	}
	return errs
}

var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_-]+(\|[A-Za-z0-9_-]+)*$`)

// checkValue checks one matcher's value against the values the code exports for the label.
func checkValue(metric string, m *labels.Matcher, known *Metrics) error {
	values, ok := known.LabelValues(metric, m.Name)
	if !ok || m.Value == "" || strings.Contains(m.Value, "$") { // unknown, absent, or a Grafana variable
		return nil
	}
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		if !slices.Contains(values, m.Value) {
			return fmt.Errorf("metric %s: %s is not a value the code exports for %s (%v)", metric, m, m.Name, values)
		}
	case labels.MatchRegexp, labels.MatchNotRegexp:
		if literalAlternation.MatchString(m.Value) {
			for _, v := range strings.Split(m.Value, "|") {
				if !slices.Contains(values, v) {
					return fmt.Errorf("metric %s: %s names %s, not a value the code exports for %s (%v)", metric, m, v, m.Name, values)
				}
			}
			return nil
		}
		if !slices.ContainsFunc(values, func(v string) bool {
			return m.Matches(v)
		}) {
			return fmt.Errorf("metric %s: %s matches none of the values the code exports for %s (%v)", metric, m, m.Name, values)
		}
	}
	return nil
}
