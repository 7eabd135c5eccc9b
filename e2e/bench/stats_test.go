package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The median is the middle value, or the mean of the two middle ones; the input keeps its
// order.
func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		values []float64
		want   float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{10, 1, 1}, 1}, // one slow round does not move it
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5}, 5},
		{[]float64{9, 1, 8, 2, 7}, 7},
	} {
		in := append([]float64(nil), tt.values...)
		if got := median(in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.values, got, tt.want)
		}
		if !cmp.Equal(in, tt.values) {
			t.Errorf("median reordered its input: %v, was %v", in, tt.values)
		}
	}
}

// A Stat keeps each round's value in round order, with the median and the smallest and largest
// round (the spread).
func TestStatOf(t *testing.T) {
	if statOf(nil) != nil {
		t.Error("a figure of no rounds is not nil")
	}
	got := statOf([]float64{30, 10, 25, 12})
	want := &Stat{Median: 18.5, Min: 10, Max: 30, Rounds: []float64{30, 10, 25, 12}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got.N() != 4 || (*Stat)(nil).N() != 0 {
		t.Errorf("rounds: %d and %d, want 4 and 0", got.N(), (*Stat)(nil).N())
	}
}

// A figure of one round reads as before rounds; over two or more the spread follows in
// brackets; a missing one is "-".
func TestStatText(t *testing.T) {
	for _, tt := range []struct {
		s          *Stat
		text, durs string
	}{
		{nil, "-", "-"},
		{statOf([]float64{68.7}), "68.7 s", "68.7 s"},
		{statOf([]float64{72, 65.1, 68.7}), "68.7 s (65.1–72.0)", "68.7 s (65.1 s–72.0 s)"},
		{statOf([]float64{0.85, 1.2}), "1.0 s (0.8–1.2)", "1.0 s (850 ms–1.2 s)"},
	} {
		if got := tt.s.text("%.1f", " s"); got != tt.text {
			t.Errorf("text of %+v = %q, want %q", tt.s, got, tt.text)
		}
		if got := tt.s.durText(); got != tt.durs {
			t.Errorf("durText of %+v = %q, want %q", tt.s, got, tt.durs)
		}
	}
	if got := ratioText(statOf([]float64{0.5, 0.47, 0.53}), "rate"); got != "0.50× (0.47–0.53) rate" {
		t.Errorf("ratio text %q", got)
	}
}

// Latencies over rounds: each percentile is summarized over the rounds' own percentiles (not
// pooled), a round without latencies is skipped, and the objects of every round are counted.
func TestLatencyStatsOf(t *testing.T) {
	if latencyStatsOf(nil) != nil || latencyStatsOf([]*Latency{nil, nil}) != nil {
		t.Error("latencies of no round measured are not nil")
	}
	got := latencyStatsOf([]*Latency{
		{Count: 100, P50Seconds: 2, P99Seconds: 20, MaxSeconds: 25},
		nil,
		{Count: 100, P50Seconds: 1, P99Seconds: 10, MaxSeconds: 40},
		{Count: 99, P50Seconds: 3, P99Seconds: 15, MaxSeconds: 16},
	})
	want := &LatencyStats{Objects: 299,
		P50: &Stat{Median: 2, Min: 1, Max: 3, Rounds: []float64{2, 1, 3}},
		P99: &Stat{Median: 15, Min: 10, Max: 20, Rounds: []float64{20, 10, 15}},
		Max: &Stat{Median: 25, Min: 16, Max: 40, Rounds: []float64{25, 40, 16}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
