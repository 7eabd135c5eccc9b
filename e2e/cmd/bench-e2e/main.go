// Command bench-e2e measures reserving and attaching addresses through this project against
// plain MetalLB on the sandbox's control plane, in one run (docs/benchmarks.md).
//
//	go run ./e2e/cmd/bench-e2e -n 1000 -rounds 3 -out bench.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cozystack/reserved-ips/e2e/bench"
	"github.com/cozystack/reserved-ips/tools/binaries"
)

func main() {
	var (
		n           = flag.Int("n", 1000, "objects per phase (and per baseline), in each round")
		phases      = flag.String("phases", strings.Join(bench.AllPhases, ","), "phases to run, in this order: plain,claims,attach (attach needs claims)")
		rounds      = flag.Int("rounds", 3, "times each phase runs, each round right after a round of its baseline; the report gives medians over the rounds with their spread (every round but a phase's last is deleted before the next step)")
		attachBase  = flag.String("attach-baseline", bench.AttachBaselinePinned, "what the attach phase's baseline Services ask MetalLB for: pinned (one free IP each, with metallb.io/loadBalancerIPs, as the driver pins), pool (any IP of the pool, as before), or both")
		out         = flag.String("out", "", "write the report as JSON to this file")
		plotFile    = flag.String("plot", "", "write the plot (PNG) to this file (default: -out with .png)")
		concurrency = flag.Int("concurrency", 16, "concurrent creates, the same in every step")
		rate        = flag.Float64("rate", 100, "creates per second at most, the same in every step (0: unlimited)")
		timeout     = flag.Duration("phase-timeout", 0, "give up on a step after this long (default 2m + 0.5s per object)")
		settle      = flag.Duration("settle-timeout", 0, "wait at most this long for the cluster to go quiet before and after each step (default: -phase-timeout); the report then counts the writes made so far")
		progress    = flag.Duration("progress", 5*time.Second, "interval of progress lines")
		ctlArgs     = flag.String("controller-args", strings.Join(bench.DefaultControllerArgs, " "), "extra flags for both controllers, separated by spaces")
		fresh       = flag.Bool("fresh", false, "run plain, and claims with attach, each on a control plane of its own, with no baselines (nothing is deleted: the way through at 10,000); each round starts both control planes anew")
		dir         = flag.String("dir", "", "keep the control plane's state (logs, audit log) in this directory (default: a temporary one, removed)")
		profileDir  = flag.String("apiserver-profile", "", "turn on kube-apiserver's profiling and write a CPU profile of it per step, taken once a third of the step's objects are done, into this directory")
		profileSecs = flag.Int("apiserver-profile-seconds", bench.DefaultProfileSeconds, "length of each kube-apiserver CPU profile")
		metallb     = flag.String("metallb", "", "MetalLB build(s) to run, comma-separated (default $METALLB_VERSION or "+binaries.DefaultMetalLBVersion+"); with two or more, the whole benchmark runs once per build, one after the other, and the report compares them (v0.16.1,v0.16.1+patched: what the patches gain)")
	)
	flag.Parse()
	// The benchmark's own client and cache log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := bench.Config{N: *n, Rounds: *rounds, AttachBaseline: *attachBase, Concurrency: *concurrency, Rate: *rate, PhaseTimeout: *timeout, SettleTimeout: *settle,
		Progress: *progress, Dir: *dir, Log: os.Stderr, ControllerArgs: strings.Fields(*ctlArgs), Fresh: *fresh, ProfileDir: *profileDir, ProfileSeconds: *profileSecs}
	cfg.Phases = list(*phases)
	builds := list(*metallb)
	if *plotFile == "" && *out != "" {
		*plotFile = strings.TrimSuffix(*out, ".json") + ".png"
	}
	var err error
	if len(builds) > 1 {
		err = compare(ctx, cfg, builds, *out, *plotFile)
	} else {
		if len(builds) == 1 {
			cfg.MetalLBVersion = builds[0]
		}
		err = single(ctx, cfg, *out, *plotFile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e:", err)
		os.Exit(1)
	}
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// single runs the benchmark once and writes its report (text on stdout, JSON and plot).
func single(ctx context.Context, cfg bench.Config, out, plotFile string) error {
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Steps) > 0 {
		write(rep, out, plotFile)
	}
	return err
}

// compare runs the benchmark once per MetalLB build: each run's report is written as it ends
// (beside -out, with the build in its name), the comparison last (to -out).
func compare(ctx context.Context, cfg bench.Config, builds []string, out, plotFile string) error {
	each := func(rep *bench.Report) {
		if len(rep.Steps) > 0 {
			suffix := "-metallb-" + strings.ReplaceAll(rep.Versions["metallb"], "+", "-")
			write(rep, withSuffix(out, suffix), withSuffix(plotFile, suffix))
		}
	}
	cmp, err := bench.RunEach(ctx, cfg, builds, each)
	if cmp != nil && len(cmp.Builds) > 0 {
		cmp.WriteText(os.Stdout)
		if out != "" {
			if werr := cmp.WriteJSON(out); werr != nil {
				fmt.Fprintln(os.Stderr, "writing the comparison:", werr)
			}
		}
	}
	return err
}

// withSuffix puts suffix before the file's extension: bench.json -> bench-metallb-v0.16.1.json.
func withSuffix(path, suffix string) string {
	if path == "" {
		return ""
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + suffix + ext
}

func write(rep *bench.Report, out, plotFile string) {
	rep.WriteText(os.Stdout)
	if out != "" {
		if err := rep.WriteJSON(out); err != nil {
			fmt.Fprintln(os.Stderr, "writing the report:", err)
		}
	}
	if plotFile != "" {
		if err := rep.WritePlot(plotFile); err != nil {
			fmt.Fprintln(os.Stderr, "writing the plot:", err)
		}
	}
}
