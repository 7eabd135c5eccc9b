package promcheck

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// TargetLabels are attached by the scraper (ServiceMonitor or VMServiceScrape), not by the
// controllers, and may be used on any series.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// functions and keywords of PromQL that look like identifiers.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true,
}

var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// Selector is one series selector of an expression: the metric name and the labels it matches.
type Selector struct {
	Metric string
	Labels []string
}

// Parsed is what an expression refers to.
type Parsed struct {
	Selectors []Selector
	Grouping  []string // labels named in by/without/on/ignoring/group_left/group_right
}

type token struct {
	kind byte // 'i' identifier, 's' string, 'p' punctuation, 'n' number
	text string
}

func lex(expr string) ([]token, error) {
	var out []token
	r := []rune(expr)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#': // comment to end of line
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(r) && r[j] != c {
				if r[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(r) {
				return nil, fmt.Errorf("unterminated string in %q", expr)
			}
			out = append(out, token{'s', string(r[i+1 : j])})
			i = j + 1
		case c == '[': // range or subquery: durations and Grafana variables, nothing to check
			depth := 0
			for ; i < len(r); i++ {
				if r[i] == '[' {
					depth++
				} else if r[i] == ']' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			i++
		case c == '$': // a Grafana variable standing for a value
			j := i + 1
			for j < len(r) && (r[j] == '_' || unicode.IsLetter(r[j]) || unicode.IsDigit(r[j])) {
				j++
			}
			out = append(out, token{'n', string(r[i:j])})
			i = j
		case c == '_' || c == ':' || unicode.IsLetter(c):
			j := i
			for j < len(r) && (r[j] == '_' || r[j] == ':' || unicode.IsLetter(r[j]) || unicode.IsDigit(r[j])) {
				j++
			}
			out = append(out, token{'i', string(r[i:j])})
			i = j
		case unicode.IsDigit(c) || c == '.':
			j := i
			for j < len(r) && (unicode.IsDigit(r[j]) || unicode.IsLetter(r[j]) || r[j] == '.') {
				j++
			}
			out = append(out, token{'n', string(r[i:j])})
			i = j
		default:
			// Operators of one or two characters: = != =~ !~ == <= >= and the rest.
			if i+1 < len(r) && strings.ContainsRune("=!<>", c) && strings.ContainsRune("=~", r[i+1]) {
				out = append(out, token{'p', string(r[i : i+2])})
				i += 2
				continue
			}
			out = append(out, token{'p', string(c)})
			i++
		}
	}
	return out, nil
}

// Parse extracts the selectors and grouping labels of a PromQL expression. It understands
// enough PromQL for rules and dashboards: selectors with matchers, functions and aggregations,
// grouping clauses, binary operators, ranges and Grafana variables.
func Parse(expr string) (Parsed, error) {
	toks, err := lex(expr)
	if err != nil {
		return Parsed{}, err
	}
	var p Parsed
	matchers := func(i int) ([]string, int, error) { // toks[i] is "{"
		var labels []string
		i++
		for i < len(toks) && toks[i].text != "}" {
			if toks[i].kind != 'i' {
				return nil, 0, fmt.Errorf("expected a label name in %q, got %q", expr, toks[i].text)
			}
			labels = append(labels, toks[i].text)
			if i+2 >= len(toks) || toks[i+2].kind != 's' {
				return nil, 0, fmt.Errorf("malformed matcher for %s in %q", toks[i].text, expr)
			}
			i += 3
			if i < len(toks) && toks[i].text == "," {
				i++
			}
		}
		if i >= len(toks) {
			return nil, 0, fmt.Errorf("unterminated selector in %q", expr)
		}
		return labels, i + 1, nil
	}
	for i := 0; i < len(toks); {
		t := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1].text
		}
		switch {
		case t.kind == 'i' && groupingKeywords[t.text]:
			i++
			if i < len(toks) && toks[i].text == "(" {
				for i++; i < len(toks) && toks[i].text != ")"; i++ {
					if toks[i].kind == 'i' {
						p.Grouping = append(p.Grouping, toks[i].text)
					}
				}
				i++
			}
		case t.kind == 'i' && (keywords[t.text] || aggregations[t.text] && groupingKeywords[next]):
			i++
		case t.kind == 'i' && next == "(":
			i++ // a function or an aggregation
		case t.kind == 'i' && next == "{":
			labels, j, err := matchers(i + 1)
			if err != nil {
				return Parsed{}, err
			}
			p.Selectors = append(p.Selectors, Selector{Metric: t.text, Labels: labels})
			i = j
		case t.kind == 'i':
			p.Selectors = append(p.Selectors, Selector{Metric: t.text})
			i++
		case t.text == "{":
			return Parsed{}, fmt.Errorf("a selector without a metric name in %q", expr)
		default:
			i++
		}
	}
	return p, nil
}

// Check reports every metric of expr that known lacks, and every label that neither the metric
// (for a matcher) nor any metric of the expression (for grouping) has, nor the scraper adds.
func Check(expr string, known Metrics) []error {
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
		labels, ok := known[s.Metric]
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
	}
	for _, l := range p.Grouping {
		if !slices.Contains(all, l) && !slices.Contains(TargetLabels, l) {
			errs = append(errs, fmt.Errorf("%q: no metric of the expression has the label %s", expr, l))
		}
	}
	return errs
}
