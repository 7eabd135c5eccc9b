package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
		{Name: PhaseClaims, Kind: PhaseClaims, N: 4, Done: 4, Seconds: 24, ProjectWritesPerObject: 7,
			Latency: &Latency{Count: 4, P50Seconds: 3, P99Seconds: 6, MaxSeconds: 6}},
		{Name: "baseline-attach-pinned", Kind: PhasePlain, N: 4, Done: 4, Seconds: 10, Latency: &Latency{Count: 4, P50Seconds: 1, P99Seconds: 2, MaxSeconds: 2}},
		{Name: PhaseAttach, Kind: PhaseAttach, N: 4, Done: 3, TimedOut: true, Seconds: 99, Latency: &Latency{Count: 3, P50Seconds: 5, P99Seconds: 9, MaxSeconds: 9}},
	}
	rep.Headline = Headline(rep.Steps)
	f := figures(rep)
	want := BuildFigures{MetalLB: "v0.16.1+patched", Rounds: 1, PlainSeconds: one(10), PlainSettleSeconds: 2, StatusWritesPerService: 2,
		StatusConflicts: 1, MetalLBWritesPerService: 2.25, ClaimsSeconds: one(24), ClaimsBaselineSeconds: one(12), ClaimsRatio: one(0.5),
		ClaimsP50Seconds: one(3), ClaimsP99Seconds: one(6), ClaimsMaxSeconds: one(6),
		ProjectWritesPerAddress: 7, Check: true, PlainDone: true, ClaimsDone: true, LoadAvg: 1}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	// Once attach finishes, its latencies and its (pinned) baseline's are figures too.
	rep.Steps[4].TimedOut, rep.Steps[4].Done = false, 4
	rep.Headline = Headline(rep.Steps)
	f = figures(rep)
	if f.AttachBaseline != AttachBaselinePinned || f.AttachRatio.Median != 9.9 || f.AttachPoolRatio != nil {
		t.Errorf("attach against %q: ratio %+v, pool ratio %+v; want pinned, 9.9, none", f.AttachBaseline, f.AttachRatio, f.AttachPoolRatio)
	}
	if diff := cmp.Diff([]*Stat{one(5), one(9), one(9), one(1), one(2)},
		[]*Stat{f.AttachP50Seconds, f.AttachP99Seconds, f.AttachMaxSeconds, f.AttachBaselineP50Seconds, f.AttachBaselineP99Seconds}); diff != "" {
		t.Errorf("attach latencies: p50, p99, max, baseline p50, p99 (-want +got):\n%s", diff)
	}
	// With both attach baselines, the attach figures are against the pinned one, and the pool's
	// ratio is a figure of its own.
	rep.Steps = append(rep.Steps, &Step{Name: "baseline-attach", Kind: PhasePlain, N: 4, Done: 4, Seconds: 33})
	rep.Headline = Headline(rep.Steps)
	f = figures(rep)
	if f.AttachBaseline != AttachBaselinePinned || f.AttachRatio.Median != 9.9 || f.AttachPoolRatio.Median != 3 {
		t.Errorf("both baselines: against %q, ratio %+v, pool ratio %+v; want pinned, 9.9, 3", f.AttachBaseline, f.AttachRatio, f.AttachPoolRatio)
	}
}

// Over rounds, a build's figures are medians: times and ratios with their spread, counts per
// object as one number.
func TestFiguresOverRounds(t *testing.T) {
	rep := &Report{Versions: versions("v0.16.1"), Config: ReportConfig{Rounds: 3}}
	for round, secs := range []float64{30, 10, 20} {
		rep.Steps = append(rep.Steps,
			&Step{Name: "baseline-claims", Kind: PhasePlain, Round: round + 1, N: 2, Done: 2, Seconds: 10},
			&Step{Name: PhaseClaims, Kind: PhaseClaims, Round: round + 1, N: 2, Done: 2, Seconds: secs, ProjectWritesPerObject: 5 + float64(round)})
	}
	rep.Headline = Headline(rep.Steps)
	f := figures(rep)
	if diff := cmp.Diff(&Stat{Median: 20, Min: 10, Max: 30, Rounds: []float64{30, 10, 20}}, f.ClaimsSeconds); diff != "" {
		t.Errorf("claims seconds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&Stat{Median: 0.5, Min: 1.0 / 3, Max: 1, Rounds: []float64{1.0 / 3, 1, 0.5}}, f.ClaimsRatio); diff != "" {
		t.Errorf("claims ratio (-want +got):\n%s", diff)
	}
	if f.ProjectWritesPerAddress != 6 || f.Rounds != 3 {
		t.Errorf("writes per address %v over %d rounds, want the median 6 over 3", f.ProjectWritesPerAddress, f.Rounds)
	}
}

func TestComparisonText(t *testing.T) {
	c := &Comparison{Commit: "abc", Builds: []BuildFigures{
		{MetalLB: "v0.16.1", Rounds: 1, AttachBaseline: AttachBaselinePinned, PlainSeconds: one(20), StatusWritesPerService: 2, StatusConflicts: 12,
			ClaimsRatio: one(0.4), AttachRatio: one(2), Check: true, PlainDone: true, ClaimsDone: true, AttachDone: true,
			ProjectWritesPerAttach: 3, AttachP99Seconds: one(24), AttachBaselineP99Seconds: one(8), ClaimsP99Seconds: one(30)},
		{MetalLB: "v0.16.1+patched", Rounds: 1, AttachBaseline: AttachBaselinePinned, PlainSeconds: one(10), StatusWritesPerService: 1,
			ClaimsRatio: one(0.5), Check: false, PlainDone: true, ClaimsDone: true, ClaimsP99Seconds: one(15)},
	}}
	var buf bytes.Buffer
	c.WriteText(&buf)
	for _, want := range []string{
		"| figure | MetalLB v0.16.1 | MetalLB v0.16.1+patched | change |",
		"| plain: time | 20.0 s | 10.0 s | 2.00× faster |",
		"| plain: MetalLB status writes / Service | 2.00 | 1.00 | -1.00 |",
		"| claims: rate ratio (≥ 0.8) | 0.40× | 0.50× | +0.10 |",
		"| claims: create to Bound, p99 | 30.0 s | 15.0 s | 2.00× faster |",
		"| attach: time ratio to plain pinned (≤ 1.25) | 2.00× | - | - |",
		"| plain: status writes answered 409 | 12 | 0 | -12 |", // a real zero, not a missing figure
		"| attach: project writes / Service | 3.00 | - | - |",  // the attach phase did not finish
		"| attach: create to its claim's address, p99 | 24.0 s | - | - |",
		"| attach: plain pinned create to an address, p99 | 8.0 s | - | - |",
		"| final check | passed | FAILED | |",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "any IP of the pool") {
		t.Errorf("a pool ratio row without a pool baseline:\n%s", buf.String())
	}

	// Over rounds, a figure shows its spread; the change compares the medians.
	c.Builds[0].Rounds, c.Builds[1].Rounds = 3, 3
	c.Builds[0].ClaimsRatio = &Stat{Median: 0.4, Min: 0.35, Max: 0.45, Rounds: []float64{0.45, 0.4, 0.35}}
	c.Builds[1].ClaimsRatio = &Stat{Median: 0.5, Min: 0.5, Max: 0.6, Rounds: []float64{0.5, 0.6, 0.5}}
	c.Builds[0].AttachPoolRatio = one(1.5)
	buf.Reset()
	c.WriteText(&buf)
	for _, want := range []string{
		"| claims: rate ratio (≥ 0.8) | 0.40× (0.35–0.45) | 0.50× (0.50–0.60) | +0.10 |",
		"| attach: time ratio to plain (any IP of the pool) | 1.50× | - | - |",
		"Each phase ran 3 times in each run",
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
