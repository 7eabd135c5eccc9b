package promcheck

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want Parsed
	}{
		{`up`, Parsed{Selectors: []Selector{{Metric: "up"}}}},
		{`max by (class) (address_controller_addresses{namespace="x", phase="Conflict"}) > 0`,
			Parsed{Selectors: []Selector{{Metric: "address_controller_addresses", Labels: []string{"namespace", "phase"}}}, Grouping: []string{"class"}}},
		{`histogram_quantile(0.95, sum by (le) (rate(a_bucket{job=~"$job"}[$__rate_interval])))`,
			Parsed{Selectors: []Selector{{Metric: "a_bucket", Labels: []string{"job"}}}, Grouping: []string{"le"}}},
		{`a{state="free"} / ignoring(state) a{state="size"} < 0.1`,
			Parsed{Selectors: []Selector{{Metric: "a", Labels: []string{"state"}}, {Metric: "a", Labels: []string{"state"}}}, Grouping: []string{"state"}}},
		{`sum(rate(b_total[5m])) without (pod) and on (x) c`,
			Parsed{Selectors: []Selector{{Metric: "b_total"}, {Metric: "c"}}, Grouping: []string{"pod", "x"}}},
	} {
		got, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got = withoutMatchers(got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.expr, got, tc.want)
		}
	}
	if _, err := Parse(`{job="x"}`); err == nil {
		t.Error("a selector without a metric name is accepted")
	}
	// Not PromQL: each must be refused, as Prometheus's own parser refuses it.
	for _, bad := range []string{
		`max(a) > > 0 by`,
		`sum by (x) (a) >`,
		`rate(a[5m]`,
		`a{phase="Pending"`,
		`sum(a) by`,
		`a{phase=Pending}`,
		`histogram_quantile(0.9)`,
		`nosuchfunction(a)`,
		`a / ignoring(x) b{`,
	} {
		if p, err := Parse(bad); err == nil {
			t.Errorf("%s: accepted as %+v", bad, p)
		}
	}
}

// Grafana's variables stand for durations and label values; they are substituted before the
// expression is parsed, and the selectors still come out of the parsed tree.
func TestParseGrafanaVariables(t *testing.T) {
	got, err := Parse(`sum by (le) (rate(a_bucket{namespace="$namespace", class=~"$class"}[$__rate_interval])) / on (le) group_left ($class_label) b[${__range}]`)
	if err == nil {
		t.Fatalf("a variable in a grouping clause is accepted: %+v", got)
	}
	got, err = Parse(`sum by (le) (rate(a_bucket{namespace="$namespace", class=~"$class"}[$__rate_interval])) + sum(rate(b[$__interval])) * $__range_s`)
	if err != nil {
		t.Fatal(err)
	}
	want := Parsed{
		Selectors: []Selector{{Metric: "a_bucket", Labels: []string{"namespace", "class"}}, {Metric: "b"}},
		Grouping:  []string{"le"},
	}
	got = withoutMatchers(got)
	if !reflect.DeepEqual(got.Selectors, want.Selectors) || !reflect.DeepEqual(got.Grouping, want.Grouping) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestCheck(t *testing.T) {
	known := Metrics{}
	known.Add("claims", []string{"phase"}, false)
	known.Add("latency", nil, true)
	known.Add("pool", []string{"state"}, false)
	known.Values("claims", "phase", "Pending", "Bound", "Lost")
	known.Values("pool", "state", "size", "free")
	for _, tc := range []struct {
		expr string
		want string // substring of the first error; empty: none
	}{
		{`max(claims{phase="Pending", namespace="x"}) > 0`, ""},
		{`histogram_quantile(0.9, sum by (le) (rate(latency_bucket[5m])))`, ""},
		{`claims{class="x"}`, "has no label class"},
		{`sum by (class) (claims)`, "the label class"},
		{`claimz`, "claimz is not exported"},
		{`latency_bucket{phase="x"}`, "no label phase"},
		{`max(claims) > > 0 by`, "parse error"},
		// Label values that are API constants are checked against them.
		{`claims{phase="Pending"} > 0`, ""},
		{`claims{phase="pending"} > 0`, `phase="pending"`},
		{`claims{phase!="Boundd"}`, `phase!="Boundd"`},
		{`claims{phase=~"Bound|Lost"}`, ""},
		{`claims{phase=~"Bound|Conflict"}`, `Conflict`},
		{`claims{phase=~"B.*"}`, ""},
		{`claims{phase=~"Z.*"}`, "matches none"},
		{`pool{state="free"} / ignoring(state) pool{state="size"}`, ""},
		{`pool{state="fre"}`, `state="fre"`},
		{`claims{namespace="$namespace", phase="$phase"}`, ""},
	} {
		errs := Check(tc.expr, &known)
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.expr, errs)
		case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%s: errors %v, want one with %q", tc.expr, errs, tc.want)
		}
	}
}

// withoutMatchers drops the matchers, which the tables do not spell out (their names are Labels).
func withoutMatchers(p Parsed) Parsed {
	for i := range p.Selectors {
		p.Selectors[i].Matchers = nil
	}
	return p
}
