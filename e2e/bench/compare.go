package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// BuildFigures are one run's figures that a comparison of MetalLB builds reads.
type BuildFigures struct {
	MetalLB string `json:"metallb"`
	// Seconds of each phase and of its same-population baseline (zero when it did not finish).
	PlainSeconds          float64 `json:"plainSeconds"`
	ClaimsSeconds         float64 `json:"claimsSeconds"`
	ClaimsBaselineSeconds float64 `json:"claimsBaselineSeconds"`
	AttachSeconds         float64 `json:"attachSeconds"`
	AttachBaselineSeconds float64 `json:"attachBaselineSeconds"`
	// ClaimsRatio (rate, higher is better) and AttachRatio (time, lower is better) are the
	// headline ratios against plain MetalLB at the same population.
	ClaimsRatio float64 `json:"claimsRatio"`
	AttachRatio float64 `json:"attachRatio"`
	// AttachP50Seconds, AttachP99Seconds and AttachMaxSeconds are the attach Services' times
	// from create to their claim's address; AttachBaselineP50Seconds and
	// AttachBaselineP99Seconds the same-population plain Services' from create to an address.
	AttachP50Seconds         float64 `json:"attachP50Seconds"`
	AttachP99Seconds         float64 `json:"attachP99Seconds"`
	AttachMaxSeconds         float64 `json:"attachMaxSeconds"`
	AttachBaselineP50Seconds float64 `json:"attachBaselineP50Seconds"`
	AttachBaselineP99Seconds float64 `json:"attachBaselineP99Seconds"`
	// StatusWritesPerService are MetalLB's writes of services/status per Service of the plain
	// phase (every attempt, conflicts included), StatusConflicts those answered 409.
	StatusWritesPerService float64 `json:"plainStatusWritesPerService"`
	StatusConflicts        int     `json:"plainStatusConflicts"`
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
	// PlainDone, ClaimsDone and AttachDone say the phase finished (its figures are zero
	// otherwise, and shown as missing).
	PlainDone  bool `json:"plainDone"`
	ClaimsDone bool `json:"claimsDone"`
	AttachDone bool `json:"attachDone"`
	// LoadAvg is the mean of the one-minute load averages at the ends of the run's steps:
	// other work on the machine while it ran.
	LoadAvg float64 `json:"loadAvg"`
}

// figures reads a run's report.
func figures(rep *Report) BuildFigures {
	f := BuildFigures{MetalLB: rep.Versions["metallb"], Check: rep.Check.OK}
	done := func(s *Step) bool { return s != nil && !s.TimedOut && s.Done == s.N && s.Seconds > 0 }
	var loads float64
	for _, s := range rep.Steps {
		loads += s.LoadAvg
	}
	if len(rep.Steps) > 0 {
		f.LoadAvg = loads / float64(len(rep.Steps))
	}
	for _, s := range rep.Steps {
		if !done(s) {
			continue
		}
		switch s.Name {
		case PhasePlain:
			f.PlainDone = true
			f.PlainSeconds, f.PlainSettleSeconds = s.Seconds, s.SettleSeconds
			total := 0
			for _, n := range s.MetalLBStatus.ByTarget {
				total += n
			}
			f.StatusWritesPerService = float64(total) / float64(s.N)
			f.StatusConflicts = s.MetalLBStatus.Conflicts
			f.MetalLBWritesPerService = float64(s.MetalLBWrites) / float64(s.N)
		case PhaseClaims:
			f.ClaimsDone = true
			f.ClaimsSeconds, f.ProjectWritesPerAddress = s.Seconds, s.ProjectWritesPerObject
		case PhaseAttach:
			f.AttachDone = true
			f.AttachSeconds, f.ProjectWritesPerAttach, f.AttachSettleSeconds = s.Seconds, s.ProjectWritesPerObject, s.SettleSeconds
		}
	}
	for _, h := range rep.Headline {
		switch h.Phase {
		case PhaseClaims:
			f.ClaimsRatio, f.ClaimsBaselineSeconds = h.VsBaseline, h.BaselineSeconds
		case PhaseAttach:
			f.AttachRatio, f.AttachBaselineSeconds = h.VsBaseline, h.BaselineSeconds
			if l := h.Latency; l != nil {
				f.AttachP50Seconds, f.AttachP99Seconds, f.AttachMaxSeconds = l.P50Seconds, l.P99Seconds, l.MaxSeconds
			}
			if l := h.BaselineLatency; l != nil {
				f.AttachBaselineP50Seconds, f.AttachBaselineP99Seconds = l.P50Seconds, l.P99Seconds
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
	// a real zero shows as one.
	row := func(name string, get func(BuildFigures) (float64, bool), format string, change func(a, b float64) string) {
		line := "| " + name + " |"
		for _, b := range c.Builds {
			if v, ok := get(b); ok {
				line += " " + fmt.Sprintf(format, v) + " |"
			} else {
				line += " - |"
			}
		}
		if two {
			a, aok := get(c.Builds[0])
			b, bok := get(c.Builds[1])
			if aok && bok {
				line += " " + change(a, b) + " |"
			} else {
				line += " - |"
			}
		}
		p("%s", line)
	}
	when := func(done func(BuildFigures) bool, f func(BuildFigures) float64) func(BuildFigures) (float64, bool) {
		return func(b BuildFigures) (float64, bool) { return f(b), done(b) }
	}
	plain := func(b BuildFigures) bool { return b.PlainDone }
	claims := func(b BuildFigures) bool { return b.ClaimsDone }
	attach := func(b BuildFigures) bool { return b.AttachDone }
	ratio := func(f func(BuildFigures) float64) func(BuildFigures) (float64, bool) {
		return func(b BuildFigures) (float64, bool) { return f(b), f(b) != 0 }
	}
	always := func(BuildFigures) bool { return true }
	row("plain: time", when(plain, func(b BuildFigures) float64 { return b.PlainSeconds }), "%.1f s", times)
	row("plain: MetalLB status writes / Service", when(plain, func(b BuildFigures) float64 { return b.StatusWritesPerService }), "%.2f", diff)
	row("plain: MetalLB writes / Service", when(plain, func(b BuildFigures) float64 { return b.MetalLBWritesPerService }), "%.2f", diff)
	row("plain: status writes answered 409", when(plain, func(b BuildFigures) float64 { return float64(b.StatusConflicts) }), "%.0f", count)
	row("plain: settled after", when(plain, func(b BuildFigures) float64 { return b.PlainSettleSeconds }), "%.1f s", percent)
	row("claims: time", when(claims, func(b BuildFigures) float64 { return b.ClaimsSeconds }), "%.1f s", times)
	row("claims: plain at the same population", ratio(func(b BuildFigures) float64 { return b.ClaimsBaselineSeconds }), "%.1f s", times)
	row("claims: rate ratio (≥ 0.8)", ratio(func(b BuildFigures) float64 { return b.ClaimsRatio }), "%.2f×", diff)
	row("claims: project writes / address", when(claims, func(b BuildFigures) float64 { return b.ProjectWritesPerAddress }), "%.2f", diff)
	row("attach: time", when(attach, func(b BuildFigures) float64 { return b.AttachSeconds }), "%.1f s", times)
	row("attach: plain at the same population", ratio(func(b BuildFigures) float64 { return b.AttachBaselineSeconds }), "%.1f s", times)
	row("attach: time ratio (≤ 1.25)", ratio(func(b BuildFigures) float64 { return b.AttachRatio }), "%.2f×", diff)
	row("attach: create to its claim's address, p50", ratio(func(b BuildFigures) float64 { return b.AttachP50Seconds }), "%.1f s", times)
	row("attach: create to its claim's address, p99", ratio(func(b BuildFigures) float64 { return b.AttachP99Seconds }), "%.1f s", times)
	row("attach: create to its claim's address, max", ratio(func(b BuildFigures) float64 { return b.AttachMaxSeconds }), "%.1f s", times)
	row("attach: plain create to an address, p50", ratio(func(b BuildFigures) float64 { return b.AttachBaselineP50Seconds }), "%.1f s", times)
	row("attach: plain create to an address, p99", ratio(func(b BuildFigures) float64 { return b.AttachBaselineP99Seconds }), "%.1f s", times)
	row("attach: project writes / Service", when(attach, func(b BuildFigures) float64 { return b.ProjectWritesPerAttach }), "%.2f", diff)
	row("attach: settled after", when(attach, func(b BuildFigures) float64 { return b.AttachSettleSeconds }), "%.1f s", percent)
	row("load average at the steps' ends (mean)", when(always, func(b BuildFigures) float64 { return b.LoadAvg }), "%.2f", diff)
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
