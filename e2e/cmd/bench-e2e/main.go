// Command bench-e2e measures reserving and attaching addresses through this project against
// plain MetalLB on the sandbox's control plane, in one run (docs/benchmarks.md).
//
//	go run ./e2e/cmd/bench-e2e -n 1000 -out bench.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cozystack/reserved-ips/e2e/bench"
)

func main() {
	var (
		n           = flag.Int("n", 1000, "objects per phase (and per baseline)")
		phases      = flag.String("phases", strings.Join(bench.AllPhases, ","), "phases to run, in this order: plain,claims,attach (attach needs claims)")
		out         = flag.String("out", "", "write the report as JSON to this file")
		plotFile    = flag.String("plot", "", "write the plot (PNG) to this file (default: -out with .png)")
		concurrency = flag.Int("concurrency", 16, "concurrent creates, the same in every step")
		rate        = flag.Float64("rate", 100, "creates per second at most, the same in every step (0: unlimited)")
		timeout     = flag.Duration("phase-timeout", 0, "give up on a step after this long (default 2m + 0.5s per object)")
		settle      = flag.Duration("settle-timeout", 0, "wait at most this long for the cluster to go quiet before and after each step (default: -phase-timeout); the report then counts the writes made so far")
		progress    = flag.Duration("progress", 5*time.Second, "interval of progress lines")
		ctlArgs     = flag.String("controller-args", strings.Join(bench.DefaultControllerArgs, " "), "extra flags for both controllers, separated by spaces")
		fresh       = flag.Bool("fresh", false, "run plain, and claims with attach, each on a control plane of its own, with no baselines (nothing is deleted: the way through at 10,000)")
		dir         = flag.String("dir", "", "keep the control plane's state (logs, audit log) in this directory (default: a temporary one, removed)")
		profileDir  = flag.String("apiserver-profile", "", "turn on kube-apiserver's profiling and write a CPU profile of it per step, taken once a third of the step's objects are done, into this directory")
		profileSecs = flag.Int("apiserver-profile-seconds", bench.DefaultProfileSeconds, "length of each kube-apiserver CPU profile")
	)
	flag.Parse()
	// The benchmark's own client and cache log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := bench.Config{N: *n, Concurrency: *concurrency, Rate: *rate, PhaseTimeout: *timeout, SettleTimeout: *settle,
		Progress: *progress, Dir: *dir, Log: os.Stderr, ControllerArgs: strings.Fields(*ctlArgs), Fresh: *fresh, ProfileDir: *profileDir, ProfileSeconds: *profileSecs}
	for _, p := range strings.Split(*phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Phases = append(cfg.Phases, p)
		}
	}
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Steps) > 0 {
		rep.WriteText(os.Stdout)
		if *out != "" {
			if werr := rep.WriteJSON(*out); werr != nil {
				fmt.Fprintln(os.Stderr, "writing the report:", werr)
			}
			if *plotFile == "" {
				*plotFile = strings.TrimSuffix(*out, ".json") + ".png"
			}
		}
		if *plotFile != "" {
			if werr := rep.WritePlot(*plotFile); werr != nil {
				fmt.Fprintln(os.Stderr, "writing the plot:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e:", err)
		os.Exit(1)
	}
}
