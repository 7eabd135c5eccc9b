package bench

import (
	"fmt"
	"slices"
)

// Stat is a figure measured once per round: its median over the rounds, the smallest and the
// largest round (the spread), and each round's value in the order the rounds ran. With one
// round all three are that round's value.
type Stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Rounds []float64 `json:"rounds"`
}

// statOf summarizes one value per round, in round order; nil when there are none.
func statOf(values []float64) *Stat {
	if len(values) == 0 {
		return nil
	}
	return &Stat{Median: median(values), Min: slices.Min(values), Max: slices.Max(values), Rounds: slices.Clone(values)}
}

// median is the middle value, or the mean of the two middle values of an even number of them;
// zero of none. values is not reordered.
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// N is the number of rounds the figure has (zero of a nil Stat).
func (s *Stat) N() int {
	if s == nil {
		return 0
	}
	return len(s.Rounds)
}

// text formats the median with format and unit and, over two rounds or more, the spread in
// brackets: "68.7 s (65.1–72.0)"; "-" for a nil Stat.
func (s *Stat) text(format, unit string) string {
	if s == nil {
		return "-"
	}
	med := fmt.Sprintf(format, s.Median) + unit
	if len(s.Rounds) < 2 {
		return med
	}
	return fmt.Sprintf("%s (%s–%s)", med, fmt.Sprintf(format, s.Min), fmt.Sprintf(format, s.Max))
}

// durText formats seconds the way dur does, with the spread over two rounds or more.
func (s *Stat) durText() string {
	if s == nil {
		return "-"
	}
	if len(s.Rounds) < 2 {
		return dur(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", dur(s.Median), dur(s.Min), dur(s.Max))
}

// LatencyStats are a phase's per-object latencies over its rounds: each round's percentile,
// summarized over the rounds (the median of the rounds' p99, with the smallest and largest).
type LatencyStats struct {
	// Objects is the number of objects measured, all rounds together.
	Objects int   `json:"objects"`
	P50     *Stat `json:"p50Seconds"`
	P99     *Stat `json:"p99Seconds"`
	Max     *Stat `json:"maxSeconds"`
}

// latencyStatsOf summarizes the latencies of rounds, in round order, skipping a round without
// any; nil when no round has them.
func latencyStatsOf(rounds []*Latency) *LatencyStats {
	var p50, p99, mx []float64
	objects := 0
	for _, l := range rounds {
		if l == nil {
			continue
		}
		objects += l.Count
		p50, p99, mx = append(p50, l.P50Seconds), append(p99, l.P99Seconds), append(mx, l.MaxSeconds)
	}
	if objects == 0 && len(p50) == 0 {
		return nil
	}
	return &LatencyStats{Objects: objects, P50: statOf(p50), P99: statOf(p99), Max: statOf(mx)}
}
