package controlplane

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// These tests start real control planes from the binary cache (`make binaries`).

func TestTwoControlPlanesSideBySide(t *testing.T) {
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		cps  [2]*ControlPlane
		errs [2]error
	)
	for i := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cps[i], errs[i] = Start(ctx, Options{Logf: t.Logf})
		}()
	}
	wg.Wait()
	for i, cp := range cps {
		if cp != nil {
			t.Cleanup(func() { _ = cp.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("control plane %d: %v", i, errs[i])
		}
	}
	if cps[0].Config.Host == cps[1].Config.Host {
		t.Fatalf("both control planes serve %s", cps[0].Config.Host)
	}

	for i, cp := range cps {
		v, err := cp.Client.Discovery().ServerVersion()
		if err != nil || v.GitVersion != "v1.37.2" {
			t.Fatalf("control plane %d reports version %+v (%v), want v1.37.2", i, v, err)
		}
		// Dual-stack Services: both families get a ClusterIP.
		policy := corev1.IPFamilyPolicyRequireDualStack
		svc, err := cp.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "dual"},
			Spec: corev1.ServiceSpec{IPFamilyPolicy: &policy,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("dual-stack Service: %v", err)
		}
		if len(svc.Spec.ClusterIPs) != 2 {
			t.Fatalf("ClusterIPs %v, want one per family", svc.Spec.ClusterIPs)
		}
	}

	// The audit log is never rotated under a reader's offsets (the apiserver's default rotates
	// it at 100 MB, which the 10,000-object benchmark passes).
	cp := cps[0]
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cp.Process("kube-apiserver").Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("--audit-log-maxsize=%d", AuditLogMaxSizeMB); !slices.Contains(strings.Split(string(cmdline), "\x00"), want) {
		t.Errorf("kube-apiserver runs without %s: %q", want, cmdline)
	}

	// A controller can run as its own ServiceAccount.
	path, cfg, err := cp.ServiceAccountKubeconfig(ctx, "default", "robot")
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*struct{ name string }{{"config"}, {"kubeconfig file"}} {
		use := cfg
		if c.name == "kubeconfig file" {
			use = fromFile
		}
		cs := kubernetes.NewForConfigOrDie(use)
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := review.Status.UserInfo.Username; got != "system:serviceaccount:default:robot" {
			t.Fatalf("%s authenticates as %q", c.name, got)
		}
		// And RBAC applies to it: a fresh ServiceAccount may not list Secrets.
		if _, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); err == nil {
			t.Fatalf("%s: a ServiceAccount without roles listed Secrets", c.name)
		}
	}

	// The audit log records writes by identity.
	writes, err := AuditWrites(cp.AuditLog, func(e AuditEvent) bool {
		return e.User.Username == AdminUser && e.ObjectRef != nil && e.ObjectRef.Resource == "services"
	})
	if err != nil || len(writes) != 1 || writes[0].Verb != "create" {
		t.Fatalf("audited admin Service writes: %+v (%v), want the one create", writes, err)
	}

	// Stop leaves no process and no temporary directory behind.
	var pids []int
	for _, p := range cp.Processes() {
		pids = append(pids, p.Pid())
	}
	if len(pids) != 4 {
		t.Fatalf("%d processes, want etcd, apiserver, controller-manager and MetalLB", len(pids))
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Fatalf("process %d survived Stop", pid)
		}
	}
	if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
		t.Fatalf("state dir %s survived Stop", cp.Dir)
	}
}

func TestFailedStartReportsTheComponentAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	cp, err := Start(context.Background(), Options{
		Dir:                      dir,
		WithoutControllerManager: true,
		ExtraAPIServerArgs:       []string{"--no-such-flag=1"},
		StartTimeout:             30 * time.Second,
	})
	if err == nil {
		_ = cp.Stop()
		t.Fatal("the apiserver started with an unknown flag")
	}
	msg := err.Error()
	if !strings.Contains(msg, "kube-apiserver") || !strings.Contains(msg, "no-such-flag") {
		t.Fatalf("error should name the component and carry its log tail:\n%s", msg)
	}
	if !strings.Contains(msg, "exited before it was ready") {
		t.Fatalf("a component that exits at once should be reported as such, not waited for:\n%s", msg)
	}
	for _, p := range cp.Processes() {
		t.Fatalf("%s still supervised after a failed start", p.Spec.Name)
	}
}
