package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is the result of a run, written as JSON by -out.
type Report struct {
	Date     time.Time         `json:"date"`
	Commit   string            `json:"commit,omitempty"`
	Machine  Machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Config   ReportConfig      `json:"config"`
	StateDir string            `json:"stateDir,omitempty"`
	// Headline holds the ratios against plain MetalLB, one per phase and baseline, each a
	// median over the rounds with its spread.
	Headline []Ratio `json:"headline"`
	Steps    []*Step `json:"steps"`
	// PeakRSSMiB is each process's highest resident set over the whole run (VmHWM).
	PeakRSSMiB map[string]float64 `json:"peakRSSMiB"`
	Check      CheckResult        `json:"check"`
}

// ReportConfig is the run's configuration.
type ReportConfig struct {
	N            int      `json:"n"`
	Phases       []string `json:"phases"`
	Concurrency  int      `json:"concurrency"`
	Rate         float64  `json:"ratePerSecond"`
	PhaseTimeout string   `json:"phaseTimeout"`
	// Rounds is how many times each phase (and its baseline) ran.
	Rounds int `json:"rounds"`
	// AttachBaseline is what the attach phase's baseline Services asked MetalLB for:
	// "pinned" (one given IP each), "pool" (any IP of the pool) or "both".
	AttachBaseline string `json:"attachBaseline,omitempty"`
	// Fresh: each phase group ran on a control plane of its own, with no baselines.
	Fresh bool `json:"fresh,omitempty"`
	// ControllerArgs are the extra flags both controllers ran with.
	ControllerArgs []string `json:"controllerArgs,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpuModel,omitempty"`
	MemoryGiB float64 `json:"memoryGiB,omitempty"`
	OS        string  `json:"os"`
	GoVersion string  `json:"go"`
	// LoadAvgStart is the one-minute load average before the sandbox started: other work on
	// the machine.
	LoadAvgStart float64 `json:"loadAvgStart"`
}

// CheckResult is the final correctness check.
type CheckResult struct {
	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`
}

// Step is one measured batch: a round of a phase or of its baseline.
type Step struct {
	// Name is the phase's, or its baseline's: baseline-<phase>, whose Services ask for any IP
	// of the pool, or baseline-<phase>-pinned, whose Services pin one IP each.
	Name string `json:"name"`
	// Kind is the phase whose objects the step creates (a baseline is "plain").
	Kind string `json:"kind"`
	// Round counts the step's rounds from 1 (0 in reports from before rounds, read as 1).
	Round int `json:"round,omitempty"`
	N     int `json:"n"`
	// PopulationAtStart is the number of Services in the cluster when the step began.
	PopulationAtStart int `json:"servicesAtStart"`
	// Seconds runs from the first create to the last object done; PerSecond is N over it.
	Seconds       float64 `json:"seconds"`
	PerSecond     float64 `json:"perSecond"`
	CreateSeconds float64 `json:"createSeconds"`
	Done          int     `json:"done"`
	TimedOut      bool    `json:"timedOut,omitempty"`
	// SettleSeconds is how long the controllers and MetalLB kept working after the last object
	// was done; the counters below cover the whole window (start to settled).
	SettleSeconds float64 `json:"settleSeconds"`
	// QuietAtStart says the controllers and MetalLB had gone quiet before the step began (false:
	// the step's timing includes work left over from before).
	QuietAtStart  bool    `json:"quietAtStart"`
	Settled       bool    `json:"settled"`
	WindowSeconds float64 `json:"windowSeconds"`
	Series        []Point `json:"series"`
	// Latency is each object's time from its create to the first watch event showing it done
	// (latency.go), over the objects done; nil when none was.
	Latency *Latency `json:"latency,omitempty"`
	started time.Time

	Writes                 WriteSummary `json:"writes"`
	ProjectWritesPerObject float64      `json:"projectWritesPerObject"`
	MetalLBWrites          int          `json:"metallbWrites"`
	MetalLBStatus          StatusWrites `json:"metallbServiceStatusWrites"`
	// Controllers maps a process to its controller-runtime controllers' figures.
	Controllers                map[string]map[string]ControllerStats `json:"controllers"`
	ProjectReconciles          float64                               `json:"projectReconciles"`
	ProjectReconcilesPerObject float64                               `json:"projectReconcilesPerObject"`
	RESTRequests               map[string]RESTStats                  `json:"restRequests"`
	MetalLB                    MetalLBWork                           `json:"metallb"`
	// MetalLBRefusedEvents are MetalLB's event writes the apiserver answered 403 (an admission
	// policy refused them) or 404 (client-go's event correlator patching an event that was
	// never created because it had been refused): each refused report costs MetalLB one of each
	// from its second occurrence on.
	MetalLBRefusedEvents int                 `json:"metallbRefusedEventWrites"`
	Processes            map[string]ProcStep `json:"processes"`
	// APIServerCPUPerObject is kube-apiserver's CPU seconds in the step's window over N.
	APIServerCPUPerObject float64 `json:"apiserverCPUSecondsPerObject"`
	LoadAvg               float64 `json:"loadAvgEnd"`
}

// Point is the number of objects done T seconds after a step's first create.
type Point struct {
	T    float64 `json:"t"`
	Done int     `json:"done"`
}

// RESTStats are a process's requests to the apiserver (reads included) during a step.
type RESTStats struct {
	Total     float64            `json:"total"`
	PerSecond float64            `json:"perSecond"`
	ByMethod  map[string]float64 `json:"byMethod"`
	// ThrottledSeconds is the time the process's requests spent waiting on its own client-side
	// rate limiter (QPS and burst), summed over requests; MeanThrottle is that per request. A
	// mean near the request interval the QPS allows means the limiter set the pace.
	ThrottledSeconds float64 `json:"throttledSeconds"`
	MeanThrottle     float64 `json:"meanThrottleSeconds"`
}

// ProcStep is a process's CPU and memory during a step.
type ProcStep struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUFraction is CPU seconds per second of the step's window (1.0 = one core busy).
	CPUFraction float64 `json:"cpuFraction"`
	PeakRSSMiB  float64 `json:"peakRSSMiB"`
	// EverRSSMiB is the process's peak resident set since it started (VmHWM) at the step's end.
	EverRSSMiB float64 `json:"peakRSSSinceStartMiB"`
}

// Ratio is a phase against plain MetalLB, over the rounds: each figure is one value per round
// summarized as a Stat (median, smallest and largest round), and each ratio is computed round
// by round (the phase against the baseline step of the same round) before it is summarized.
type Ratio struct {
	Phase string `json:"phase"`
	// Measure is "rate" (plain time over phase time: higher is better) or "time" (phase time
	// over plain time: lower is better).
	Measure string `json:"measure"`
	// Baseline says what the baseline's Services asked MetalLB for: "pool" (any IP of the pool)
	// or "pinned" (one given IP each, with metallb.io/loadBalancerIPs, as the driver pins);
	// empty for the plain phase, which is its own baseline, and for a phase without one.
	Baseline string `json:"baseline,omitempty"`
	Target   string `json:"target"`
	// Seconds is the phase's time, over the rounds that finished.
	Seconds *Stat `json:"seconds"`
	// BaselineSeconds is the plain batch measured right before each round of the phase, at
	// the same population of Services; VsBaseline the headline ratio against it.
	BaselineSeconds *Stat `json:"baselineSeconds,omitempty"`
	VsBaseline      *Stat `json:"vsBaseline,omitempty"`
	// EmptySeconds is the plain phase on the empty cluster (when it ran); VsEmpty the ratio,
	// round by round, against it, which flatters MetalLB.
	EmptySeconds *Stat `json:"emptyPlainSeconds,omitempty"`
	VsEmpty      *Stat `json:"vsEmptyPlain,omitempty"`
	// Latency is the phase's per-object time from create to done, BaselineLatency the same
	// baseline's (create to an address); the ratios are phase over baseline, round by round
	// (lower is better) whatever Measure says, nil without a baseline.
	Latency         *LatencyStats `json:"latency,omitempty"`
	BaselineLatency *LatencyStats `json:"baselineLatency,omitempty"`
	P50VsBaseline   *Stat         `json:"p50VsBaseline,omitempty"`
	P99VsBaseline   *Stat         `json:"p99VsBaseline,omitempty"`
	MaxVsBaseline   *Stat         `json:"maxVsBaseline,omitempty"`
}

func newReport(cfg Config) *Report {
	return &Report{
		Date:     time.Now().UTC(),
		Commit:   commit(),
		Machine:  func() Machine { m := machine(); m.LoadAvgStart = loadAvg(); return m }(),
		Versions: versions(cfg.MetalLBVersion),
		Config: ReportConfig{N: cfg.N, Phases: cfg.Phases, Rounds: cfg.Rounds, Concurrency: cfg.Concurrency, Rate: cfg.Rate, ControllerArgs: cfg.ControllerArgs,
			PhaseTimeout: cfg.PhaseTimeout.String(), Fresh: cfg.Fresh, AttachBaseline: attachBaselineOf(cfg)},
	}
}

// attachBaselineOf is the attach baseline a run measures: none without the attach phase or
// with Fresh (no baselines).
func attachBaselineOf(cfg Config) string {
	if cfg.Fresh || !slices.Contains(cfg.Phases, PhaseAttach) {
		return ""
	}
	return cfg.AttachBaseline
}

func (rep *Report) add(s *Step) {
	if s != nil {
		rep.Steps = append(rep.Steps, s)
	}
}

// recordPeaks reads every process's peak memory (the highest over the control planes of a
// Fresh run).
func (rep *Report) recordPeaks(r *runner) {
	for _, name := range measured {
		if p := r.procs[name]; p != nil {
			if st, err := ReadProc(p.Pid()); err == nil {
				rep.PeakRSSMiB[name] = max(rep.PeakRSSMiB[name], mib(st.PeakRSSBytes))
			}
		}
	}
}

// Headline computes each phase's ratios against its same-population baseline and against the
// plain phase on the empty cluster, from the rounds that finished: one entry per phase, and for
// attach one per baseline measured (pinned first). Each round's phase is paired with the
// baseline step of the same round. Without a baseline step, a phase round that started at the
// population of the same round's plain phase (a Fresh run) has that plain phase as its
// baseline.
func Headline(steps []*Step) []Ratio {
	rounds := finishedRounds(steps)
	empty := rounds[PhasePlain]
	var out []Ratio
	for _, phase := range AllPhases {
		own := rounds[phase]
		if len(own) == 0 {
			continue
		}
		type candidate struct {
			kind  string
			steps map[int]*Step
		}
		var bases []candidate
		switch {
		case phase == PhasePlain:
			bases = []candidate{{"", own}}
		case rounds[baselineName(phase, true)] != nil || rounds[baselineName(phase, false)] != nil:
			for _, pinned := range []bool{true, false} {
				if b := rounds[baselineName(phase, pinned)]; b != nil {
					kind := AttachBaselinePool
					if pinned {
						kind = AttachBaselinePinned
					}
					bases = append(bases, candidate{kind, b})
				}
			}
		default:
			// A Fresh run: the plain phase of the same round, when the phase began at its
			// population.
			same := map[int]*Step{}
			for r, s := range own {
				if e := empty[r]; e != nil && s.PopulationAtStart == e.PopulationAtStart {
					same[r] = e
				}
			}
			kind := ""
			if len(same) > 0 {
				kind = AttachBaselinePool
			}
			bases = []candidate{{kind, same}}
		}
		for _, base := range bases {
			out = append(out, ratioOf(phase, base.kind, own, base.steps, empty))
		}
	}
	return out
}

// ratioOf summarizes one phase against one baseline over the rounds, pairing round with round.
func ratioOf(phase, baseline string, own, base, empty map[int]*Step) Ratio {
	r := Ratio{Phase: phase, Baseline: baseline}
	switch phase {
	case PhasePlain:
		r.Measure, r.Target = "time", "1.00 (the baseline)"
	case PhaseClaims:
		r.Measure, r.Target = "rate", "≥ 0.8"
	case PhaseAttach:
		r.Measure, r.Target = "time", "≤ 1.25"
	}
	ratio := func(phaseSecs, plainSecs float64) float64 {
		if phase == PhaseClaims {
			return over(plainSecs, phaseSecs)
		}
		return over(phaseSecs, plainSecs)
	}
	var secs, baseSecs, vsBase, emptySecs, vsEmpty, p50, p99, mx []float64
	var lat, baseLat []*Latency
	for _, round := range sortedRounds(own) {
		s := own[round]
		secs = append(secs, s.Seconds)
		lat = append(lat, s.Latency)
		if b := base[round]; b != nil {
			baseSecs = append(baseSecs, b.Seconds)
			vsBase = append(vsBase, ratio(s.Seconds, b.Seconds))
			baseLat = append(baseLat, b.Latency)
			if s.Latency != nil && b.Latency != nil {
				p50 = append(p50, over(s.Latency.P50Seconds, b.Latency.P50Seconds))
				p99 = append(p99, over(s.Latency.P99Seconds, b.Latency.P99Seconds))
				mx = append(mx, over(s.Latency.MaxSeconds, b.Latency.MaxSeconds))
			}
		}
		if e := empty[round]; e != nil && phase != PhasePlain {
			emptySecs = append(emptySecs, e.Seconds)
			vsEmpty = append(vsEmpty, ratio(s.Seconds, e.Seconds))
		}
	}
	r.Seconds, r.BaselineSeconds, r.VsBaseline = statOf(secs), statOf(baseSecs), statOf(vsBase)
	r.EmptySeconds, r.VsEmpty = statOf(emptySecs), statOf(vsEmpty)
	r.Latency = latencyStatsOf(lat)
	if len(p50) > 0 {
		r.BaselineLatency = latencyStatsOf(baseLat)
		r.P50VsBaseline, r.P99VsBaseline, r.MaxVsBaseline = statOf(p50), statOf(p99), statOf(mx)
	}
	return r
}

// finishedRounds are the steps that finished (every object done in time), by name and round;
// of two steps of one name and round (a report put together by hand), the first.
func finishedRounds(steps []*Step) map[string]map[int]*Step {
	out := map[string]map[int]*Step{}
	for _, s := range steps {
		if s.TimedOut || s.Done != s.N || s.Seconds <= 0 {
			continue
		}
		if out[s.Name] == nil {
			out[s.Name] = map[int]*Step{}
		}
		if _, dup := out[s.Name][roundOf(s)]; !dup {
			out[s.Name][roundOf(s)] = s
		}
	}
	return out
}

// roundOf is a step's round, 1 for a step from before rounds.
func roundOf(s *Step) int { return max(s.Round, 1) }

// sortedRounds are the rounds of a step, in the order they ran.
func sortedRounds(m map[int]*Step) []int {
	out := make([]int, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// over is a/b, zero when b is (no ratio rather than an infinite one).
func over(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteJSON writes the report to path.
func (rep *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WriteText writes the report as Markdown tables.
func (rep *Report) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## bench-e2e, n=%d, %s", rep.Config.N, rep.Date.Format("2006-01-02 15:04 UTC"))
	p("")
	p("Machine: %d CPUs (%s), %.1f GiB, load average %.2f before the start; %s; Kubernetes %s, etcd %s, MetalLB %s; commit %s.",
		rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.MemoryGiB, rep.Machine.LoadAvgStart, rep.Versions["go"],
		rep.Versions["kubernetes"], rep.Versions["etcd"], rep.Versions["metallb"], orDash(rep.Commit))
	p("Client: one client, %d concurrent creates, at most %.0f creates/s, in every step.", rep.Config.Concurrency, rep.Config.Rate)
	if len(rep.Config.ControllerArgs) > 0 {
		p("Controllers' extra flags: `%s`.", strings.Join(rep.Config.ControllerArgs, " "))
	}
	if rep.Config.Fresh {
		p("Fresh control planes: plain, and claims with attach, each began on an empty cluster of its own (each round on new ones); no baselines, nothing deleted.")
	}
	switch rep.Config.AttachBaseline {
	case AttachBaselinePinned:
		p("The attach phase's baseline pins one free IP of the plain pool per Service (`metallb.io/loadBalancerIPs`), as the driver pins an attached Service.")
	case AttachBaselineBoth:
		p("The attach phase has two baselines: one pins a free IP of the plain pool per Service (`metallb.io/loadBalancerIPs`), as the driver pins an attached Service; the other asks for any IP of the pool.")
	}
	p("")
	rounds := max(rep.Config.Rounds, 1)
	p("### Headline")
	p("")
	if rounds > 1 {
		p("Each phase ran %d times, each round right after its baseline's round; every figure is the median over the rounds, the smallest and largest round in brackets. A ratio is taken round by round (the phase against the baseline of its round), then summarized.", rounds)
		p("")
	}
	p("| phase | rounds | time | baseline | plain at the same population | ratio | plain on the empty cluster | ratio | target |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, h := range rep.Headline {
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s %s |", h.Phase, h.Seconds.N(), h.Seconds.text("%.1f", " s"), baselineText(h), h.BaselineSeconds.text("%.1f", " s"),
			ratioText(h.VsBaseline, h.Measure), h.EmptySeconds.text("%.1f", " s"), ratioText(h.VsEmpty, h.Measure), h.Measure, h.Target)
	}
	p("")
	p("Per object, from sending its create to the benchmark's watch first showing it done: each round's p50, p99 and max, summarized over the rounds; ratios are the phase's over its plain baseline's, round by round (lower is better).")
	p("")
	p("| phase | done when | objects | per object | create to done | baseline | plain at the same population: create to an address | ratio |")
	p("|---|---|---|---|---|---|---|---|")
	for _, h := range rep.Headline {
		if h.Latency == nil {
			continue
		}
		l, b := h.Latency, h.BaselineLatency
		rows := []struct {
			name           string
			phase, base, r *Stat
		}{{"p50", l.P50, nil, h.P50VsBaseline}, {"p99", l.P99, nil, h.P99VsBaseline}, {"max", l.Max, nil, h.MaxVsBaseline}}
		if b != nil {
			rows[0].base, rows[1].base, rows[2].base = b.P50, b.P99, b.Max
		}
		for _, row := range rows {
			p("| %s | %s | %d | %s | %s | %s | %s | %s |", h.Phase, doneWhen[h.Phase], l.Objects, row.name, row.phase.durText(),
				baselineText(h), row.base.durText(), row.r.text("%.2f", "×"))
		}
	}
	p("")
	p("### Steps")
	p("")
	p("| step | Services at start | time | objects/s | create to done p50 / p99 / max | creates took | settled after | project writes (/object) | project reconciles (/object) | MetalLB writes (refused events) | MetalLB reconciles: service / reprocess-all / pool-status | kube-apiserver CPU s /object |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range rep.Steps {
		timed := fmt.Sprintf("%.1f s", s.Seconds)
		if s.TimedOut {
			timed = fmt.Sprintf("timed out (%d/%d)", s.Done, s.N)
		}
		settled := fmt.Sprintf("%.1f s", s.SettleSeconds)
		if !s.Settled {
			settled += " (not quiet)"
		}
		if !s.QuietAtStart {
			timed += " (began before the cluster was quiet)"
		}
		p("| %s | %d | %s | %.1f | %s | %.1f s | %s | %d (%.2f) | %.0f (%.2f) | %d (%d) | %d / %d / %d | %.3f |", rep.label(s), s.PopulationAtStart, timed,
			s.PerSecond, latencyText(s.Latency), s.CreateSeconds, settled, s.Writes.Project, s.ProjectWritesPerObject, s.ProjectReconciles,
			s.ProjectReconcilesPerObject, s.MetalLBWrites, s.MetalLBRefusedEvents, s.MetalLB.Reconciles["service"],
			s.MetalLB.Reconciles["reprocess-all"], s.MetalLB.Reconciles["pool-status"], s.APIServerCPUPerObject)
	}
	p("")
	p("### Writes by identity (audit log)")
	p("")
	p("Writes cover the step's whole window (first create until everything was quiet); \"timed part\" is first create to last object done; peak is the most in one wall-clock second.")
	p("")
	p("| step | identity | writes | in the timed part (/s) | peak /s | breakdown (verb resource code: count) |")
	p("|---|---|---|---|---|---|")
	for _, s := range rep.Steps {
		ids := make([]string, 0, len(s.Writes.ByIdentity))
		for id := range s.Writes.ByIdentity {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			rate := s.Writes.ByIdentity[id]
			var parts []string
			for _, row := range s.Writes.Rows {
				if row.Identity == id {
					parts = append(parts, fmt.Sprintf("%s: %d", row.rowLabel(), row.Count))
				}
			}
			p("| %s | %s | %d | %d (%.1f) | %d | %s |", rep.label(s), id, rate.Total, rate.InPhase, rate.InPhasePerSecond, rate.Peak, strings.Join(parts, ", "))
		}
	}
	p("")
	p("### Controllers (controller-runtime metrics; MetalLB's from v0.16, not counted as the project's)")
	p("")
	p("| step | controller | reconciles (/object) | errors | requeues | queue adds | mean wait in queue | mean work | workers |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, s := range rep.Steps {
		for _, proc := range append(slices.Clone(controllers), metallbController) {
			names := make([]string, 0, len(s.Controllers[proc]))
			for n := range s.Controllers[proc] {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				c := s.Controllers[proc][n]
				if c.Total == 0 && c.Adds == 0 {
					continue
				}
				p("| %s | %s/%s | %.0f (%.2f) | %.0f | %.0f | %.0f | %s | %s | %.0f |", rep.label(s), proc, n, c.Total, c.PerObject,
					c.Reconciles["error"], c.Reconciles["requeue"]+c.Reconciles["requeue_after"], c.Adds,
					dur(c.MeanWaitSecs), dur(c.MeanWorkSecs), c.MaxConcurrent)
			}
		}
	}
	p("")
	p("| step | process | requests to the apiserver | /s | throttled (sum, mean) | by method |")
	p("|---|---|---|---|---|---|")
	for _, s := range rep.Steps {
		for _, proc := range controllers {
			rs, ok := s.RESTRequests[proc]
			if !ok {
				continue
			}
			var parts []string
			for _, m := range sortedKeys(rs.ByMethod) {
				if rs.ByMethod[m] > 0 {
					parts = append(parts, fmt.Sprintf("%s %.0f", m, rs.ByMethod[m]))
				}
			}
			p("| %s | %s | %.0f | %.1f | %.1f s, %s | %s |", rep.label(s), proc, rs.Total, rs.PerSecond, rs.ThrottledSeconds, dur(rs.MeanThrottle), strings.Join(parts, ", "))
		}
	}
	p("")
	p("### MetalLB's controller (its log)")
	p("")
	p("| step | reconciles | by kind | Service status writes (audit log): to which Services | 409 | median /s in the timed part | events |")
	p("|---|---|---|---|---|---|---|")
	for _, s := range rep.Steps {
		var kinds, events []string
		for _, k := range sortedKeys(s.MetalLB.Reconciles) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, s.MetalLB.Reconciles[k]))
		}
		for _, k := range sortedKeys(s.MetalLB.Events) {
			events = append(events, fmt.Sprintf("%s %d", k, s.MetalLB.Events[k]))
		}
		var targets []string
		for _, k := range sortedKeys(s.MetalLBStatus.ByTarget) {
			targets = append(targets, fmt.Sprintf("%s %d", k, s.MetalLBStatus.ByTarget[k]))
		}
		p("| %s | %d | %s | %s | %d | %.0f | %s |", rep.label(s), s.MetalLB.Total, strings.Join(kinds, ", "), strings.Join(targets, ", "),
			s.MetalLBStatus.Conflicts, s.MetalLBStatus.MedianPerSecond, strings.Join(events, ", "))
	}
	p("")
	p("### Processes (CPU seconds in the step's window, peak RSS in the step)")
	p("")
	header := "| step |"
	sep := "|---|"
	for _, name := range measured {
		header += " " + name + " |"
		sep += "---|"
	}
	p("%s load avg |", header)
	p("%s---|", sep)
	for _, s := range rep.Steps {
		line := "| " + rep.label(s) + " |"
		for _, name := range measured {
			ps := s.Processes[name]
			line += fmt.Sprintf(" %.1f s, %.0f MiB |", ps.CPUSeconds, ps.PeakRSSMiB)
		}
		p("%s %.2f |", line, s.LoadAvg)
	}
	p("")
	var peaks []string
	for _, name := range measured {
		if v, ok := rep.PeakRSSMiB[name]; ok {
			peaks = append(peaks, fmt.Sprintf("%s %.0f MiB", name, v))
		}
	}
	p("Peak RSS over the run: %s.", strings.Join(peaks, ", "))
	p("")
	if rep.Check.OK {
		p("Check: every attached Service shows exactly its claim's address, every plain Service one address, no IP is on two Services or two claims.")
	} else {
		p("Check FAILED (%d problems):", len(rep.Check.Problems))
		for i, pr := range rep.Check.Problems {
			if i == 20 {
				p("- … and %d more", len(rep.Check.Problems)-20)
				break
			}
			p("- %s", pr)
		}
	}
}

// doneWhen says, per phase, what its latencies run to.
var doneWhen = map[string]string{PhasePlain: "any address", PhaseClaims: "Bound", PhaseAttach: "its claim's address"}

// baselineText says what a headline entry's baseline Services asked MetalLB for.
func baselineText(h Ratio) string {
	switch {
	case h.Phase == PhasePlain:
		return "itself"
	case h.Baseline == AttachBaselinePinned:
		return "pinned IPs"
	case h.Baseline == AttachBaselinePool:
		return "any IP of the pool"
	}
	return "-"
}

// label names a step in the report's tables: its name, with its round when the run had more
// than one (stepLabel).
func (rep *Report) label(s *Step) string {
	return stepLabel(s.Name, roundOf(s), rep.Config.Rounds)
}

// latencyText is p50 / p99 / max, or "-" when nothing was measured.
func latencyText(l *Latency) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s", dur(l.P50Seconds), dur(l.P99Seconds), dur(l.MaxSeconds))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ratioText(v *Stat, measure string) string {
	if v == nil || v.Median == 0 {
		return "-"
	}
	return v.text("%.2f", "×") + " " + measure
}

func dur(s float64) string {
	switch {
	case s == 0:
		return "-"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f s", s)
}
