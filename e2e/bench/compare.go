package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// Comparison is the benchmark run once per MetalLB build, one build after the other, on one
// machine at one commit: what a change to MetalLB (the patches under
// tools/binaries/metallb/patches) gains plain MetalLB, and what it makes of the project's ratios.
type Comparison struct {
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit,omitempty"`
	Machine Machine   `json:"machine"`
	// Builds are the figures of each run, in the order the runs went.
	Builds []BuildFigures `json:"builds"`
	// Runs are the full reports, in the same order.
	Runs []*Report `json:"runs"`
}

// BuildFigures are one run's figures that a comparison of MetalLB builds reads. A figure
// measured per round is a Stat (median over the rounds, smallest and largest round); a count
// per object is the median over the rounds. A phase that finished no round has no figures.
type BuildFigures struct {
	MetalLB string `json:"metallb"`
	// Rounds is how many times each phase ran.
	Rounds int `json:"rounds"`
	// AttachBaseline is what the baseline of the attach figures asked MetalLB for: "pinned"
	// (one given IP per Service, as the driver pins) or "pool" (any IP of the pool).
	AttachBaseline string `json:"attachBaseline,omitempty"`
	// Seconds of each phase and of its same-population baseline.
	PlainSeconds          *Stat `json:"plainSeconds,omitempty"`
	ClaimsSeconds         *Stat `json:"claimsSeconds,omitempty"`
	ClaimsBaselineSeconds *Stat `json:"claimsBaselineSeconds,omitempty"`
	AttachSeconds         *Stat `json:"attachSeconds,omitempty"`
	AttachBaselineSeconds *Stat `json:"attachBaselineSeconds,omitempty"`
	// ClaimsRatio (rate, higher is better) and AttachRatio (time, lower is better) are the
	// headline ratios against plain MetalLB at the same population, round by round.
	ClaimsRatio *Stat `json:"claimsRatio,omitempty"`
	AttachRatio *Stat `json:"attachRatio,omitempty"`
	// AttachPoolRatio is attach against the pool baseline when both attach baselines ran
	// (AttachRatio is then against the pinned one).
	AttachPoolRatio *Stat `json:"attachPoolRatio,omitempty"`
	// ClaimsP50Seconds, ClaimsP99Seconds and ClaimsMaxSeconds are the claims' times from create
	// to Bound.
	ClaimsP50Seconds *Stat `json:"claimsP50Seconds,omitempty"`
	ClaimsP99Seconds *Stat `json:"claimsP99Seconds,omitempty"`
	ClaimsMaxSeconds *Stat `json:"claimsMaxSeconds,omitempty"`
	// AttachP50Seconds, AttachP99Seconds and AttachMaxSeconds are the attach Services' times
	// from create to their claim's address; AttachBaselineP50Seconds and
	// AttachBaselineP99Seconds the same-population plain Services' from create to an address.
	AttachP50Seconds         *Stat `json:"attachP50Seconds,omitempty"`
	AttachP99Seconds         *Stat `json:"attachP99Seconds,omitempty"`
	AttachMaxSeconds         *Stat `json:"attachMaxSeconds,omitempty"`
	AttachBaselineP50Seconds *Stat `json:"attachBaselineP50Seconds,omitempty"`
	AttachBaselineP99Seconds *Stat `json:"attachBaselineP99Seconds,omitempty"`
	// StatusWritesPerService are MetalLB's writes of services/status per Service of the plain
	// phase (every attempt, conflicts included), StatusConflicts those answered 409.
	StatusWritesPerService float64 `json:"plainStatusWritesPerService"`
	StatusConflicts        float64 `json:"plainStatusConflicts"`
	// MetalLBWritesPerService are all of MetalLB's writes per Service of the plain phase.
	MetalLBWritesPerService float64 `json:"plainMetalLBWritesPerService"`
	// ProjectWritesPerAddress and ProjectWritesPerAttach are the project's writes per object of
	// the claims and attach phases.
	ProjectWritesPerAddress float64 `json:"projectWritesPerAddress"`
	ProjectWritesPerAttach  float64 `json:"projectWritesPerAttach"`
	// Settle*Seconds are how long MetalLB and the controllers kept working after each phase's
	// last object was done.
	PlainSettleSeconds  float64 `json:"plainSettleSeconds"`
	AttachSettleSeconds float64 `json:"attachSettleSeconds"`
	// Check says the run's final correctness check passed.
	Check bool `json:"check"`
	// PlainDone, ClaimsDone and AttachDone say the phase finished a round at least (its
	// figures are missing otherwise).
	PlainDone  bool `json:"plainDone"`
	ClaimsDone bool `json:"claimsDone"`
	AttachDone bool `json:"attachDone"`
	// LoadAvg is the mean of the one-minute load averages at the ends of the run's steps:
	// other work on the machine while it ran.
	LoadAvg float64 `json:"loadAvg"`
}

// figures reads a run's report.
func figures(rep *Report) BuildFigures {
	f := BuildFigures{MetalLB: rep.Versions["metallb"], Check: rep.Check.OK, Rounds: max(rep.Config.Rounds, 1)}
	var loads float64
	for _, s := range rep.Steps {
		loads += s.LoadAvg
	}
	if len(rep.Steps) > 0 {
		f.LoadAvg = loads / float64(len(rep.Steps))
	}
	rounds := finishedRounds(rep.Steps)
	// over summarizes a figure of a phase's rounds, in round order.
	over := func(name string, get func(*Step) float64) []float64 {
		var out []float64
		for _, r := range sortedRounds(rounds[name]) {
			out = append(out, get(rounds[name][r]))
		}
		return out
	}
	secs := func(s *Step) float64 { return s.Seconds }
	if len(rounds[PhasePlain]) > 0 {
		f.PlainDone = true
		f.PlainSeconds = statOf(over(PhasePlain, secs))
		f.PlainSettleSeconds = median(over(PhasePlain, func(s *Step) float64 { return s.SettleSeconds }))
		f.StatusWritesPerService = median(over(PhasePlain, func(s *Step) float64 {
			total := 0
			for _, n := range s.MetalLBStatus.ByTarget {
				total += n
			}
			return float64(total) / float64(s.N)
		}))
		f.StatusConflicts = median(over(PhasePlain, func(s *Step) float64 { return float64(s.MetalLBStatus.Conflicts) }))
		f.MetalLBWritesPerService = median(over(PhasePlain, func(s *Step) float64 { return float64(s.MetalLBWrites) / float64(s.N) }))
	}
	perObject := func(s *Step) float64 { return s.ProjectWritesPerObject }
	if len(rounds[PhaseClaims]) > 0 {
		f.ClaimsDone = true
		f.ClaimsSeconds = statOf(over(PhaseClaims, secs))
		f.ProjectWritesPerAddress = median(over(PhaseClaims, perObject))
	}
	if len(rounds[PhaseAttach]) > 0 {
		f.AttachDone = true
		f.AttachSeconds = statOf(over(PhaseAttach, secs))
		f.ProjectWritesPerAttach = median(over(PhaseAttach, perObject))
		f.AttachSettleSeconds = median(over(PhaseAttach, func(s *Step) float64 { return s.SettleSeconds }))
	}
	attachRows := 0
	for _, h := range rep.Headline {
		switch h.Phase {
		case PhaseClaims:
			f.ClaimsRatio, f.ClaimsBaselineSeconds = h.VsBaseline, h.BaselineSeconds
			if l := h.Latency; l != nil {
				f.ClaimsP50Seconds, f.ClaimsP99Seconds, f.ClaimsMaxSeconds = l.P50, l.P99, l.Max
			}
		case PhaseAttach:
			// The first attach entry is against the pinned baseline when it ran; a second one
			// (both ran) against the pool's.
			attachRows++
			if attachRows > 1 {
				if h.Baseline == AttachBaselinePool {
					f.AttachPoolRatio = h.VsBaseline
				}
				continue
			}
			f.AttachBaseline = h.Baseline
			f.AttachRatio, f.AttachBaselineSeconds = h.VsBaseline, h.BaselineSeconds
			if l := h.Latency; l != nil {
				f.AttachP50Seconds, f.AttachP99Seconds, f.AttachMaxSeconds = l.P50, l.P99, l.Max
			}
			if l := h.BaselineLatency; l != nil {
				f.AttachBaselineP50Seconds, f.AttachBaselineP99Seconds = l.P50, l.P99
			}
		}
	}
	return f
}

// RunEach runs the benchmark once per MetalLB build, in the order given, each on control planes
// of its own (with Dir, in a subdirectory named after the build), and compares them. onReport
// gets each run's report as it ends (to print or save it before the next run starts). Every
// build must be built, and named once, before anything starts. A run that fails (a step timed
// out, the final check found problems) does not stop the next one; the errors are returned
// together, with the comparison of what ran.
func RunEach(ctx context.Context, cfg Config, metallb []string, onReport func(*Report)) (*Comparison, error) {
	if len(metallb) < 2 {
		return nil, fmt.Errorf("a comparison needs two MetalLB builds or more, got %d", len(metallb))
	}
	seen := map[string]bool{}
	for _, v := range metallb {
		if seen[v] {
			return nil, fmt.Errorf("MetalLB %s is named twice: each build runs once", v)
		}
		seen[v] = true
		if !binaries.MetalLBAt(v).Built() {
			return nil, fmt.Errorf("MetalLB %s is not built: run `go run ./tools/cmd/binaries build metallb@%s` first", v, v)
		}
	}
	cmp := &Comparison{Date: time.Now().UTC(), Commit: commit(), Machine: machine()}
	cmp.Machine.LoadAvgStart = loadAvg()
	var errs []error
	for _, v := range metallb {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		run := cfg
		run.MetalLBVersion = v
		if cfg.Dir != "" {
			run.Dir = filepath.Join(cfg.Dir, "metallb-"+strings.ReplaceAll(v, "+", "-"))
		}
		fmt.Fprintf(cfg.Log, "%s === MetalLB %s ===\n", time.Now().UTC().Format("15:04:05"), v)
		rep, err := Run(ctx, run)
		if rep != nil {
			cmp.Runs = append(cmp.Runs, rep)
			cmp.Builds = append(cmp.Builds, figures(rep))
			if onReport != nil {
				onReport(rep)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("MetalLB %s: %w", v, err))
		}
	}
	return cmp, errors.Join(errs...)
}

// WriteJSON writes the comparison, every run's report included, to path.
func (c *Comparison) WriteJSON(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WriteText writes the comparison as one Markdown table, a column per build and, with two
// builds, the change from the first to the second.
func (c *Comparison) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	n := 0
	if len(c.Runs) > 0 {
		n = c.Runs[0].Config.N
	}
	p("## bench-e2e, MetalLB builds compared, n=%d, %s", n, c.Date.Format("2006-01-02 15:04 UTC"))
	p("")
	p("Machine: %d CPUs (%s), load average %.2f before the first run; commit %s. One run per build, one after the other.",
		c.Machine.CPUs, c.Machine.CPUModel, c.Machine.LoadAvgStart, orDash(c.Commit))
	rounds, attachBase := 1, ""
	if len(c.Builds) > 0 {
		rounds, attachBase = c.Builds[0].Rounds, c.Builds[0].AttachBaseline
	}
	if rounds > 1 {
		p("Each phase ran %d times in each run, alternating with its baseline: times, ratios and latencies are medians over the rounds, the smallest and largest round in brackets; counts per object are medians.", rounds)
	}
	p("")
	header, sep := "| figure |", "|---|"
	for _, b := range c.Builds {
		header += " MetalLB " + b.MetalLB + " |"
		sep += "---|"
	}
	two := len(c.Builds) == 2
	if two {
		header += " change |"
		sep += "---|"
	}
	p("%s", header)
	p("%s", sep)
	diff := func(a, b float64) string { return fmt.Sprintf("%+.2f", b-a) }
	count := func(a, b float64) string { return fmt.Sprintf("%+.0f", b-a) }
	// percent and times compare two non-zero figures; from or to zero they give the difference.
	percent := func(a, b float64) string {
		if a == 0 || b == 0 {
			return diff(a, b)
		}
		return fmt.Sprintf("%+.0f %%", (b-a)/a*100)
	}
	times := func(a, b float64) string {
		if a == 0 || b == 0 {
			return diff(a, b)
		}
		if b <= a {
			return fmt.Sprintf("%.2f× faster", a/b)
		}
		return fmt.Sprintf("%.2f× slower", b/a)
	}
	// A figure of a phase that did not finish (or a ratio without its baseline) shows as "-";
	// a real zero shows as one. The change compares the medians.
	row := func(name string, get func(BuildFigures) *Stat, format, unit string, change func(a, b float64) string) {
		line := "| " + name + " |"
		for _, b := range c.Builds {
			line += " " + get(b).text(format, unit) + " |"
		}
		if two {
			a, b := get(c.Builds[0]), get(c.Builds[1])
			if a != nil && b != nil {
				line += " " + change(a.Median, b.Median) + " |"
			} else {
				line += " - |"
			}
		}
		p("%s", line)
	}
	when := func(done func(BuildFigures) bool, f func(BuildFigures) float64) func(BuildFigures) *Stat {
		return func(b BuildFigures) *Stat {
			if !done(b) {
				return nil
			}
			return statOf([]float64{f(b)})
		}
	}
	plain := func(b BuildFigures) bool { return b.PlainDone }
	claims := func(b BuildFigures) bool { return b.ClaimsDone }
	attach := func(b BuildFigures) bool { return b.AttachDone }
	// stat reads a figure measured per round; a zero median is a figure not measured.
	stat := func(f func(BuildFigures) *Stat) func(BuildFigures) *Stat {
		return func(b BuildFigures) *Stat {
			if s := f(b); s != nil && s.Median != 0 {
				return s
			}
			return nil
		}
	}
	always := func(BuildFigures) bool { return true }
	base := "plain"
	switch attachBase {
	case AttachBaselinePinned:
		base = "plain pinned"
	case AttachBaselinePool:
		base = "plain (any IP of the pool)"
	}
	row("plain: time", stat(func(b BuildFigures) *Stat { return b.PlainSeconds }), "%.1f", " s", times)
	row("plain: MetalLB status writes / Service", when(plain, func(b BuildFigures) float64 { return b.StatusWritesPerService }), "%.2f", "", diff)
	row("plain: MetalLB writes / Service", when(plain, func(b BuildFigures) float64 { return b.MetalLBWritesPerService }), "%.2f", "", diff)
	row("plain: status writes answered 409", when(plain, func(b BuildFigures) float64 { return b.StatusConflicts }), "%.0f", "", count)
	row("plain: settled after", when(plain, func(b BuildFigures) float64 { return b.PlainSettleSeconds }), "%.1f", " s", percent)
	row("claims: time", stat(func(b BuildFigures) *Stat { return b.ClaimsSeconds }), "%.1f", " s", times)
	row("claims: plain at the same population", stat(func(b BuildFigures) *Stat { return b.ClaimsBaselineSeconds }), "%.1f", " s", times)
	row("claims: rate ratio (≥ 0.8)", stat(func(b BuildFigures) *Stat { return b.ClaimsRatio }), "%.2f", "×", diff)
	row("claims: create to Bound, p50", stat(func(b BuildFigures) *Stat { return b.ClaimsP50Seconds }), "%.1f", " s", times)
	row("claims: create to Bound, p99", stat(func(b BuildFigures) *Stat { return b.ClaimsP99Seconds }), "%.1f", " s", times)
	row("claims: create to Bound, max", stat(func(b BuildFigures) *Stat { return b.ClaimsMaxSeconds }), "%.1f", " s", times)
	row("claims: project writes / address", when(claims, func(b BuildFigures) float64 { return b.ProjectWritesPerAddress }), "%.2f", "", diff)
	row("attach: time", stat(func(b BuildFigures) *Stat { return b.AttachSeconds }), "%.1f", " s", times)
	row("attach: "+base+" at the same population", stat(func(b BuildFigures) *Stat { return b.AttachBaselineSeconds }), "%.1f", " s", times)
	row("attach: time ratio to "+base+" (≤ 1.25)", stat(func(b BuildFigures) *Stat { return b.AttachRatio }), "%.2f", "×", diff)
	if slices.ContainsFunc(c.Builds, func(b BuildFigures) bool { return b.AttachPoolRatio != nil }) {
		row("attach: time ratio to plain (any IP of the pool)", stat(func(b BuildFigures) *Stat { return b.AttachPoolRatio }), "%.2f", "×", diff)
	}
	row("attach: create to its claim's address, p50", stat(func(b BuildFigures) *Stat { return b.AttachP50Seconds }), "%.1f", " s", times)
	row("attach: create to its claim's address, p99", stat(func(b BuildFigures) *Stat { return b.AttachP99Seconds }), "%.1f", " s", times)
	row("attach: create to its claim's address, max", stat(func(b BuildFigures) *Stat { return b.AttachMaxSeconds }), "%.1f", " s", times)
	row("attach: "+base+" create to an address, p50", stat(func(b BuildFigures) *Stat { return b.AttachBaselineP50Seconds }), "%.1f", " s", times)
	row("attach: "+base+" create to an address, p99", stat(func(b BuildFigures) *Stat { return b.AttachBaselineP99Seconds }), "%.1f", " s", times)
	row("attach: project writes / Service", when(attach, func(b BuildFigures) float64 { return b.ProjectWritesPerAttach }), "%.2f", "", diff)
	row("attach: settled after", when(attach, func(b BuildFigures) float64 { return b.AttachSettleSeconds }), "%.1f", " s", percent)
	row("load average at the steps' ends (mean)", when(always, func(b BuildFigures) float64 { return b.LoadAvg }), "%.2f", "", diff)
	line := "| final check |"
	for _, b := range c.Builds {
		if b.Check {
			line += " passed |"
		} else {
			line += " FAILED |"
		}
	}
	if two {
		line += " |"
	}
	p("%s", line)
}
