package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

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
