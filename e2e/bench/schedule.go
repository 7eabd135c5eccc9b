package bench

import (
	"fmt"
	"net/netip"
	"strings"
)

// What the attach phase's baseline Services ask MetalLB for (-attach-baseline).
const (
	// AttachBaselinePinned: each Service pins one given free IP of the plain pool with
	// metallb.io/loadBalancerIPs, as the driver pins an attached Service to its claim's IP.
	AttachBaselinePinned = "pinned"
	// AttachBaselinePool: each Service asks for any free IP of the plain pool, as the plain
	// phase and the claims phase's baseline do.
	AttachBaselinePool = "pool"
	// AttachBaselineBoth measures both, the pinned one first.
	AttachBaselineBoth = "both"
)

// AttachBaselines are the values -attach-baseline takes.
var AttachBaselines = []string{AttachBaselinePinned, AttachBaselinePool, AttachBaselineBoth}

// Step names of the baselines: a plain batch at the phase's population, "-pinned" when its
// Services pin their IPs.
const (
	baselinePrefix = "baseline-"
	pinnedSuffix   = "-pinned"
)

// baselineName is the name of phase's baseline step.
func baselineName(phase string, pinned bool) string {
	if pinned {
		return baselinePrefix + phase + pinnedSuffix
	}
	return baselinePrefix + phase
}

// baselineOf says which phase a step name is the baseline of, and whether its Services pin
// their IPs; ok is false for a phase's own step.
func baselineOf(name string) (phase string, pinned, ok bool) {
	rest, ok := strings.CutPrefix(name, baselinePrefix)
	if !ok {
		return "", false, false
	}
	phase, pinned = strings.CutSuffix(rest, pinnedSuffix)
	return phase, pinned, true
}

// plannedStep is one step of a run, in the order the run takes them.
type plannedStep struct {
	// name is the phase's name, or its baseline's (baselineName).
	name string
	// kind is the phase whose objects the step creates (a baseline's are plain Services).
	kind string
	// round counts from 1.
	round int
	// pinned: a baseline whose Services pin their IPs.
	pinned bool
	// keep: the step's objects stay in the cluster (the last round of a phase: later phases
	// run at the population it leaves, attach attaches its claims, the final check reads
	// them); otherwise they are deleted, and the deletion waited for, before the next step.
	keep bool
}

// schedule lays out the steps of one control plane's run. Each phase runs rounds times;
// with baselines, every phase round but the plain phase's, when it runs first, is preceded by
// its baseline (for attach: the pinned one, the pool one, or both, in that order), so that
// baseline and phase alternate and the drift of a shared machine falls on both alike. Every
// round but a phase's last is deleted before the next step, so that each round of a phase
// and of its baseline starts at the same population.
func schedule(phases []string, rounds int, baselines bool, attachBaseline string) []plannedStep {
	var out []plannedStep
	for i, phase := range phases {
		for round := 1; round <= rounds; round++ {
			if baselines && (i > 0 || phase != PhasePlain) {
				for _, pinned := range baselineKinds(phase, attachBaseline) {
					out = append(out, plannedStep{name: baselineName(phase, pinned), kind: PhasePlain, round: round, pinned: pinned})
				}
			}
			out = append(out, plannedStep{name: phase, kind: phase, round: round, keep: round == rounds})
		}
	}
	return out
}

// baselineKinds are the baselines a phase gets: pinned, pool, or both (pinned first). Only
// attach pins: the claims phase's addresses are the driver's pick, as a plain Service's are
// MetalLB's.
func baselineKinds(phase, attachBaseline string) []bool {
	if phase != PhaseAttach {
		return []bool{false}
	}
	switch attachBaseline {
	case AttachBaselinePool:
		return []bool{false}
	case AttachBaselineBoth:
		return []bool{true, false}
	}
	return []bool{true}
}

// groupRun is one control plane's share of a Fresh run: a group of phases in one round.
type groupRun struct {
	phases []string
	round  int
}

// freshRuns orders the control planes of a Fresh run: round by round, each round every group
// once (plain, then claims with attach), so that the plain phase, the claims phase's baseline
// there, alternates with the claims phase as a baseline does in a run on one control plane.
func freshRuns(groups [][]string, rounds int) []groupRun {
	var out []groupRun
	for round := 1; round <= rounds; round++ {
		for _, g := range groups {
			out = append(out, groupRun{phases: g, round: round})
		}
	}
	return out
}

// stepLabel names a step of a given round where one name is not enough: the name alone in a
// run of one round (as reports and profiles have always been named), name-r<round> otherwise.
func stepLabel(name string, round, rounds int) string {
	if rounds <= 1 {
		return name
	}
	return fmt.Sprintf("%s-r%d", name, max(round, 1))
}

// objectPrefix is the name prefix of a step's objects: one per step and round, so that a
// round's objects are never confused with an earlier round's on their way out.
func objectPrefix(ps plannedStep, rounds int) string {
	var p string
	switch {
	case ps.pinned:
		p = "pin-" + ps.name[len(baselinePrefix):len(ps.name)-len(pinnedSuffix)] + "-"
	case strings.HasPrefix(ps.name, baselinePrefix):
		p = "base-" + ps.name[len(baselinePrefix):] + "-"
	case ps.name == PhaseClaims:
		p = "claim-"
	default:
		p = ps.name + "-"
	}
	if rounds > 1 {
		p += fmt.Sprintf("r%d-", ps.round)
	}
	return p
}

// freeIPs picks n addresses of pool that are not in used, from the top of the pool down (away
// from the bottom, where MetalLB starts looking for a free address for a Service that asks for
// any), in that order; fewer when the pool has no more.
func freeIPs(pool netip.Prefix, used map[netip.Addr]bool, n int) []string {
	var out []string
	for a := lastAddr(pool); len(out) < n && a.IsValid() && pool.Contains(a); a = a.Prev() {
		if !used[a] {
			out = append(out, a.String())
		}
	}
	return out
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
