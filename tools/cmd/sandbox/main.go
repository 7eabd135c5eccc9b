// Command sandbox runs a local Cozystack-shaped cluster: a real control plane with MetalLB and
// the project's controllers, as local processes.
//
//	sandbox run  [-dir DIR]   in the foreground until Ctrl-C (a temporary DIR by default)
//	sandbox up   -dir DIR     detached; returns once ready, kubeconfig at DIR/kubeconfig
//	sandbox down -dir DIR     stops a detached sandbox and waits until every process is gone
//	sandbox status -dir DIR   each component's pid, state, restarts and readiness
//
// A component that exits is restarted with backoff, and the restart is logged with the exit
// status; the sandbox stops only when one keeps crashing (5 times within a minute).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

const (
	pidFile    = "sandbox.pid"
	readyFile  = "sandbox.ready"
	logFile    = "sandbox.log"
	statusFile = "sandbox.status.json"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := fs.String("dir", "", "state directory (kubeconfig, logs, data)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long up waits for the sandbox to be ready")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "run":
		err = run(*dir)
	case "up":
		err = up(*dir, *timeout)
	case "down":
		err = down(*dir)
	case "status":
		err = status(os.Stdout, *dir)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: sandbox run [-dir DIR] | up -dir DIR | down -dir DIR | status -dir DIR")
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run is the supervisor: it owns every process and stops them all on SIGINT or SIGTERM.
func run(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	temporary := dir == ""
	if temporary {
		var err error
		if dir, err = os.MkdirTemp("", "reserved-ips-sandbox-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	dir, _ = filepath.Abs(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, readyFile))
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, pidFile))

	logf("starting the control plane in %s", dir)
	s, err := sandbox.Start(ctx, sandbox.Options{
		ControlPlane: controlplane.Options{Dir: dir},
		Logf:         logf,
		Examples:     true,
	})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping")
		if err := s.Stop(); err != nil {
			logf("%v", err)
		}
		_ = os.Remove(filepath.Join(dir, readyFile))
		logf("stopped")
	}()
	fmt.Print(summary(dir, s.Kubeconfig, s.Endpoints, !temporary))
	if err := os.WriteFile(filepath.Join(dir, readyFile), []byte(s.Kubeconfig+"\n"), 0o644); err != nil {
		return err
	}
	// Run until interrupted, or until the supervisor gives up on a component that keeps
	// crashing; single crashes are restarted (and logged) by the control plane.
	defer os.Remove(filepath.Join(dir, statusFile))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		writeStatus(ctx, dir, s)
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.Failed():
			if ctx.Err() != nil {
				return nil
			}
			writeStatus(ctx, dir, s)
			return fmt.Errorf("stopping the sandbox: %w", err)
		case <-tick.C:
		}
	}
}

// statusReport is what `sandbox run` writes to its status file every second and `sandbox
// status` prints.
type statusReport struct {
	Supervisor int                          `json:"supervisor"`
	Updated    time.Time                    `json:"updated"`
	Components []controlplane.ProcessStatus `json:"components"`
}

func writeStatus(ctx context.Context, dir string, s *sandbox.Sandbox) {
	data, err := json.MarshalIndent(statusReport{Supervisor: os.Getpid(), Updated: time.Now(), Components: s.Status(ctx)}, "", "  ")
	if err != nil {
		return
	}
	tmp := filepath.Join(dir, statusFile+".tmp")
	if os.WriteFile(tmp, data, 0o644) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, statusFile))
	}
}

// status prints the components of the sandbox running in dir.
func status(w io.Writer, dir string) error {
	if dir == "" {
		return errors.New("status needs -dir (the sandbox's state directory)")
	}
	dir, _ = filepath.Abs(dir)
	pid, ok := runningPid(dir)
	if !ok {
		return fmt.Errorf("no sandbox is running in %s", dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, statusFile))
	if err != nil {
		return fmt.Errorf("the sandbox (pid %d) has not reported its components yet (%v); it may still be starting: see %s",
			pid, err, filepath.Join(dir, logFile))
	}
	var r statusReport
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Join(dir, statusFile), err)
	}
	fmt.Fprintf(w, "sandbox supervisor pid %d, as of %s\n", pid, r.Updated.Format("15:04:05"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tSTATE\tREADY\tRESTARTS\tSINCE\tLAST EXIT")
	for _, c := range r.Components {
		last := c.LastExit
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%d\t%s\t%s\n", c.Name, c.Pid, c.State, c.Ready, c.Restarts,
			c.Since.Format("15:04:05"), last)
	}
	return tw.Flush()
}

func summary(dir, kubeconfig string, endpoints map[string]string, detached bool) string {
	kubectl, err := binaries.Tool("kubectl")
	if err != nil {
		kubectl = "kubectl"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe sandbox is ready.\n\n  export KUBECONFIG=%s\n  alias kubectl=%s\n\n", kubeconfig, kubectl)
	b.WriteString("What to try next:\n")
	b.WriteString("  kubectl get namespaces -L " + sandbox.TenantLabel + "\n")
	b.WriteString("  kubectl get ipclass public                       # the example class, accepted by metallb-iad\n")
	for _, a := range sandbox.Addons {
		if a.Hint != "" {
			b.WriteString("  " + a.Hint + "\n")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(endpoints)) {
		fmt.Fprintf(&b, "\n%s: %s", name, endpoints[name])
	}
	fmt.Fprintf(&b, "\nComponent logs are in %s/logs.\n", dir)
	if detached {
		fmt.Fprintf(&b, "Stop it with: make sandbox-down SANDBOX_DIR=%s\n", dir)
	} else {
		b.WriteString("Press Ctrl-C to stop it.\n")
	}
	return b.String()
}

// up starts `sandbox run` as a detached supervisor and waits for it to report ready.
func up(dir string, timeout time.Duration) error {
	if dir == "" {
		return errors.New("up needs -dir (make sandbox-up SANDBOX_DIR=DIR)")
	}
	dir, _ = filepath.Abs(dir)
	if pid, ok := runningPid(dir); ok {
		return fmt.Errorf("a sandbox is already running in %s (pid %d); stop it with: make sandbox-down SANDBOX_DIR=%s", dir, pid, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, readyFile))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(self, "run", "-dir", dir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting the sandbox in %s (log: %s)\n", dir, filepath.Join(dir, logFile))
	deadline := time.After(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	shown := 0
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the sandbox exited during start-up (%v); last lines of its log:\n%s",
				err, controlplane.LogTail(filepath.Join(dir, logFile), 30))
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("the sandbox was not ready within %s; see %s", timeout, filepath.Join(dir, logFile))
		case <-tick.C:
			shown = echoNewLines(filepath.Join(dir, logFile), shown)
			if _, err := os.Stat(filepath.Join(dir, readyFile)); err == nil {
				echoNewLines(filepath.Join(dir, logFile), shown)
				return nil
			}
		}
	}
}

// echoNewLines prints the lines of path after the first `shown` ones: progress while up waits.
func echoNewLines(path string, shown int) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return shown
	}
	lines := strings.SplitAfter(string(data), "\n")
	if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		lines = lines[:n-1] // a line still being written
	}
	for _, l := range lines[min(shown, len(lines)):] {
		fmt.Print(l)
	}
	return max(shown, len(lines))
}

func runningPid(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, false
	}
	return pid, true
}

// down asks the supervisor to stop and waits for it (and so for every component) to exit.
func down(dir string) error {
	if dir == "" {
		return errors.New("down needs -dir (make sandbox-down SANDBOX_DIR=DIR)")
	}
	dir, _ = filepath.Abs(dir)
	pid, ok := runningPid(dir)
	if !ok {
		fmt.Printf("no sandbox is running in %s\n", dir)
		return nil
	}
	fmt.Printf("stopping the sandbox in %s (pid %d)\n", dir, pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			fmt.Println("stopped")
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The components die with their supervisor (parent-death signal).
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("the sandbox did not stop within 90s and was killed; see %s", filepath.Join(dir, logFile))
}
