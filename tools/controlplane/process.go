package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessSpec describes a process the control plane runs and supervises: a component of its own
// or, through StartProcess, a controller plugged in by the sandbox or a test.
type ProcessSpec struct {
	// Name identifies the process in logs and errors; its output goes to logs/<Name>.log.
	Name string
	// Path and Args are the command line.
	Path string
	Args []string
	// Env is added to the parent's environment.
	Env []string
	// Dir is the working directory (the state dir when empty).
	Dir string
	// Ready, when set, is polled until it returns nil (or the start timeout passes).
	Ready func(ctx context.Context) error
}

// RestartPolicy says how the supervisor restarts a process that exits on its own, as the kubelet
// restarts a crashed container: after a backoff that doubles on every quick crash, and never
// again once the process has crashed GiveUpAfter times within GiveUpWindow. Exits the control
// plane asked for (Process.Signal, Process.Restart) are restarted after InitialBackoff, are not
// counted as crashes and do not grow the back-off; unless Disabled, which ends supervision at
// any exit.
type RestartPolicy struct {
	// InitialBackoff is the wait before the first restart (500ms when zero); it doubles up to
	// MaxBackoff (30s when zero) while the process keeps crashing within ResetAfter of its start.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// ResetAfter is how long an instance must run for the back-off to start again from
	// InitialBackoff, however the instance ended (30s when zero).
	ResetAfter time.Duration
	// GiveUpAfter crashes within GiveUpWindow end supervision (5 and 1m when zero). Exits the
	// control plane was asked for are not counted.
	GiveUpAfter  int
	GiveUpWindow time.Duration
	// Disabled turns restarts off: the first exit ends supervision (the process is reported
	// as failed).
	Disabled bool
}

func (p RestartPolicy) withDefaults() RestartPolicy {
	if p.InitialBackoff == 0 {
		p.InitialBackoff = 500 * time.Millisecond
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = 30 * time.Second
	}
	if p.ResetAfter == 0 {
		p.ResetAfter = 30 * time.Second
	}
	if p.GiveUpAfter == 0 {
		p.GiveUpAfter = 5
	}
	if p.GiveUpWindow == 0 {
		p.GiveUpWindow = time.Minute
	}
	return p
}

// nextBackoff is the wait before restarting a process that ran for ran after a previous wait
// of prev (zero before the first restart).
func (p RestartPolicy) nextBackoff(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran >= p.ResetAfter {
		return p.InitialBackoff
	}
	return min(2*prev, p.MaxBackoff)
}

// recordCrash adds a crash at now to the recent ones and reports whether the policy gives up:
// GiveUpAfter crashes within GiveUpWindow.
func (p RestartPolicy) recordCrash(recent []time.Time, now time.Time) ([]time.Time, bool) {
	kept := recent[:0]
	for _, t := range recent {
		if now.Sub(t) < p.GiveUpWindow {
			kept = append(kept, t)
		}
	}
	kept = append(kept, now)
	return kept, len(kept) >= p.GiveUpAfter
}

// ProcessState is where a supervised process is in its life.
type ProcessState string

const (
	// StateRunning: an instance is running (ready or not: see ProcessStatus.Ready).
	StateRunning ProcessState = "Running"
	// StateBackoff: the last instance exited; the supervisor waits before starting another.
	StateBackoff ProcessState = "BackOff"
	// StateFailed: the supervisor gave up (see ProcessStatus.LastExit and Process.Failed).
	StateFailed ProcessState = "Failed"
	// StateStopped: stopped on request.
	StateStopped ProcessState = "Stopped"
)

// ProcessStatus is a snapshot of a supervised process, as `sandbox status` shows it.
type ProcessStatus struct {
	Name     string       `json:"name"`
	Pid      int          `json:"pid"`
	State    ProcessState `json:"state"`
	Restarts int          `json:"restarts"`
	Ready    bool         `json:"ready"`
	// LastExit describes the last instance's end ("signal: killed after 2m3s"), empty before.
	LastExit string    `json:"lastExit,omitempty"`
	Since    time.Time `json:"since"`
	Log      string    `json:"log"`
}

// Process is a supervised ProcessSpec: one running instance at a time, restarted when it exits
// on its own until it is stopped or its RestartPolicy gives up.
type Process struct {
	Spec    ProcessSpec
	LogPath string

	dir    string
	policy RestartPolicy
	logf   func(format string, args ...any)
	// onFail is called once when the supervisor gives up.
	onFail func(p *Process, err error)

	mu        sync.Mutex
	inst      *instance
	restarts  int
	state     ProcessState
	lastExit  string
	since     time.Time
	requested bool // the next exit was asked for (Signal/Restart): restart it, but no crash
	crashes   []time.Time
	failed    error
	stopped   bool
	stopCh    chan struct{} // closed by Stop: wakes a supervisor waiting out a backoff
	gone      chan struct{} // closed when supervision ends (stopped or given up)
	ready     bool
}

// instance is one run of the process.
type instance struct {
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{}
	waitErr error
}

func (in *instance) pid() int { return in.cmd.Process.Pid }

// Exited is closed when supervision ends: the process was stopped, or it kept crashing and the
// supervisor gave up (see Failed). A single crash that is restarted does not close it.
func (p *Process) Exited() <-chan struct{} { return p.gone }

// Failed says why the supervisor gave up on the process; nil while it is supervised or after a
// requested stop.
func (p *Process) Failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// Pid is the operating system's process id of the current (or last) instance.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inst.pid()
}

// Restarts counts the instances started after the first.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Status is a snapshot of the process. With check, readiness is probed now (the spec's Ready,
// bounded by ctx); otherwise it is the supervisor's last knowledge.
func (p *Process) Status(ctx context.Context, check bool) ProcessStatus {
	p.mu.Lock()
	st := ProcessStatus{Name: p.Spec.Name, Pid: p.inst.pid(), State: p.state, Restarts: p.restarts,
		Ready: p.ready, LastExit: p.lastExit, Since: p.since, Log: p.LogPath}
	p.mu.Unlock()
	if check && st.State == StateRunning {
		st.Ready = p.Spec.Ready == nil || p.Spec.Ready(ctx) == nil
	} else if st.State != StateRunning {
		st.Ready = false
	}
	return st
}

func newProcess(dir string, spec ProcessSpec, policy RestartPolicy, logf func(string, ...any)) (*Process, error) {
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	p := &Process{Spec: spec, LogPath: filepath.Join(logDir, spec.Name+".log"), dir: dir,
		policy: policy.withDefaults(), logf: logf, stopCh: make(chan struct{}), gone: make(chan struct{})}
	inst, err := p.spawn()
	if err != nil {
		return nil, err
	}
	p.inst, p.state, p.since = inst, StateRunning, inst.started
	return p, nil
}

// spawn starts one instance, its output appended to the process's log.
func (p *Process) spawn() (*instance, error) {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.Spec.Path, p.Spec.Args...)
	cmd.Dir = p.Spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = p.dir
	}
	cmd.Env = append(os.Environ(), p.Spec.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a Ctrl-C in the terminal reaches only the supervisor, which
		// then stops every component in order.
		Setpgid: true,
		// If the supervisor dies without stopping us (a killed test binary), the kernel kills us.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", p.Spec.Name, p.Spec.Path, err)
	}
	in := &instance{cmd: cmd, started: time.Now(), exited: make(chan struct{})}
	go func() {
		in.waitErr = cmd.Wait()
		logFile.Close()
		close(in.exited)
	}()
	return in, nil
}

// supervise restarts the process whenever its instance exits, until Stop or the policy gives up.
// It starts once the first instance is ready: a process that cannot start at all is an error of
// Start, not something to retry.
func (p *Process) supervise() {
	var backoff time.Duration
	for {
		p.mu.Lock()
		in := p.inst
		p.mu.Unlock()
		<-in.exited

		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		now := time.Now()
		ran := now.Sub(in.started).Round(time.Millisecond)
		p.lastExit = fmt.Sprintf("%s after %s", exitStatus(in.waitErr), ran)
		p.ready, p.since = false, now
		requested := p.requested
		p.requested = false
		giveUp := p.policy.Disabled
		if !requested {
			p.crashes, giveUp = p.policy.recordCrash(p.crashes, now)
			giveUp = giveUp || p.policy.Disabled
		}
		if giveUp {
			p.state = StateFailed
			p.failed = fmt.Errorf("%s exited %d times within %s (last: %s); giving up on it; last lines of %s:\n%s",
				p.Spec.Name, len(p.crashes), p.policy.GiveUpWindow, p.lastExit, p.LogPath, LogTail(p.LogPath, 20))
			if p.policy.Disabled {
				p.failed = fmt.Errorf("%s exited (%s) and restarts are disabled; last lines of %s:\n%s",
					p.Spec.Name, p.lastExit, p.LogPath, LogTail(p.LogPath, 20))
			}
			err := p.failed
			p.mu.Unlock()
			p.logf("%s", err.Error())
			close(p.gone)
			if p.onFail != nil {
				p.onFail(p, err)
			}
			return
		}
		// A kill the control plane asked for is not a crash loop: it restarts after the initial
		// back-off and leaves the crash back-off where it was, unless the instance ran long
		// enough for it to start over.
		why, wait := "was killed on request", p.policy.InitialBackoff
		switch {
		case !requested:
			backoff = p.policy.nextBackoff(backoff, ran)
			why, wait = "crashed", backoff
		case ran >= p.policy.ResetAfter:
			backoff = 0
		}
		p.state = StateBackoff
		p.mu.Unlock()
		p.logf("%s (pid %d) %s: %s; restarting in %s", p.Spec.Name, in.pid(), why, p.lastExit, wait)

		select {
		case <-p.stopCh:
			return
		case <-time.After(wait):
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		next, err := p.spawn()
		if err != nil {
			// The binary is gone or the log cannot be opened: nothing a retry would fix.
			p.state, p.failed = StateFailed, fmt.Errorf("restarting %s: %w", p.Spec.Name, err)
			err := p.failed
			p.mu.Unlock()
			p.logf("%s", err.Error())
			close(p.gone)
			if p.onFail != nil {
				p.onFail(p, err)
			}
			return
		}
		p.inst, p.state, p.since = next, StateRunning, next.started
		p.restarts++
		n := p.restarts
		p.mu.Unlock()
		p.logf("restarted %s (pid %d, restart %d)", p.Spec.Name, next.pid(), n)
		go p.markReadyWhenReady(next)
	}
}

// markReadyWhenReady polls the readiness check of a restarted instance and records when it
// passes, so Restart can wait for it and the status shows it.
func (p *Process) markReadyWhenReady(in *instance) {
	for {
		if p.Spec.Ready == nil || func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return p.Spec.Ready(ctx) == nil
		}() {
			p.mu.Lock()
			if p.inst == in {
				p.ready = true
			}
			p.mu.Unlock()
			return
		}
		select {
		case <-in.exited:
			return
		case <-p.stopCh:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exitStatus describes how an instance ended.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
	}
	return err.Error()
}

// Signal sends sig to the running instance. The control plane asked for this: when the
// instance exits because of it, it is restarted after the initial back-off, not counted as a
// crash and without growing the back-off. Use it to simulate crashes (SIGKILL) and stalls
// (SIGSTOP, then SIGCONT). A signal other than SIGSTOP and SIGCONT that the instance survives
// marks its next exit as requested too.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.state != StateRunning {
		return fmt.Errorf("%s is not running (%s)", p.Spec.Name, p.state)
	}
	// Through the instance's os.Process, not its pid: one that has exited and been waited for is
	// an error, never another process that got the pid. The exit is marked as requested only
	// once the signal is sent: one that fails leaves a crash a crash.
	if err := p.inst.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Spec.Name, p.inst.pid(), err)
	}
	if sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		p.requested = true
	}
	return nil
}

// Restart kills the running instance (SIGKILL, as a crash would) and waits until the supervisor
// has started a new one and it is ready.
func (p *Process) Restart(ctx context.Context) error {
	p.mu.Lock()
	before := p.restarts
	p.mu.Unlock()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.WaitReady(ctx, before+1)
}

// WaitReady waits until at least restarts restarts happened and the current instance is ready.
func (p *Process) WaitReady(ctx context.Context, restarts int) error {
	for {
		p.mu.Lock()
		ok := p.restarts >= restarts && p.state == StateRunning && p.ready
		failed, stopped := p.failed, p.stopped
		p.mu.Unlock()
		switch {
		case ok:
			return nil
		case failed != nil:
			return failed
		case stopped:
			return fmt.Errorf("%s was stopped", p.Spec.Name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be ready again: %w", p.Spec.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady polls the spec's readiness check until it passes, the first instance exits, or the
// timeout passes; errors carry the tail of the process's log.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	in := p.inst
	if p.Spec.Ready == nil {
		p.mu.Lock()
		p.ready = true
		p.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		check, cancelCheck := context.WithTimeout(ctx, 5*time.Second)
		last = p.Spec.Ready(check)
		cancelCheck()
		if last == nil {
			p.mu.Lock()
			p.ready = true
			p.mu.Unlock()
			return nil
		}
		select {
		case <-in.exited:
			return fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s",
				p.Spec.Name, in.waitErr, p.LogPath, LogTail(p.LogPath, 30))
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready within %s (last check: %v); last lines of %s:\n%s",
				p.Spec.Name, timeout, last, p.LogPath, LogTail(p.LogPath, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop ends supervision, asks the running instance to terminate, and kills it after grace.
func (p *Process) Stop(grace time.Duration) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.inst.exited
		return nil
	}
	p.stopped = true
	close(p.stopCh)
	in := p.inst
	wasFailed := p.state == StateFailed
	p.state = StateStopped
	p.ready = false
	p.mu.Unlock()
	if !wasFailed {
		defer close(p.gone)
	}
	select {
	case <-in.exited:
		return nil
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	// A stalled (SIGSTOPped) instance handles SIGTERM only once continued.
	_ = in.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-in.exited:
		return nil
	case <-time.After(grace):
	}
	_ = in.cmd.Process.Kill()
	select {
	case <-in.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Spec.Name, in.pid())
	}
}

// LogTail returns the last n lines of a log file.
func LogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// HTTPCheck returns a readiness check that passes when url answers 200 (TLS not verified:
// these are health endpoints on loopback with self-signed certificates).
func HTTPCheck(url string, client *http.Client) func(ctx context.Context) error {
	if client == nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return nil
	}
}

var errStopped = errors.New("control plane stopped")
