package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// TestUpAndDown drives the real command the way `make sandbox-up` / `make sandbox-down` do.
func TestUpAndDown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the sandbox: %v\n%s", err, out)
	}
	dir := t.TempDir()
	up := exec.Command(bin, "up", "-dir", dir)
	out, err := up.CombinedOutput()
	t.Cleanup(func() { _ = exec.Command(bin, "down", "-dir", dir).Run() })
	if err != nil {
		t.Fatalf("sandbox up: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), filepath.Join(dir, "kubeconfig")) {
		t.Fatalf("up did not print the kubeconfig path:\n%s", out)
	}

	// A second up on the same directory refuses instead of starting a second cluster.
	if out, err := exec.Command(bin, "up", "-dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "already running") {
		t.Fatalf("second up: %v\n%s", err, out)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, want := range sandbox.Namespaces {
		ns, err := cs.CoreV1().Namespaces().Get(context.Background(), want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("namespace %s: %v", want.Name, err)
		}
		_, tenant := ns.Labels[sandbox.TenantLabel]
		if _, wantTenant := want.Labels[sandbox.TenantLabel]; tenant != wantTenant {
			t.Fatalf("namespace %s tenant label = %v, want %v", want.Name, tenant, wantTenant)
		}
	}

	killEachComponent(t, bin, dir)
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "tenant-root", metav1.GetOptions{}); err != nil {
		t.Fatalf("the cluster does not answer after its components were killed: %v", err)
	}

	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	children := childPids(t, pid)
	if len(children) < 4 {
		t.Fatalf("the supervisor runs %d processes, want at least etcd, apiserver, controller-manager and MetalLB", len(children))
	}
	if out, err := exec.Command(bin, "down", "-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("sandbox down: %v\n%s", err, out)
	}
	for _, p := range append(children, pid) {
		if syscall.Kill(p, 0) == nil {
			t.Fatalf("process %d is still running after down", p)
		}
	}
}

// killEachComponent kill -9s every component in turn, from outside as an operator would, and
// checks that the sandbox restarts it, logs the restart with the exit status, and reports it in
// `sandbox status`.
func killEachComponent(t *testing.T, bin, dir string) {
	t.Helper()
	components := []string{"metallb-iad", "address-controller", "metallb-controller", "kube-controller-manager", "kube-apiserver", "etcd"}
	for _, name := range components {
		before := componentStatus(t, dir, name)
		if before.State != controlplane.StateRunning || before.Pid == 0 {
			t.Fatalf("%s before the kill: %+v", name, before)
		}
		if err := syscall.Kill(before.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %s (pid %d): %v", name, before.Pid, err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			st := componentStatus(t, dir, name)
			if st.Pid != before.Pid && st.Restarts > before.Restarts && st.State == controlplane.StateRunning && st.Ready {
				if !strings.Contains(st.LastExit, "killed") {
					t.Fatalf("%s: last exit %q does not say it was killed", name, st.LastExit)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not restarted and ready within 2m after kill -9: %+v", name, st)
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("%s: killed pid %d, restarted and ready", name, before.Pid)
	}
	// Everything is ready again (a killed etcd or apiserver may have taken controllers down
	// with it for a while: they are restarted too).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var notReady []string
		for _, c := range readStatus(t, dir).Components {
			if !c.Ready {
				notReady = append(notReady, c.Name)
			}
		}
		if len(notReady) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 2m after the kills: %v", notReady)
		}
		time.Sleep(250 * time.Millisecond)
	}
	out, err := exec.Command(bin, "status", "-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("sandbox status: %v\n%s", err, out)
	}
	t.Logf("sandbox status:\n%s", out)
	for _, name := range components {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+\d+\s+Running\s+true\s+[1-9]\d*\s+\S+\s+killed by signal killed`).Match(out) {
			t.Errorf("sandbox status does not show %s running, ready, restarted after a kill:\n%s", name, out)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, logFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range components {
		if !regexp.MustCompile(regexp.QuoteMeta(name)+` \(pid \d+\) crashed: killed by signal killed`).Match(log) ||
			!strings.Contains(string(log), "restarted "+name+" (pid") {
			t.Errorf("the sandbox log does not record %s's crash and restart", name)
		}
	}
}

func readStatus(t *testing.T, dir string) statusReport {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, statusFile))
	if err != nil {
		t.Fatal(err)
	}
	var r statusReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func componentStatus(t *testing.T, dir, name string) controlplane.ProcessStatus {
	t.Helper()
	for _, c := range readStatus(t, dir).Components {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("sandbox status has no component %s", name)
	return controlplane.ProcessStatus{}
}

// childPids lists the direct children of pid (of any of its threads) from /proc.
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	if err != nil || len(files) == 0 {
		t.Fatalf("reading the children of %d: %v", pid, err)
	}
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			n, _ := strconv.Atoi(field)
			out = append(out, n)
		}
	}
	return out
}
