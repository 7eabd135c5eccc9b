package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"

	"github.com/cozystack/reserved-ips/tools/kindnode"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// A node from the offline image (tools/kindnode) becomes Ready with the suite's kind config,
// and every pod kubeadm starts (the control plane's static pods, kube-proxy) runs from the
// preloaded images. It runs under `make test-kind-node` (KIND_NODE_TEST=1), as it creates a
// cluster of its own.
func TestKindNodeBecomesReady(t *testing.T) {
	if os.Getenv("KIND_NODE_TEST") != "1" {
		t.Skip("SKIPPED: creates a kind cluster of its own; run it with make test-kind-node (KIND_NODE_TEST=1)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		t.Fatalf("KIND_NODE_TEST=1 needs a running Docker engine (tools/kindnode/dockerd.sh start): %v", err)
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ref, err := kindnode.Ensure(ctx, kindnode.Options{PinsDir: filepath.Join(root, "tools", "binaries"), Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node image %s ready in %s", ref, time.Since(start).Round(time.Second))
	if err := ensureKindNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KIND_EXPERIMENTAL_DOCKER_NETWORK", KindNetwork)
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	name := fmt.Sprintf("reserved-ips-node-%d", os.Getpid())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	start = time.Now()
	if err := p.Create(name, cluster.CreateWithV1Alpha4Config(KindConfig(ref)), cluster.CreateWithKubeconfigPath(kubeconfig),
		cluster.CreateWithWaitForReady(5*time.Minute), cluster.CreateWithRetain(os.Getenv("KIND_RETAIN") == "1")); err != nil {
		t.Fatalf("creating the cluster: %v (KIND_RETAIN=1 keeps the node to look at)", err)
	}
	t.Cleanup(func() {
		if err := p.Delete(name, kubeconfig); err != nil {
			t.Errorf("deleting the cluster: %v", err)
		}
	})
	t.Logf("cluster created in %s", time.Since(start).Round(time.Second))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitNodesReady(ctx, cs, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	// Every pod of kube-system but CoreDNS's (no CoreDNS image is built: see e2e/README.md)
	// runs.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Labels["k8s-app"] == "kube-dns" {
				continue
			}
			if p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			running++
		}
		return running >= 5, nil
	})
	if err != nil {
		pods, _ := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("%s: %s", p.Name, p.Status.Phase)
		}
		t.Fatalf("kube-system's pods did not all run: %v", err)
	}
}
