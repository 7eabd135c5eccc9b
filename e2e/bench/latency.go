package bench

import (
	"fmt"
	"slices"
	"time"
)

// Latency is how long a step's objects each took from the benchmark sending its create to the
// first watch event that showed it done: for a plain Service, any address; for an attach
// Service, exactly its claim's address; for a claim, Bound. A tenant cluster's cloud provider
// creates the host Service and then waits a fixed time (60 s on Cozystack) for its address, so
// the tail of the attach step's latencies is what decides whether a guest Service gets one.
type Latency struct {
	// Count is the number of objects measured: those done within the step.
	Count int `json:"count"`
	// P50Seconds and P99Seconds are nearest-rank percentiles; MaxSeconds the slowest object.
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
	MaxSeconds float64 `json:"maxSeconds"`
}

// objectName is the name of a step's j-th object.
func objectName(prefix string, j int) string { return fmt.Sprintf("%s%05d", prefix, j) }

// createToDone pairs each object's create (sent[j], zero when it was never sent) with the
// moment it was first seen done and returns the durations, in no particular order. An object
// seen done before its create was sent existed already (a leftover): it is left out, as is one
// never seen done.
func createToDone(prefix string, sent []time.Time, doneAt map[string]time.Time) []time.Duration {
	var out []time.Duration
	for j, at := range sent {
		done, ok := doneAt[objectName(prefix, j)]
		if at.IsZero() || !ok || done.Before(at) {
			continue
		}
		out = append(out, done.Sub(at))
	}
	return out
}

// latencyOf summarizes durations; nil when there are none.
func latencyOf(ds []time.Duration) *Latency {
	if len(ds) == 0 {
		return nil
	}
	secs := make([]float64, len(ds))
	for i, d := range ds {
		secs[i] = d.Seconds()
	}
	slices.Sort(secs)
	return &Latency{Count: len(secs), P50Seconds: percentile(secs, 50), P99Seconds: percentile(secs, 99), MaxSeconds: secs[len(secs)-1]}
}

// percentile is the nearest-rank p-th percentile of sorted values: the smallest value that
// at least p percent of them do not exceed. It is always one of the values measured, never an
// interpolation between two. The rank is computed in integers: in floating point p/100·n can
// land just above a whole number (7/100·100 is 7.000000000000001) and take the next value up.
func percentile(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ⌈p·n/100⌉
	return sorted[min(max(rank, 1), len(sorted))-1]
}
