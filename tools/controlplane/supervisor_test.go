package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRestartPolicyBackoff(t *testing.T) {
	p := RestartPolicy{InitialBackoff: time.Second, MaxBackoff: 4 * time.Second, ResetAfter: time.Minute}.withDefaults()
	for _, tc := range []struct {
		name      string
		prev, ran time.Duration
		want      time.Duration
	}{
		{"first restart", 0, time.Second, time.Second},
		{"quick exit doubles", time.Second, time.Second, 2 * time.Second},
		{"capped", 4 * time.Second, time.Second, 4 * time.Second},
		{"ran long enough: back to the start", 4 * time.Second, time.Minute, time.Second},
	} {
		if got := p.nextBackoff(tc.prev, tc.ran); got != tc.want {
			t.Errorf("%s: nextBackoff(%s, %s) = %s, want %s", tc.name, tc.prev, tc.ran, got, tc.want)
		}
	}
}

func TestRestartPolicyGivesUpOnRepeatedFastCrashes(t *testing.T) {
	p := RestartPolicy{GiveUpAfter: 3, GiveUpWindow: time.Minute}.withDefaults()
	t0 := time.Unix(1000, 0)
	var recent []time.Time
	var giveUp bool
	for i, at := range []time.Duration{0, 10 * time.Second, 70 * time.Second, 75 * time.Second} {
		recent, giveUp = p.recordCrash(recent, t0.Add(at))
		if giveUp {
			t.Fatalf("gave up at crash %d (+%s): crashes more than a minute apart must not add up", i, at)
		}
	}
	if _, giveUp = p.recordCrash(recent, t0.Add(80*time.Second)); !giveUp {
		t.Fatal("three crashes within a minute did not give up")
	}
}

// testPlane is a control plane without components, to supervise small processes.
func testPlane(t *testing.T, policy RestartPolicy) *ControlPlane {
	t.Helper()
	cp := &ControlPlane{Dir: t.TempDir(), opts: Options{StartTimeout: 10 * time.Second, Restart: policy, Logf: t.Logf},
		failed: make(chan error, 1)}
	t.Cleanup(func() { _ = cp.Stop() })
	return cp
}

func TestSupervisorRestartsAKilledProcessAndReportsIt(t *testing.T) {
	cp := testPlane(t, RestartPolicy{InitialBackoff: 50 * time.Millisecond})
	ctx := context.Background()
	p, err := cp.StartProcess(ctx, ProcessSpec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	first := p.Pid()
	// kill -9 from outside, as an operator (or the OOM killer) would.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st := p.Status(ctx, true)
	if st.Pid == first || st.Restarts != 1 || st.State != StateRunning || !st.Ready {
		t.Fatalf("after kill -9: %+v, want a new pid, 1 restart, Running and ready", st)
	}
	if !strings.Contains(st.LastExit, "killed") {
		t.Fatalf("last exit %q does not say it was killed", st.LastExit)
	}
	// A requested kill (the chaos test's) is restarted too.
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Restart(ctx2); err != nil {
		t.Fatal(err)
	}
	if p.Restarts() != 2 {
		t.Fatalf("restarts = %d, want 2", p.Restarts())
	}
	// A stall is not an exit: nothing is restarted, and SIGCONT resumes the same process.
	pid := p.Pid()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if p.Pid() != pid || p.Restarts() != 2 {
		t.Fatalf("a stall restarted the process (pid %d → %d, restarts %d)", pid, p.Pid(), p.Restarts())
	}
	// Stopped on request: gone for good, not restarted, not failed.
	if err := cp.StopProcess(p, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("Exited not closed after StopProcess")
	}
	if p.Failed() != nil || p.Status(ctx, false).State != StateStopped {
		t.Fatalf("after StopProcess: failed=%v status=%+v", p.Failed(), p.Status(ctx, false))
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("process %d survived StopProcess", pid)
	}
}

func TestSupervisorGivesUpOnACrashLoopAndSaysWhy(t *testing.T) {
	cp := testPlane(t, RestartPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		GiveUpAfter: 4, GiveUpWindow: time.Minute})
	ctx := context.Background()
	p, err := cp.StartProcess(ctx, ProcessSpec{Name: "crasher", Path: "/bin/sh",
		Args: []string{"-c", "echo about to fail; sleep 0.1; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cp.Failed():
		msg := err.Error()
		for _, want := range []string{"crasher", "4 times", "exit status 3", "giving up", "about to fail"} {
			if !strings.Contains(msg, want) {
				t.Errorf("give-up message lacks %q:\n%s", want, msg)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no give-up; status %+v", p.Status(ctx, false))
	}
	if st := p.Status(ctx, false); st.State != StateFailed || st.Restarts != 3 {
		t.Fatalf("status %+v, want Failed after 3 restarts", st)
	}
	<-p.Exited()
}

// A kill the control plane asked for (a test simulating a crash) is restarted after the initial
// back-off every time: it is not a crash loop, and a chaos test that kills the same process
// several times must not wait longer after each kill. The crash back-off stays where crashes
// left it, and starts over once an instance ran for ResetAfter, however it ended.
func TestSupervisorDoesNotBackOffOnRequestedKills(t *testing.T) {
	var mu sync.Mutex
	var waits []string
	cp := testPlane(t, RestartPolicy{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 10 * time.Second, ResetAfter: 3 * time.Second})
	cp.opts.Logf = func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		if _, wait, ok := strings.Cut(line, "restarting in "); ok {
			mu.Lock()
			waits = append(waits, wait)
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cp.StartProcess(ctx, ProcessSpec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	crash := func() {
		t.Helper()
		before := p.Restarts()
		// kill -9 from outside: a crash.
		if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(ctx, before+1); err != nil {
			t.Fatal(err)
		}
	}
	requestedKills := func(n int) {
		t.Helper()
		for range n {
			if err := p.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	crash()           // 20ms; the crash back-off is 20ms
	requestedKills(3) // 20ms each, the crash back-off untouched
	crash()           // 40ms: doubled from where the first crash left it
	time.Sleep(3100 * time.Millisecond)
	requestedKills(1) // 20ms; the instance ran for ResetAfter: the crash back-off starts over
	crash()           // 20ms, not 80ms
	mu.Lock()
	defer mu.Unlock()
	want := []string{"20ms", "20ms", "20ms", "20ms", "40ms", "20ms", "20ms"}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits before each restart: %v, want %v", waits, want)
	}
}
