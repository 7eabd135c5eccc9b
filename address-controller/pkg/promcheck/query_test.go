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
			Parsed{Selectors: []Selector{{"address_controller_addresses", []string{"namespace", "phase"}}}, Grouping: []string{"class"}}},
		{`histogram_quantile(0.95, sum by (le) (rate(a_bucket{job=~"$job"}[$__rate_interval])))`,
			Parsed{Selectors: []Selector{{"a_bucket", []string{"job"}}}, Grouping: []string{"le"}}},
		{`a{state="free"} / ignoring(state) a{state="size"} < 0.1`,
			Parsed{Selectors: []Selector{{"a", []string{"state"}}, {"a", []string{"state"}}}, Grouping: []string{"state"}}},
		{`sum(rate(b_total[5m])) without (pod) and on (x) c`,
			Parsed{Selectors: []Selector{{Metric: "b_total"}, {Metric: "c"}}, Grouping: []string{"pod", "x"}}},
	} {
		got, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.expr, got, tc.want)
		}
	}
	if _, err := Parse(`{job="x"}`); err == nil {
		t.Error("a selector without a metric name is accepted")
	}
}

func TestCheck(t *testing.T) {
	known := Metrics{}
	known.Add("claims", []string{"phase"}, false)
	known.Add("latency", nil, true)
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
	} {
		errs := Check(tc.expr, known)
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.expr, errs)
		case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%s: errors %v, want one with %q", tc.expr, errs, tc.want)
		}
	}
}
