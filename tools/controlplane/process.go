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

// Process is a running ProcessSpec.
type Process struct {
	Spec    ProcessSpec
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
	waitErr error

	mu      sync.Mutex
	stopped bool
}

// Exited is closed when the process ends.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Pid is the operating system's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

func startProcess(dir string, spec ProcessSpec) (*Process, error) {
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, spec.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = dir
	}
	cmd.Env = append(os.Environ(), spec.Env...)
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
		return nil, fmt.Errorf("starting %s (%s): %w", spec.Name, spec.Path, err)
	}
	p := &Process{Spec: spec, LogPath: logPath, cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls the spec's readiness check until it passes, the process exits, or the
// timeout passes; errors carry the tail of the process's log.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	if p.Spec.Ready == nil {
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
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s",
				p.Spec.Name, p.waitErr, p.LogPath, LogTail(p.LogPath, 30))
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready within %s (last check: %v); last lines of %s:\n%s",
				p.Spec.Name, timeout, last, p.LogPath, LogTail(p.LogPath, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop asks the process to terminate, and kills it after grace.
func (p *Process) Stop(grace time.Duration) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		<-p.exited
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Spec.Name, p.cmd.Process.Pid)
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
