package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sample is one series of a Prometheus text exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is a scrape: the samples of the families the benchmark reads.
type Metrics []Sample

// ParseMetrics reads the Prometheus text format, keeping only series whose name has one of
// the prefixes (all when none). Comments, blank lines and malformed lines are skipped.
func ParseMetrics(r io.Reader, prefixes ...string) (Metrics, error) {
	var out Metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parseSample(line)
		if !ok || !hasAnyPrefix(s.Name, prefixes) {
			continue
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func hasAnyPrefix(name string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// parseSample reads `name{a="x",b="y"} value [timestamp]`.
func parseSample(line string) (Sample, bool) {
	s := Sample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, false
	} else {
		s.Name, rest = rest[:i], rest[i:]
	}
	if strings.HasPrefix(rest, "{") {
		end := -1
		inQuote := false
		for i := 1; i < len(rest); i++ {
			switch c := rest[i]; {
			case c == '\\' && inQuote:
				i++
			case c == '"':
				inQuote = !inQuote
			case c == '}' && !inQuote:
				end = i
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return s, false
		}
		if !parseLabels(rest[1:end], s.Labels) {
			return s, false
		}
		rest = rest[end+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	return s, true
}

func parseLabels(body string, into map[string]string) bool {
	for body != "" {
		eq := strings.IndexByte(body, '=')
		if eq < 0 || eq+1 >= len(body) || body[eq+1] != '"' {
			return false
		}
		name := strings.TrimSpace(body[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(body) && body[i] != '"'; i++ {
			if body[i] == '\\' && i+1 < len(body) {
				i++
				switch body[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(body[i])
				}
				continue
			}
			val.WriteByte(body[i])
		}
		if i >= len(body) {
			return false
		}
		into[name] = val.String()
		body = strings.TrimLeft(body[i+1:], ", ")
	}
	return true
}

// Sum adds the values of the series named name whose labels include match.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, s := range m {
		if s.Name == name && labelsMatch(s.Labels, match) {
			total += s.Value
		}
	}
	return total
}

// By sums the series named name by the value of one label.
func (m Metrics) By(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		if s.Name == name {
			out[s.Labels[label]] += s.Value
		}
	}
	return out
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Delta returns after minus before, series by series (a series missing before counts from 0).
func Delta(before, after Metrics) Metrics {
	key := func(s Sample) string {
		names := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		b.WriteString(s.Name)
		for _, k := range names {
			b.WriteString("|" + k + "=" + s.Labels[k])
		}
		return b.String()
	}
	prev := map[string]float64{}
	for _, s := range before {
		prev[key(s)] = s.Value
	}
	out := make(Metrics, 0, len(after))
	for _, s := range after {
		d := s
		d.Value -= prev[key(s)]
		out = append(out, d)
	}
	return out
}

// metricPrefixes are the families scraped from the project's controllers.
var metricPrefixes = []string{"controller_runtime_", "workqueue_", "rest_client_requests_total", "rest_client_rate_limiter_duration_seconds"}

// Scrape fetches and parses a metrics endpoint.
func Scrape(ctx context.Context, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body, metricPrefixes...)
}

// ControllerStats is what one controller (a controller-runtime controller inside one of the
// project's processes) did during a step, from the difference of two scrapes.
type ControllerStats struct {
	// Reconciles by result (success, error, requeue, requeue_after).
	Reconciles map[string]float64 `json:"reconciles"`
	Total      float64            `json:"total"`
	// PerObject is Total over the step's object count.
	PerObject float64 `json:"perObject"`
	// Adds to the workqueue, retries (rate-limited re-adds), and the mean time an item waited
	// in the queue before a worker took it and the mean time a worker spent on it. A wait much
	// longer than the work means too few workers; long work means each reconcile waits (on the
	// client's rate limiter or the apiserver).
	Adds          float64 `json:"queueAdds"`
	Retries       float64 `json:"queueRetries"`
	MeanWaitSecs  float64 `json:"meanQueueWaitSeconds"`
	MeanWorkSecs  float64 `json:"meanWorkSeconds"`
	MaxConcurrent float64 `json:"maxConcurrentReconciles"`
}

// ControllerStatsFrom reads per-controller figures out of a scrape delta; after is the later
// scrape itself (for gauges).
func ControllerStatsFrom(delta, after Metrics, objects int) map[string]ControllerStats {
	out := map[string]ControllerStats{}
	get := func(name string) ControllerStats {
		s, ok := out[name]
		if !ok {
			s = ControllerStats{Reconciles: map[string]float64{}}
		}
		return s
	}
	for _, s := range delta {
		switch s.Name {
		case "controller_runtime_reconcile_total":
			c := get(s.Labels["controller"])
			c.Reconciles[s.Labels["result"]] += s.Value
			c.Total += s.Value
			out[s.Labels["controller"]] = c
		case "workqueue_adds_total":
			c := get(s.Labels["name"])
			c.Adds += s.Value
			out[s.Labels["name"]] = c
		case "workqueue_retries_total":
			c := get(s.Labels["name"])
			c.Retries += s.Value
			out[s.Labels["name"]] = c
		}
	}
	for name, c := range out {
		sel := map[string]string{"name": name}
		if n := delta.Sum("workqueue_queue_duration_seconds_count", sel); n > 0 {
			c.MeanWaitSecs = delta.Sum("workqueue_queue_duration_seconds_sum", sel) / n
		}
		if n := delta.Sum("workqueue_work_duration_seconds_count", sel); n > 0 {
			c.MeanWorkSecs = delta.Sum("workqueue_work_duration_seconds_sum", sel) / n
		}
		c.MaxConcurrent = after.Sum("controller_runtime_max_concurrent_reconciles", map[string]string{"controller": name})
		if objects > 0 {
			c.PerObject = c.Total / float64(objects)
		}
		out[name] = c
	}
	return out
}

// queueDepth is the number of items waiting in every workqueue of a scrape.
func queueDepth(m Metrics) float64 { return m.Sum("workqueue_depth", nil) }

// reconcileCount is the number of reconciles a scrape has seen.
func reconcileCount(m Metrics) float64 { return m.Sum("controller_runtime_reconcile_total", nil) }

// RESTStatsFrom reads a process's requests to the apiserver and its client-side throttling out
// of a scrape delta taken over window.
func RESTStatsFrom(delta Metrics, window time.Duration) RESTStats {
	rs := RESTStats{ByMethod: delta.By("rest_client_requests_total", "method")}
	for _, v := range rs.ByMethod {
		rs.Total += v
	}
	if window > 0 {
		rs.PerSecond = rs.Total / window.Seconds()
	}
	rs.ThrottledSeconds = delta.Sum("rest_client_rate_limiter_duration_seconds_sum", nil)
	if n := delta.Sum("rest_client_rate_limiter_duration_seconds_count", nil); n > 0 {
		rs.MeanThrottle = rs.ThrottledSeconds / n
	}
	return rs
}
