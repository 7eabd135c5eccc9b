package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A build's figures come from its report: the plain phase's MetalLB status writes per Service
// (every attempt, conflicts too), the phases' times and the headline ratios; a step that did
// not finish gives no figure.
func TestFiguresReadAReport(t *testing.T) {
	rep := &Report{Versions: versions("v0.16.1+patched"), Check: CheckResult{OK: true}}
	rep.Steps = []*Step{
		{Name: PhasePlain, Kind: PhasePlain, N: 4, Done: 4, Seconds: 10, SettleSeconds: 2, MetalLBWrites: 9, LoadAvg: 5,
			MetalLBStatus: StatusWrites{ByTarget: map[string]int{"plain": 6, "other": 2}, Conflicts: 1}},
		{Name: "baseline-claims", Kind: PhasePlain, N: 4, Done: 4, Seconds: 12},
		{Name: PhaseClaims, Kind: PhaseClaims, N: 4, Done: 4, Seconds: 24, ProjectWritesPerObject: 7},
		{Name: "baseline-attach", Kind: PhasePlain, N: 4, Done: 4, Seconds: 10, Latency: &Latency{Count: 4, P50Seconds: 1, P99Seconds: 2, MaxSeconds: 2}},
		{Name: PhaseAttach, Kind: PhaseAttach, N: 4, Done: 3, TimedOut: true, Seconds: 99, Latency: &Latency{Count: 3, P50Seconds: 5, P99Seconds: 9, MaxSeconds: 9}},
	}
	rep.Headline = Headline(rep.Steps)
	f := figures(rep)
	want := BuildFigures{MetalLB: "v0.16.1+patched", PlainSeconds: 10, PlainSettleSeconds: 2, StatusWritesPerService: 2,
		StatusConflicts: 1, MetalLBWritesPerService: 2.25, ClaimsSeconds: 24, ClaimsBaselineSeconds: 12, ClaimsRatio: 0.5,
		ProjectWritesPerAddress: 7, Check: true, PlainDone: true, ClaimsDone: true, LoadAvg: 1}
	if f != want {
		t.Errorf("figures:\n got %+v\nwant %+v", f, want)
	}
	// Once attach finishes, its latencies and its baseline's are figures too.
	rep.Steps[4].TimedOut, rep.Steps[4].Done = false, 4
	rep.Headline = Headline(rep.Steps)
	f = figures(rep)
	if f.AttachP50Seconds != 5 || f.AttachP99Seconds != 9 || f.AttachMaxSeconds != 9 || f.AttachBaselineP50Seconds != 1 || f.AttachBaselineP99Seconds != 2 {
		t.Errorf("attach latencies: got p50 %v p99 %v max %v, baseline p50 %v p99 %v; want 5, 9, 9, 1, 2",
			f.AttachP50Seconds, f.AttachP99Seconds, f.AttachMaxSeconds, f.AttachBaselineP50Seconds, f.AttachBaselineP99Seconds)
	}
}

func TestComparisonText(t *testing.T) {
	c := &Comparison{Commit: "abc", Builds: []BuildFigures{
		{MetalLB: "v0.16.1", PlainSeconds: 20, StatusWritesPerService: 2, StatusConflicts: 12, ClaimsRatio: 0.4, AttachRatio: 2, Check: true,
			PlainDone: true, ClaimsDone: true, AttachDone: true, ProjectWritesPerAttach: 3, AttachP99Seconds: 24, AttachBaselineP99Seconds: 8},
		{MetalLB: "v0.16.1+patched", PlainSeconds: 10, StatusWritesPerService: 1, ClaimsRatio: 0.5, Check: false,
			PlainDone: true, ClaimsDone: true},
	}}
	var buf bytes.Buffer
	c.WriteText(&buf)
	for _, want := range []string{
		"| figure | MetalLB v0.16.1 | MetalLB v0.16.1+patched | change |",
		"| plain: time | 20.0 s | 10.0 s | 2.00× faster |",
		"| plain: MetalLB status writes / Service | 2.00 | 1.00 | -1.00 |",
		"| claims: rate ratio (≥ 0.8) | 0.40× | 0.50× | +0.10 |",
		"| attach: time ratio (≤ 1.25) | 2.00× | - | - |",
		"| plain: status writes answered 409 | 12 | 0 | -12 |", // a real zero, not a missing figure
		"| attach: project writes / Service | 3.00 | - | - |",  // the attach phase did not finish
		"| attach: create to its claim's address, p99 | 24.0 s | - | - |",
		"| attach: plain create to an address, p99 | 8.0 s | - | - |",
		"| final check | passed | FAILED | |",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
}

// A comparison is refused before anything runs when it names one build, a build twice, or a
// build that is not built.
func TestRunEachChecksTheBuildsFirst(t *testing.T) {
	for _, tt := range []struct {
		builds []string
		want   string
	}{
		{[]string{"v0.16.1"}, "two MetalLB builds"},
		{[]string{"v0.16.1", "v0.16.1"}, "named twice"},
		{[]string{"v0.16.1", "v9.9.9"}, "v9.9.9 is not built"},
	} {
		cmp, err := RunEach(context.Background(), Config{N: 1}, tt.builds, nil)
		if cmp != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, %v; want no comparison and an error saying %q", tt.builds, cmp, err, tt.want)
		}
	}
}
