package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Percentiles are nearest-rank: always a value measured, the smallest that at least p percent
// of the values do not exceed.
func TestPercentileIsTheNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1) // 1..100
	}
	three00 := make([]float64, 300)
	for i := range three00 {
		three00[i] = float64(i + 1) // 1..300
	}
	for _, tt := range []struct {
		name   string
		sorted []float64
		p      int
		want   float64
	}{
		{"none", nil, 50, 0},
		{"one value is every percentile", []float64{4}, 99, 4},
		{"p50 of two is the lower", []float64{1, 9}, 50, 1},
		{"p50 of four is the second", []float64{1, 2, 3, 4}, 50, 2},
		{"p99 of four is the largest", []float64{1, 2, 3, 4}, 99, 4},
		{"p7 of 1..100, where floating point overshoots", hundred, 7, 7},
		{"p99 of 1..100", hundred, 99, 99},
		{"p99 of 1..300 is the 297th", three00, 99, 297},
		{"p100 is the max", three00, 100, 300},
		{"p0 is the min", three00, 0, 1},
	} {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: percentile(p%d) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

// An object's latency runs from its create being sent to the first time it was seen done;
// objects never sent, never done, or done before their create (leftovers) are left out.
func TestCreateToDoneAndLatency(t *testing.T) {
	t0 := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sent := []time.Time{at(0), at(10), at(20), {}, at(40), at(50)}
	doneAt := map[string]time.Time{
		"attach-00000": at(1000),
		"attach-00001": at(2010),
		"attach-00002": at(30020),
		"attach-00003": at(500), // never sent: left out
		"attach-00004": at(30),  // done before its create was sent: a leftover, left out
		// attach-00005 never done: left out
		"plain-00000": at(1), // another step's object
	}
	got := createToDone("attach-", sent, doneAt)
	want := []time.Duration{time.Second, 2 * time.Second, 30 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("durations (-want +got):\n%s", diff)
	}
	wantLat := &Latency{Count: 3, P50Seconds: 2, P99Seconds: 30, MaxSeconds: 30}
	if diff := cmp.Diff(wantLat, latencyOf([]time.Duration{30 * time.Second, time.Second, 2 * time.Second})); diff != "" {
		t.Errorf("latency of unsorted durations (-want +got):\n%s", diff)
	}
	if latencyOf(nil) != nil {
		t.Error("latency of nothing measured is not nil")
	}
}

// The headline carries each phase's latencies beside its baseline's, and their ratios (phase
// over baseline, for claims too, whose time ratio is the other way round); a phase without a
// baseline, or a baseline without latencies, gets none, but keeps its own.
func TestHeadlineLatencies(t *testing.T) {
	lat := func(p50, p99, maxS float64) *Latency {
		return &Latency{Count: 10, P50Seconds: p50, P99Seconds: p99, MaxSeconds: maxS}
	}
	steps := []*Step{
		{Name: "plain", Kind: PhasePlain, N: 10, Done: 10, Seconds: 50, Latency: lat(2, 4, 5)},
		{Name: "baseline-claims", Kind: PhasePlain, N: 10, Done: 10, Seconds: 60}, // no latencies (an older report)
		{Name: "claims", Kind: PhaseClaims, N: 10, Done: 10, Seconds: 120, Latency: lat(20, 40, 50)},
		{Name: "baseline-attach-pinned", Kind: PhasePlain, N: 10, Done: 10, Seconds: 80, Latency: lat(4, 10, 20)},
		{Name: "attach", Kind: PhaseAttach, N: 10, Done: 10, Seconds: 200, Latency: lat(10, 15, 50)},
	}
	h := Headline(steps)
	if len(h) != 3 {
		t.Fatalf("headline: %+v", h)
	}
	if diff := cmp.Diff(&LatencyStats{Objects: 10, P50: one(2), P99: one(4), Max: one(5)}, h[0].Latency); diff != "" {
		t.Errorf("plain latency (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*Stat{one(1), one(1), one(1)}, []*Stat{h[0].P50VsBaseline, h[0].P99VsBaseline, h[0].MaxVsBaseline}); diff != "" {
		t.Errorf("plain is its own baseline (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&LatencyStats{Objects: 10, P50: one(20), P99: one(40), Max: one(50)}, h[1].Latency); diff != "" {
		t.Errorf("claims' create to Bound (-want +got):\n%s", diff)
	}
	if h[1].BaselineLatency != nil || h[1].P50VsBaseline != nil {
		t.Errorf("claims without a baseline latency: %+v", h[1])
	}
	a := h[2]
	if a.Baseline != AttachBaselinePinned {
		t.Errorf("attach's baseline %q, want pinned", a.Baseline)
	}
	if diff := cmp.Diff(&LatencyStats{Objects: 10, P50: one(4), P99: one(10), Max: one(20)}, a.BaselineLatency); diff != "" {
		t.Errorf("attach's baseline latency (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]*Stat{one(2.5), one(1.5), one(2.5)}, []*Stat{a.P50VsBaseline, a.P99VsBaseline, a.MaxVsBaseline}); diff != "" {
		t.Errorf("attach latency ratios (-want +got):\n%s", diff)
	}
}

// The report's text shows the latencies in the headline, a row per percentile (with the
// baseline's and the ratios), and in each step's row beside its time.
func TestWriteTextShowsLatencies(t *testing.T) {
	rep := &Report{Config: ReportConfig{N: 300, Rounds: 1}, Versions: versions("v0.16.1")}
	rep.Steps = []*Step{
		{Name: "plain", Kind: PhasePlain, N: 300, Done: 300, Seconds: 20, Settled: true, QuietAtStart: true,
			Latency: &Latency{Count: 300, P50Seconds: 0.85, P99Seconds: 3.2, MaxSeconds: 3.5}},
		{Name: "baseline-claims", Kind: PhasePlain, N: 300, Done: 300, Seconds: 20, Settled: true, QuietAtStart: true},
		{Name: "claims", Kind: PhaseClaims, N: 300, Done: 300, Seconds: 30, PerSecond: 10, Settled: true, QuietAtStart: true,
			Latency: &Latency{Count: 300, P50Seconds: 6, P99Seconds: 12, MaxSeconds: 13}},
		{Name: "baseline-attach-pinned", Kind: PhasePlain, N: 300, Done: 300, Seconds: 20, Settled: true, QuietAtStart: true},
		{Name: "attach", Kind: PhaseAttach, N: 300, Done: 300, Seconds: 40, PerSecond: 7.5, Settled: true, QuietAtStart: true,
			Latency: &Latency{Count: 300, P50Seconds: 5, P99Seconds: 24, MaxSeconds: 27}},
	}
	rep.Steps[3].Latency = &Latency{Count: 300, P50Seconds: 2, P99Seconds: 8, MaxSeconds: 9}
	rep.Headline = Headline(rep.Steps)
	var buf bytes.Buffer
	rep.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"| attach | its claim's address | 300 | p50 | 5.0 s | pinned IPs | 2.0 s | 2.50× |",
		"| attach | its claim's address | 300 | p99 | 24.0 s | pinned IPs | 8.0 s | 3.00× |",
		"| attach | its claim's address | 300 | max | 27.0 s | pinned IPs | 9.0 s | 3.00× |",
		"| plain | any address | 300 | p50 | 850 ms | itself | 850 ms | 1.00× |",
		"| claims | Bound | 300 | p99 | 12.0 s | any IP of the pool | - | - |", // a baseline without latencies
		"| attach | 0 | 40.0 s | 7.5 | 5.0 s / 24.0 s / 27.0 s |",
		"| claims | 0 | 30.0 s | 10.0 | 6.0 s / 12.0 s / 13.0 s |",
		"| baseline-claims | 0 | 20.0 s | 0.0 | - |", // a step without latencies shows none
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "median over") || strings.Contains(out, "–") {
		t.Errorf("a run of one round shows spreads:\n%s", out)
	}
}
