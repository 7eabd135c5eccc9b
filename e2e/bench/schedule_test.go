package bench

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// names lists a schedule as name#round, with "+" on the steps whose objects are kept.
func names(steps []plannedStep) []string {
	var out []string
	for _, s := range steps {
		n := fmt.Sprintf("%s#%d", s.name, s.round)
		if s.keep {
			n += "+"
		}
		out = append(out, n)
	}
	return out
}

// Baseline and phase alternate, round after round; only a phase's last round is kept, and
// every step's kind and pin follow its name.
func TestScheduleAlternatesBaselineAndPhase(t *testing.T) {
	for _, tt := range []struct {
		name      string
		phases    []string
		rounds    int
		baselines bool
		attach    string
		want      []string
	}{
		{"one round is the run as it always was", AllPhases, 1, true, AttachBaselinePool, []string{
			"plain#1+", "baseline-claims#1", "claims#1+", "baseline-attach#1", "attach#1+"}},
		{"three rounds, attach against pinned IPs", AllPhases, 3, true, AttachBaselinePinned, []string{
			"plain#1", "plain#2", "plain#3+",
			"baseline-claims#1", "claims#1", "baseline-claims#2", "claims#2", "baseline-claims#3", "claims#3+",
			"baseline-attach-pinned#1", "attach#1", "baseline-attach-pinned#2", "attach#2", "baseline-attach-pinned#3", "attach#3+"}},
		{"both attach baselines, pinned first", []string{PhaseClaims, PhaseAttach}, 2, true, AttachBaselineBoth, []string{
			"baseline-claims#1", "claims#1", "baseline-claims#2", "claims#2+",
			"baseline-attach-pinned#1", "baseline-attach#1", "attach#1", "baseline-attach-pinned#2", "baseline-attach#2", "attach#2+"}},
		{"plain after nothing has no baseline; claims first has one", []string{PhaseClaims}, 2, true, AttachBaselinePinned, []string{
			"baseline-claims#1", "claims#1", "baseline-claims#2", "claims#2+"}},
		{"no baselines (Fresh)", AllPhases, 1, false, AttachBaselinePinned, []string{"plain#1+", "claims#1+", "attach#1+"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := schedule(tt.phases, tt.rounds, tt.baselines, tt.attach)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			for _, s := range got {
				phase, pinned, isBase := baselineOf(s.name)
				switch {
				case isBase && (s.kind != PhasePlain || s.keep || pinned != s.pinned || phase == ""):
					t.Errorf("baseline %+v: want kind plain, deleted, pinned exactly when its name says", s)
				case !isBase && (s.kind != s.name || s.pinned):
					t.Errorf("phase step %+v: want its own kind, not pinned", s)
				}
			}
		})
	}
}

// A Fresh run alternates its control planes round by round: plain, claims, plain, claims.
func TestFreshRunsAlternate(t *testing.T) {
	groups := phaseGroups(AllPhases, true)
	got := freshRuns(groups, 2)
	want := []groupRun{
		{phases: []string{"plain"}, round: 1}, {phases: []string{"claims", "attach"}, round: 1},
		{phases: []string{"plain"}, round: 2}, {phases: []string{"claims", "attach"}, round: 2},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(groupRun{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// With one round the objects keep the names they always had (the final check and the smoke
// test's profile name rely on it); with more, each round's names are its own, and no step's
// prefix is the start of another's, so that the tracker never takes one step's object for
// another's.
func TestObjectPrefixesAndLabels(t *testing.T) {
	one := map[string]string{}
	for _, s := range schedule(AllPhases, 1, true, AttachBaselineBoth) {
		one[s.name] = objectPrefix(s, 1)
		if l := stepLabel(s.name, s.round, 1); l != s.name {
			t.Errorf("label of %s in a run of one round: %q", s.name, l)
		}
	}
	want := map[string]string{"plain": "plain-", "baseline-claims": "base-claims-", "claims": "claim-",
		"baseline-attach-pinned": "pin-attach-", "baseline-attach": "base-attach-", "attach": "attach-"}
	if diff := cmp.Diff(want, one); diff != "" {
		t.Errorf("prefixes of one round (-want +got):\n%s", diff)
	}
	steps := schedule(AllPhases, 12, true, AttachBaselineBoth)
	seen := map[string]string{}
	for _, s := range steps {
		p := objectPrefix(s, 12)
		for other, by := range seen {
			if strings.HasPrefix(p, other) || strings.HasPrefix(other, p) {
				t.Errorf("prefix %q of %s#%d overlaps %q of %s", p, s.name, s.round, other, by)
			}
		}
		seen[p] = fmt.Sprintf("%s#%d", s.name, s.round)
	}
	if got := objectPrefix(plannedStep{name: PhaseClaims, kind: PhaseClaims, round: 2}, 3); got != "claim-r2-" {
		t.Errorf("claims round 2: %q", got)
	}
	if got := stepLabel("baseline-attach-pinned", 3, 3); got != "baseline-attach-pinned-r3" {
		t.Errorf("label: %q", got)
	}
}

func TestBaselineNames(t *testing.T) {
	for _, tt := range []struct {
		phase  string
		pinned bool
		name   string
	}{
		{PhaseClaims, false, "baseline-claims"},
		{PhaseAttach, false, "baseline-attach"},
		{PhaseAttach, true, "baseline-attach-pinned"},
	} {
		if got := baselineName(tt.phase, tt.pinned); got != tt.name {
			t.Errorf("baselineName(%s, %v) = %q, want %q", tt.phase, tt.pinned, got, tt.name)
		}
		if phase, pinned, ok := baselineOf(tt.name); !ok || phase != tt.phase || pinned != tt.pinned {
			t.Errorf("baselineOf(%q) = %q, %v, %v", tt.name, phase, pinned, ok)
		}
	}
	if _, _, ok := baselineOf(PhaseAttach); ok {
		t.Error("a phase taken for a baseline")
	}
}

// The pinned baseline takes free IPs from the top of the pool down, skipping those in use.
func TestFreeIPs(t *testing.T) {
	pool := netip.MustParsePrefix("198.18.0.0/30")
	used := map[netip.Addr]bool{netip.MustParseAddr("198.18.0.2"): true, netip.MustParseAddr("10.0.0.1"): true}
	if got, want := freeIPs(pool, used, 2), []string{"198.18.0.3", "198.18.0.1"}; !cmp.Equal(got, want) {
		t.Errorf("freeIPs = %v, want %v", got, want)
	}
	if got, want := freeIPs(pool, used, 5), []string{"198.18.0.3", "198.18.0.1", "198.18.0.0"}; !cmp.Equal(got, want) {
		t.Errorf("more than the pool has: %v, want %v", got, want)
	}
	if got := lastAddr(netip.MustParsePrefix(PlainRange)); got != netip.MustParseAddr("198.18.127.255") {
		t.Errorf("last address of %s: %v", PlainRange, got)
	}
	if got := freeIPs(netip.MustParsePrefix(PlainRange), nil, 16000); len(got) != 16000 || got[15999] != "198.18.65.128" {
		t.Errorf("16,000 from the plain pool: %d, the last %v", len(got), got[len(got)-1])
	}
}

// A pinned baseline Service is done when it shows exactly the IP it pins.
func TestShowsPin(t *testing.T) {
	svc := func(pin string, ips ...string) *corev1.Service {
		s := pinnedService("pin-attach-00000", pin)
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return s
	}
	for _, tt := range []struct {
		svc  *corev1.Service
		want bool
	}{
		{svc("198.18.127.255", "198.18.127.255"), true},
		{svc("198.18.127.255"), false},
		{svc("198.18.127.255", "198.18.0.1"), false},
		{svc("198.18.127.255", "198.18.127.255", "198.18.0.1"), false},
		{&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, false},
	} {
		if got := showsPin(tt.svc); got != tt.want {
			t.Errorf("showsPin(%v, %v) = %v, want %v", tt.svc.Annotations, ingressIPs(tt.svc), got, tt.want)
		}
	}
	if s := pinnedService("x", "198.18.0.9"); len(s.Annotations) != 1 || s.Annotations[pinAnno] != "198.18.0.9" {
		t.Errorf("a pinned Service pins and asks for no pool, as the driver's pin: %v", s.Annotations)
	}
}

func TestConfigRoundsAndAttachBaseline(t *testing.T) {
	c := Config{N: 5}
	if err := c.validate(); err != nil || c.Rounds != 1 || c.AttachBaseline != AttachBaselinePinned {
		t.Errorf("defaults: %d rounds, attach baseline %q, %v; want 1, pinned", c.Rounds, c.AttachBaseline, err)
	}
	for _, tt := range []struct {
		c    Config
		want string
	}{
		{Config{N: 5, Rounds: 21}, "at most 20"},
		{Config{N: 5, AttachBaseline: "random"}, "unknown attach baseline"},
	} {
		if err := tt.c.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error saying %q", tt.c, err, tt.want)
		}
	}
}

// Over rounds, each phase round is paired with the baseline of its own round: a ratio is
// taken round by round and then summarized, a round whose baseline did not finish gives no
// ratio, and with both attach baselines attach has an entry for each, pinned first.
func TestHeadlineOverRounds(t *testing.T) {
	step := func(name string, round int, secs float64) *Step {
		kind := name
		if _, _, ok := baselineOf(name); ok {
			kind = PhasePlain
		}
		return &Step{Name: name, Kind: kind, Round: round, N: 10, Done: 10, Seconds: secs, QuietAtStart: true, Settled: true,
			Latency: &Latency{Count: 10, P50Seconds: secs / 10, P99Seconds: secs / 5, MaxSeconds: secs / 4}}
	}
	steps := []*Step{
		step("plain", 1, 10), step("plain", 2, 20), step("plain", 3, 30),
		step("baseline-claims", 1, 20), step("claims", 1, 40),
		step("baseline-claims", 2, 30), step("claims", 2, 30),
		step("baseline-claims", 3, 25), step("claims", 3, 100),
		step("baseline-attach-pinned", 1, 10), step("baseline-attach", 1, 20), step("attach", 1, 30),
		step("baseline-attach-pinned", 2, 20), step("baseline-attach", 2, 20), step("attach", 2, 30),
		step("baseline-attach-pinned", 3, 30), step("baseline-attach", 3, 20), step("attach", 3, 30),
	}
	steps[16].TimedOut, steps[16].Done = true, 9 // round 3's pool baseline did not finish
	h := Headline(steps)
	if len(h) != 4 {
		t.Fatalf("want plain, claims, attach against pinned and against the pool; got %+v", h)
	}
	claims := h[1]
	if diff := cmp.Diff(&Stat{Median: 40, Min: 30, Max: 100, Rounds: []float64{40, 30, 100}}, claims.Seconds); diff != "" {
		t.Errorf("claims seconds (-want +got):\n%s", diff)
	}
	// Rates round by round: 20/40, 30/30, 25/100; the median of those, not of the times.
	if diff := cmp.Diff(&Stat{Median: 0.5, Min: 0.25, Max: 1, Rounds: []float64{0.5, 1, 0.25}}, claims.VsBaseline); diff != "" {
		t.Errorf("claims rate ratio (-want +got):\n%s", diff)
	}
	// Against the plain phase of the same round: 10/40, 20/30, 30/100.
	if diff := cmp.Diff(&Stat{Median: 0.3, Min: 0.25, Max: 2.0 / 3, Rounds: []float64{0.25, 2.0 / 3, 0.3}}, claims.VsEmpty); diff != "" {
		t.Errorf("claims against the empty cluster (-want +got):\n%s", diff)
	}
	// p50 round by round: 4/2, 3/3, 10/2.5.
	if diff := cmp.Diff(&Stat{Median: 2, Min: 1, Max: 4, Rounds: []float64{2, 1, 4}}, claims.P50VsBaseline); diff != "" {
		t.Errorf("claims p50 ratio (-want +got):\n%s", diff)
	}
	pinned, pool := h[2], h[3]
	if pinned.Phase != PhaseAttach || pinned.Baseline != AttachBaselinePinned || pool.Phase != PhaseAttach || pool.Baseline != AttachBaselinePool {
		t.Fatalf("attach entries: %+v, %+v", pinned, pool)
	}
	if diff := cmp.Diff(&Stat{Median: 1.5, Min: 1, Max: 3, Rounds: []float64{3, 1.5, 1}}, pinned.VsBaseline); diff != "" {
		t.Errorf("attach against pinned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&Stat{Median: 1.5, Min: 1.5, Max: 1.5, Rounds: []float64{1.5, 1.5}}, pool.VsBaseline); diff != "" {
		t.Errorf("attach against the pool, round 3's baseline unfinished (-want +got):\n%s", diff)
	}
	if pool.Seconds.N() != 3 || pool.BaselineSeconds.N() != 2 || pool.BaselineLatency.P99.N() != 2 {
		t.Errorf("attach's own rounds all count (%d), its pool baseline's finished ones only (%d, latency %d)",
			pool.Seconds.N(), pool.BaselineSeconds.N(), pool.BaselineLatency.P99.N())
	}
	// p99 round by round: 6/2, 6/4, 6/6.
	if diff := cmp.Diff(&Stat{Median: 1.5, Min: 1, Max: 3, Rounds: []float64{3, 1.5, 1}}, pinned.P99VsBaseline); diff != "" {
		t.Errorf("attach p99 against pinned (-want +got):\n%s", diff)
	}

	rep := &Report{Config: ReportConfig{N: 10, Rounds: 3, AttachBaseline: AttachBaselineBoth}, Versions: versions("v0.16.1"), Steps: steps, Headline: h}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	for _, want := range []string{
		"Each phase ran 3 times",
		"| claims | 3 | 40.0 s (30.0–100.0) | any IP of the pool | 25.0 s (20.0–30.0) | 0.50× (0.25–1.00) rate | 20.0 s (10.0–30.0) | 0.30× (0.25–0.67) rate | rate ≥ 0.8 |",
		"| attach | 3 | 30.0 s (30.0–30.0) | pinned IPs | 20.0 s (10.0–30.0) | 1.50× (1.00–3.00) time |",
		"| attach | 3 | 30.0 s (30.0–30.0) | any IP of the pool | 20.0 s (20.0–20.0) | 1.50× (1.50–1.50) time |",
		"| attach | its claim's address | 30 | p99 | 6.0 s (6.0 s–6.0 s) | pinned IPs | 4.0 s (2.0 s–6.0 s) | 1.50× (1.00–3.00) |",
		"| claims | Bound | 30 | max | 10.0 s (7.5 s–25.0 s) | any IP of the pool | 6.2 s (5.0 s–7.5 s) | 2.00× (1.00–4.00) |",
		"| claims-r2 | 0 | 30.0 s |",
		"| baseline-attach-r3 | 0 | timed out (9/10) |",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
	for i, s := range steps {
		s.Series = []Point{{0, 0}, {s.Seconds, i + 1}}
	}
	if err := rep.WritePlot(t.TempDir() + "/plot.png"); err != nil {
		t.Fatal(err)
	}
}
