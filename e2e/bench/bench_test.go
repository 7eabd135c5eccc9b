package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

func auditLineJSON(user, verb, resource, sub string, code int, stamp string) string {
	return `{"kind":"Event","verb":"` + verb + `","requestReceivedTimestamp":"` + stamp + `","user":{"username":"` + user +
		`"},"objectRef":{"resource":"` + resource + `","subresource":"` + sub + `"},"responseStatus":{"code":` +
		strconv.Itoa(code) + `}}`
}

func TestParseWritesKeepsWritesAndSkipsAPartialFirstLine(t *testing.T) {
	const core = "system:serviceaccount:cozy-address-controller:address-controller"
	lines := []string{
		auditLineJSON(core, "patch", "ipaddressclaims", "status", 200, "2026-11-30T01:00:00.100Z"),
		auditLineJSON(core, "get", "ipaddressclaims", "", 200, "2026-11-30T01:00:00.200Z"),
		auditLineJSON(controlplane.MetalLBUser(controlplane.DefaultMetalLBNamespace), "update", "services", "status", 409, "2026-11-30T01:00:01.000Z"),
		`{"truncated`,
	}
	log := strings.Join(lines, "\n") + "\n"
	all, err := parseWrites(strings.NewReader(log), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := []Write{
		{Identity: IdentityCore, Verb: "patch", Resource: "ipaddressclaims/status", Code: 200, Stamp: mustTime("2026-11-30T01:00:00.100Z")},
		{Identity: IdentityMetalLB, Verb: "update", Resource: "services/status", Code: 409, Stamp: mustTime("2026-11-30T01:00:01.000Z")},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("whole log (-want +got):\n%s", diff)
	}
	// An offset in the middle of the first line starts at the next one.
	mid, err := parseWrites(strings.NewReader(log), 10, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[1:], mid); diff != "" {
		t.Errorf("from a mid-line offset (-want +got):\n%s", diff)
	}
	// An offset at a line start keeps that line; an end offset stops there.
	second := int64(len(lines[0]) + 1)
	third := second + int64(len(lines[1])+1)
	window, err := parseWrites(strings.NewReader(log), second, third)
	if err != nil {
		t.Fatal(err)
	}
	if len(window) != 0 {
		t.Errorf("window holding only a get: got %v", window)
	}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestMetalLBStatusWrites(t *testing.T) {
	at := func(sec int) time.Time { return time.Date(2026, 11, 30, 1, 0, sec, 0, time.UTC) }
	var writes []Write
	add := func(sec, n int, target string, code int) {
		for range n {
			writes = append(writes, Write{Identity: IdentityMetalLB, Verb: "update", Resource: "services/status", Code: code, Target: target, Stamp: at(sec)})
		}
	}
	add(1, 20, "bench/attach-", 200)
	add(2, 20, "bench/plain-", 200)
	add(3, 5, "cozy-metallb-iad", 409)
	add(5, 20, "bench/plain-", 200) // second 4 has none
	add(9, 7, "bench/attach-", 200) // after the timed part
	writes = append(writes, Write{Identity: IdentityDriver, Resource: "services/status", Target: "bench/attach-", Stamp: at(2)})
	got := MetalLBStatusWrites(writes, at(0), at(6))
	want := StatusWrites{ByTarget: map[string]int{"bench/attach-": 27, "bench/plain-": 40, "cozy-metallb-iad": 5},
		Conflicts: 5, MedianPerSecond: 20}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if targetGroup(Namespace, "plain-00042") != "bench/plain-" || targetGroup("cozy-metallb-iad", "hold-ip-1") != "cozy-metallb-iad" {
		t.Error("target groups")
	}
}

func TestSummarizeWrites(t *testing.T) {
	at := func(sec, ms int) time.Time { return time.Date(2026, 11, 30, 1, 0, sec, ms*1e6, time.UTC) }
	writes := []Write{
		{Identity: IdentityCore, Verb: "patch", Resource: "ipaddressclaims/status", Code: 200, Stamp: at(0, 1)},
		{Identity: IdentityCore, Verb: "patch", Resource: "ipaddressclaims/status", Code: 200, Stamp: at(0, 900)},
		{Identity: IdentityCore, Verb: "update", Resource: "leases", Code: 200, Stamp: at(1, 0)},
		{Identity: IdentityDriver, Verb: "create", Resource: "events", Code: 201, Stamp: at(1, 0)},
		{Identity: IdentityDriver, Verb: "patch", Resource: "services", Code: 409, Stamp: at(2, 0)},
		{Identity: IdentityMetalLB, Verb: "update", Resource: "services/status", Code: 200, Stamp: at(2, 0)},
		{Identity: IdentityBench, Verb: "create", Resource: "services", Code: 201, Stamp: at(0, 0)},
	}
	s := SummarizeWrites(writes, 4*time.Second, at(0, 500), at(1, 500))
	if s.Project != 4 || s.Leases != 1 {
		t.Errorf("project writes %d (want 4), leases %d (want 1)", s.Project, s.Leases)
	}
	core := s.ByIdentity[IdentityCore]
	if core.Total != 3 || core.Peak != 2 || core.PerSecond != 0.75 || core.InPhase != 2 || core.InPhasePerSecond != 2 {
		t.Errorf("core rate %+v, want total 3, peak 2 in one second, 0.75/s, 2 in the timed second", core)
	}
	wantFirst := WriteRow{Identity: IdentityCore, Verb: "patch", Resource: "ipaddressclaims/status", Code: 200, Count: 2}
	if s.Rows[0] != wantFirst {
		t.Errorf("first row %+v, want %+v (by identity, then the most frequent)", s.Rows[0], wantFirst)
	}
	var conflicts int
	for _, r := range s.Rows {
		if r.Identity == IdentityDriver && r.Code == 409 {
			conflicts += r.Count
		}
	}
	if conflicts != 1 {
		t.Errorf("driver conflicts: %d, want 1", conflicts)
	}
}

const exposition = `# HELP controller_runtime_reconcile_total Total number of reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="ipaddressclaim",result="success"} 120
controller_runtime_reconcile_total{controller="ipaddressclaim",result="error"} 3
controller_runtime_reconcile_total{controller="ipaddress",result="success"} 40
controller_runtime_max_concurrent_reconciles{controller="ipaddressclaim"} 4
workqueue_depth{controller="ipaddressclaim",name="ipaddressclaim"} 2
workqueue_adds_total{controller="ipaddressclaim",name="ipaddressclaim"} 130
workqueue_queue_duration_seconds_sum{controller="ipaddressclaim",name="ipaddressclaim"} 13
workqueue_queue_duration_seconds_count{controller="ipaddressclaim",name="ipaddressclaim"} 130
workqueue_work_duration_seconds_sum{controller="ipaddressclaim",name="ipaddressclaim"} 2.6
workqueue_work_duration_seconds_count{controller="ipaddressclaim",name="ipaddressclaim"} 130
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 90
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 5
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 105
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="GET"} 4
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="GET"} 105
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="PATCH"} 1
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="PATCH"} 95
weird{a="x\"y,z}",b="2"} 7 1700000000
go_goroutines 55
broken{a="x" 1
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("controller_runtime_reconcile_total", map[string]string{"controller": "ipaddressclaim"}); got != 123 {
		t.Errorf("claim reconciles %v, want 123", got)
	}
	if got := m.By("rest_client_requests_total", "method"); got["PATCH"] != 95 {
		t.Errorf("PATCH requests %v, want 95", got)
	}
	rs := RESTStatsFrom(m, 10*time.Second)
	if rs.Total != 200 || rs.PerSecond != 20 || rs.ThrottledSeconds != 5 || rs.MeanThrottle != 0.025 {
		t.Errorf("REST stats %+v, want 200 requests, 20/s, 5 s throttled, 25 ms each", rs)
	}
	if got := m.Sum("weird", map[string]string{"a": `x"y,z}`, "b": "2"}); got != 7 {
		t.Errorf("escaped label value: %v, want 7", got)
	}
	if got := m.Sum("go_goroutines", nil); got != 55 {
		t.Errorf("unlabelled series %v, want 55", got)
	}
	if got := m.Sum("broken", nil); got != 0 {
		t.Errorf("malformed line parsed: %v", got)
	}
	filtered, _ := ParseMetrics(strings.NewReader(exposition), "workqueue_")
	for _, s := range filtered {
		if !strings.HasPrefix(s.Name, "workqueue_") {
			t.Errorf("prefix filter kept %s", s.Name)
		}
	}
	if queueDepth(m) != 2 || reconcileCount(m) != 163 {
		t.Errorf("depth %v reconciles %v, want 2 and 163", queueDepth(m), reconcileCount(m))
	}
}

func TestControllerStatsFromDelta(t *testing.T) {
	before, _ := ParseMetrics(strings.NewReader(`controller_runtime_reconcile_total{controller="ipaddressclaim",result="success"} 20
workqueue_adds_total{controller="ipaddressclaim",name="ipaddressclaim"} 30
workqueue_queue_duration_seconds_sum{controller="ipaddressclaim",name="ipaddressclaim"} 3
workqueue_queue_duration_seconds_count{controller="ipaddressclaim",name="ipaddressclaim"} 30
workqueue_work_duration_seconds_sum{controller="ipaddressclaim",name="ipaddressclaim"} 0.6
workqueue_work_duration_seconds_count{controller="ipaddressclaim",name="ipaddressclaim"} 30
`))
	after, _ := ParseMetrics(strings.NewReader(exposition))
	stats := ControllerStatsFrom(Delta(before, after), after, 50)
	c := stats["ipaddressclaim"]
	want := ControllerStats{
		Reconciles: map[string]float64{"success": 100, "error": 3}, Total: 103, PerObject: 103.0 / 50,
		Adds: 100, MeanWaitSecs: 0.1, MeanWorkSecs: 0.02, MaxConcurrent: 4,
	}
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("ipaddressclaim (-want +got):\n%s", diff)
	}
	if stats["ipaddress"].Total != 40 {
		t.Errorf("a series missing before counts from zero: got %v", stats["ipaddress"].Total)
	}
}

func TestParseMetalLBLog(t *testing.T) {
	log := `{"caller":"service_controller.go:64","controller":"ServiceReconciler","level":"info","start reconcile":"bench/plain-00001","ts":"2026-11-30T01:00:00Z"}
{"caller":"main.go:134","event":"serviceUpdated","level":"info","msg":"updated service object","ts":"2026-11-30T01:00:00Z"}
{"caller":"service_controller.go:65","controller":"ServiceReconciler","end reconcile":"bench/plain-00001","level":"info","ts":"2026-11-30T01:00:00Z"}
{"caller":"pool_status_controller.go:53","controller":"PoolStatusReconciler","level":"info","start reconcile":"cozy-metallb/bench-plain","ts":"2026-11-30T01:00:00Z"}
{"caller":"pool_status_controller.go:53","controller":"PoolStatusReconciler","level":"info","start reconcile":"cozy-metallb/bench-reserved","ts":"2026-11-30T01:00:00Z"}
{"caller":"service_controller_reload.go:63","controller":"ServiceReconciler - reprocessAll","level":"info","start reconcile":"metallbreload/reload","ts":"2026-11-30T01:00:01Z"}
{"caller":"main.go:139","event":"serviceUpdated","level":"info","msg":"service is not updated","ts":"2026-11-30T01:00:01Z"}
{"caller":"main.go:139","event":"serviceUpdated","level":"info","msg":"service is not updated","ts":"2026-11-30T01:00:01Z"}
{"caller":"service.go:60","event":"serviceDeleted","level":"info","msg":"service deleted","ts":"2026-11-30T01:00:01Z"}
{"caller":"config_controller.go:58","controller":"ConfigReconciler","level":"info","start reconcile":"/ConfigReconcilerKey","ts":"2026-11-30T01:00:01Z"}
I1130 01:00:01.000000 klog line
{"half a line`
	w, err := parseMetalLBLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := MetalLBWork{
		Reconciles:   map[string]int{"service": 1, "pool-status": 2, "reprocess-all": 1, "config": 1},
		Total:        5,
		Events:       map[string]int{"serviceUpdated": 3, "serviceDeleted": 1},
		StatusWrites: 1,
		Unchanged:    2,
	}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		services []ServiceIPs
		want     Expectations
		problems []string
	}{
		{
			name: "all correct",
			services: []ServiceIPs{
				{Key: "bench/attach-00000", IPs: []string{"198.19.0.0"}},
				{Key: "bench/plain-00000", IPs: []string{"198.18.0.0"}},
				{Key: "cozy-metallb-iad/placeholder", IPs: []string{"198.19.0.1"}},
				{Key: "default/kubernetes"},
			},
			want: Expectations{
				Attached: map[string][]string{"bench/attach-00000": {"198.19.0.0"}},
				Plain:    []string{"bench/plain-00000"},
				Claims:   map[string][]string{"bench/claim-00000": {"198.19.0.0"}, "bench/claim-00001": {"198.19.0.1"}},
			},
		},
		{
			name: "one IP on two Services",
			services: []ServiceIPs{
				{Key: "bench/attach-00000", IPs: []string{"198.19.0.0"}},
				{Key: "cozy-metallb-iad/placeholder", IPs: []string{"198.19.0.0"}},
			},
			want:     Expectations{Attached: map[string][]string{"bench/attach-00000": {"198.19.0.0"}}},
			problems: []string{"IP 198.19.0.0 is on 2 Services: bench/attach-00000, cozy-metallb-iad/placeholder"},
		},
		{
			name: "an attached Service and its hold share the IP under the claim's key",
			services: []ServiceIPs{
				{Key: "bench/attach-00000", IPs: []string{"198.19.0.0"}, SharingKey: driverKeyPrefix + "uid"},
				{Key: "cozy-metallb-iad/hold-ip-198-19-0-0", IPs: []string{"198.19.0.0"}, SharingKey: driverKeyPrefix + "uid"},
			},
			want: Expectations{Attached: map[string][]string{"bench/attach-00000": {"198.19.0.0"}}},
		},
		{
			name: "two Services under another key, or under two keys of the driver",
			services: []ServiceIPs{
				{Key: "bench/a", IPs: []string{"198.19.0.1"}, SharingKey: "mine"},
				{Key: "bench/b", IPs: []string{"198.19.0.1"}, SharingKey: "mine"},
				{Key: "bench/c", IPs: []string{"198.19.0.2"}, SharingKey: driverKeyPrefix + "x"},
				{Key: "bench/d", IPs: []string{"198.19.0.2"}, SharingKey: driverKeyPrefix + "y"},
			},
			problems: []string{"IP 198.19.0.1 is on 2 Services: bench/a, bench/b", "IP 198.19.0.2 is on 2 Services: bench/c, bench/d"},
		},
		{
			name: "attached Service shows another address, or none, or more",
			services: []ServiceIPs{
				{Key: "bench/a", IPs: []string{"198.18.0.9"}},
				{Key: "bench/b"},
				{Key: "bench/c", IPs: []string{"198.19.0.3", "198.19.0.9"}},
			},
			want: Expectations{Attached: map[string][]string{
				"bench/a": {"198.19.0.1"}, "bench/b": {"198.19.0.2"}, "bench/c": {"198.19.0.3"}, "bench/d": {"198.19.0.4"}, "bench/e": nil}},
			problems: []string{
				"Service bench/a shows [198.18.0.9], its claim holds [198.19.0.1]",
				"Service bench/b shows [], its claim holds [198.19.0.2]",
				"Service bench/c shows [198.19.0.3 198.19.0.9], its claim holds [198.19.0.3]",
				"Service bench/d is missing",
				"Service bench/e is missing",
			},
		},
		{
			name:     "plain Service without an IP, and an address on two claims",
			services: []ServiceIPs{{Key: "bench/plain-00000"}},
			want: Expectations{Plain: []string{"bench/plain-00000"},
				Claims: map[string][]string{"bench/x": {"198.19.0.5"}, "bench/y": {"198.19.0.5"}}},
			problems: []string{
				"IP 198.19.0.5 is bound to 2 claims: bench/x, bench/y",
				"Service bench/plain-00000 shows 0 IPs [], want 1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.problems, Check(tt.services, tt.want)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProcParsing(t *testing.T) {
	stat := []byte("4242 (kube apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 566 0 0 20 0 12 0 100 0 0")
	cpu, err := parseStatCPU(stat)
	if err != nil || cpu != 18.0 {
		t.Errorf("cpu %v, %v; want 18.0 s (1234+566 ticks)", cpu, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("malformed stat accepted")
	}
	rss, peak := parseStatusRSS([]byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"))
	if rss != 1<<20 || peak != 2<<20 {
		t.Errorf("rss %d peak %d", rss, peak)
	}
}

func TestHeadline(t *testing.T) {
	step := func(name string, secs float64) *Step {
		kind := name
		if strings.HasPrefix(name, "baseline-") {
			kind = PhasePlain
		}
		return &Step{Name: name, Kind: kind, N: 10, Done: 10, Seconds: secs}
	}
	steps := []*Step{step("plain", 50), step("baseline-claims", 60), step("claims", 120), step("baseline-attach", 80), step("attach", 200)}
	got := Headline(steps)
	want := []Ratio{
		{Phase: "plain", Measure: "time", Seconds: one(50), BaselineSeconds: one(50), VsBaseline: one(1), Target: "1.00 (the baseline)"},
		{Phase: "claims", Measure: "rate", Baseline: "pool", Seconds: one(120), BaselineSeconds: one(60), VsBaseline: one(0.5), EmptySeconds: one(50), VsEmpty: one(50.0 / 120), Target: "≥ 0.8"},
		{Phase: "attach", Measure: "time", Baseline: "pool", Seconds: one(200), BaselineSeconds: one(80), VsBaseline: one(2.5), EmptySeconds: one(50), VsEmpty: one(4), Target: "≤ 1.25"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A timed-out phase gets no ratio.
	steps[4].TimedOut, steps[4].Done = true, 7
	if got := Headline(steps); len(got) != 2 {
		t.Errorf("timed-out attach still in the headline: %+v", got)
	}

	// A Fresh run: no baseline steps. Claims began at the plain phase's population, so the
	// plain phase is its baseline; attach did not, so it has none.
	fresh := []*Step{step("plain", 50), step("claims", 100), step("attach", 200)}
	fresh[0].PopulationAtStart, fresh[1].PopulationAtStart, fresh[2].PopulationAtStart = 1, 1, 11
	want = []Ratio{
		{Phase: "plain", Measure: "time", Seconds: one(50), BaselineSeconds: one(50), VsBaseline: one(1), Target: "1.00 (the baseline)"},
		{Phase: "claims", Measure: "rate", Baseline: "pool", Seconds: one(100), BaselineSeconds: one(50), VsBaseline: one(0.5), EmptySeconds: one(50), VsEmpty: one(0.5), Target: "≥ 0.8"},
		{Phase: "attach", Measure: "time", Seconds: one(200), EmptySeconds: one(50), VsEmpty: one(4), Target: "≤ 1.25"},
	}
	if diff := cmp.Diff(want, Headline(fresh)); diff != "" {
		t.Errorf("fresh run (-want +got):\n%s", diff)
	}
}

// one is a figure of a single round.
func one(v float64) *Stat { return &Stat{Median: v, Min: v, Max: v, Rounds: []float64{v}} }

func TestPhaseGroups(t *testing.T) {
	for _, tt := range []struct {
		phases []string
		fresh  bool
		want   [][]string
	}{
		{phases: AllPhases, want: [][]string{AllPhases}},
		{phases: AllPhases, fresh: true, want: [][]string{{"plain"}, {"claims", "attach"}}},
		{phases: []string{"plain", "claims"}, fresh: true, want: [][]string{{"plain"}, {"claims"}}},
		{phases: []string{"claims"}, fresh: true, want: [][]string{{"claims"}}},
		{phases: []string{"plain"}, fresh: true, want: [][]string{{"plain"}}},
	} {
		if got := phaseGroups(tt.phases, tt.fresh); !cmp.Equal(got, tt.want) {
			t.Errorf("phaseGroups(%v, %v) = %v, want %v", tt.phases, tt.fresh, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		phases  []string
		want    []string
		wantErr string
	}{
		{phases: nil, want: AllPhases},
		{phases: []string{"attach", "claims"}, want: []string{"claims", "attach"}},
		{phases: []string{"attach"}, wantErr: "needs the claims phase"},
		{phases: []string{"plain", "bogus"}, wantErr: "unknown phase"},
	} {
		c := Config{N: 5, Phases: tt.phases}
		err := c.validate()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("phases %v: error %v, want %q", tt.phases, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !cmp.Equal(c.Phases, tt.want) {
			t.Errorf("phases %v: got %v, %v; want %v", tt.phases, c.Phases, err, tt.want)
		}
	}
}

// The quiet waits around a step take the step's limit unless told otherwise.
func TestConfigSettleTimeout(t *testing.T) {
	c := Config{N: 10}
	if err := c.validate(); err != nil || c.SettleTimeout != c.PhaseTimeout || c.PhaseTimeout != 2*time.Minute+5*time.Second {
		t.Fatalf("defaults: settle %s, phase %s, %v", c.SettleTimeout, c.PhaseTimeout, err)
	}
	c = Config{N: 10, PhaseTimeout: time.Hour, SettleTimeout: time.Minute}
	if err := c.validate(); err != nil || c.SettleTimeout != time.Minute {
		t.Fatalf("settle %s, %v; want the one asked for", c.SettleTimeout, err)
	}
}

func TestWriteTextAndPlot(t *testing.T) {
	rep := &Report{Config: ReportConfig{N: 2}, Versions: versions("v0.16.1")}
	rep.Steps = []*Step{{Name: "plain", Kind: PhasePlain, N: 2, Done: 2, Seconds: 1.5, Settled: true,
		Series: []Point{{0, 0}, {1, 1}, {1.5, 2}}},
		{Name: "baseline-claims", Kind: PhasePlain, N: 2, Done: 2, Seconds: 1, Series: []Point{{0, 0}, {1, 2}}}}
	rep.Headline = Headline(rep.Steps)
	var buf bytes.Buffer
	rep.WriteText(&buf)
	if !strings.Contains(buf.String(), "| plain | 1 | 1.5 s | itself |") {
		t.Errorf("headline row missing:\n%s", buf.String())
	}
	path := t.TempDir() + "/plot.png"
	if err := rep.WritePlot(path); err != nil {
		t.Fatal(err)
	}
}

func TestTrackerRecordsEachObjectOnceAndOnlyItsOwn(t *testing.T) {
	var tr tracker
	svc := func(ns, name string, ips ...string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return s
	}
	tr.observe(svc(Namespace, "plain-00000", "198.18.0.1")) // no step running: ignored
	st := tr.begin("plain-", false, 2, hasIngress)
	tr.observe(svc(Namespace, "plain-00000"))                                                                    // not done yet
	tr.observe(svc(Namespace, "base-claims-00000", "198.18.0.2"))                                                // another step's
	tr.observe(svc("elsewhere", "plain-00001", "198.18.0.3"))                                                    // another namespace
	tr.observe(&ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "plain-00001"}}) // another kind
	if st.count() != 0 {
		t.Fatalf("counted %d objects that are not done or not the step's", st.count())
	}
	tr.observe(svc(Namespace, "plain-00000", "198.18.0.1"))
	afterFirst := time.Now()
	tr.observe(svc(Namespace, "plain-00000", "198.18.0.1")) // again: counted once, first time kept
	select {
	case <-st.allDone:
		t.Fatal("all done after one of two")
	default:
	}
	tr.observe(svc(Namespace, "plain-00001", "198.18.0.4"))
	select {
	case <-st.allDone:
	default:
		t.Fatal("not all done after both")
	}
	doneAt := tr.end()
	if len(doneAt) != 2 || doneAt["plain-00000"].After(afterFirst) {
		t.Errorf("completion times %v, want two, plain-00000's from the first event showing an address (before %v)", doneAt, afterFirst)
	}
	if times := sortedTimes(doneAt); len(times) != 2 || times[1].Before(times[0]) {
		t.Errorf("sorted completion times %v, want two, earliest first", times)
	}
	tr.observe(svc(Namespace, "plain-00002", "198.18.0.5")) // after the end: ignored, no panic
}

// Offsets past the end of the audit log mean the apiserver rotated it under the run: a clear
// error, not a bare EOF.
func TestReadWritesSaysTheAuditLogWasRotated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line := auditLineJSON("system:serviceaccount:cozy-metallb-iad:metallb-iad", "create", "services", "", 201, "2026-11-30T10:00:00.000000Z") + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if w, err := ReadWrites(path, 0, int64(len(line))); err != nil || len(w) != 1 {
		t.Fatalf("reading the whole file: %d writes, %v", len(w), err)
	}
	_, err := ReadWrites(path, 0, int64(len(line))+1000)
	if err == nil || !strings.Contains(err.Error(), "rotated") {
		t.Fatalf("reading past the end: %v, want an error saying the log was rotated", err)
	}
}
