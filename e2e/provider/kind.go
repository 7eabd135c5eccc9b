package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// ErrUnavailable means the provider cannot run on this machine; the suite reports its tests as
// skipped, never as passed.
var ErrUnavailable = errors.New("provider unavailable")

// Kind runs the suite on a kind cluster (a Docker engine is required): the images are built
// with the project's image tool and loaded into the nodes, MetalLB is installed from the chart
// its Go module ships (the binary cache's metallb component), and both Cozystack packages are
// installed as the platform installs them: the wrapper charts of packages/ with Package values,
// under the release names and namespaces of their PackageSources. Components restart through
// pod deletion (Restart) and stop through a scale to zero (StopComponent). Features that read
// the local control plane's files (the apiserver audit log, metrics endpoints on loopback) have
// no kind counterpart here; those checks run only on the local provider (e2e/README.md).
type Kind struct{}

// MetalLB's release on a kind cluster: its chart (from the binary cache) under this name, in the
// namespace Cozystack uses, with these values.
const (
	MetalLBNamespace = controlplane.DefaultMetalLBNamespace
	MetalLBRelease   = controlplane.MetalLBRelease
)

// MetalLBValues are the values kind installs MetalLB's chart with (layer 2 only: neither the
// FRR container nor, from v0.16 where it is the default, the frr-k8s subchart).
func MetalLBValues() map[string]any {
	return map[string]any{
		"speaker": map[string]any{"frr": map[string]any{"enabled": false}},
		"frrk8s":  map[string]any{"enabled": false},
	}
}

func (Kind) Name() string { return "kind" }

type kindCluster struct {
	provider   *cluster.Provider
	name       string
	kubeconfig string
	dir        string
	config     *rest.Config
}

func (c *kindCluster) Kubeconfig() string   { return c.kubeconfig }
func (c *kindCluster) Config() *rest.Config { return c.config }
func (c *kindCluster) Stop(context.Context) error {
	defer os.RemoveAll(c.dir)
	return c.provider.Delete(c.name, c.kubeconfig)
}

func (Kind) Start(ctx context.Context) (Cluster, error) {
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		return nil, fmt.Errorf("%w: kind needs a running Docker engine (docker info: %v)", ErrUnavailable, err)
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		return nil, err
	}
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	kc := &kindCluster{provider: p, name: fmt.Sprintf("reserved-ips-e2e-%d", os.Getpid())}
	if kc.dir, err = os.MkdirTemp("", kc.name+"-"); err != nil {
		return nil, err
	}
	kc.kubeconfig = filepath.Join(kc.dir, "kubeconfig")
	cfg := &v1alpha4.Cluster{Networking: v1alpha4.Networking{IPFamily: v1alpha4.DualStackFamily}}
	if err := p.Create(kc.name, cluster.CreateWithV1Alpha4Config(cfg), cluster.CreateWithKubeconfigPath(kc.kubeconfig),
		cluster.CreateWithWaitForReady(5*time.Minute)); err != nil {
		return nil, fmt.Errorf("creating the kind cluster: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = kc.Stop(ctx)
		}
	}()
	if kc.config, err = clientcmd.BuildConfigFromFlags("", kc.kubeconfig); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(kc.config)
	if err != nil {
		return nil, err
	}
	for _, ns := range sandbox.Namespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	// MetalLB, from the chart in its Go module, into cozy-metallb as on Cozystack.
	chartDir, err := binaries.MetalLB.Path("chart")
	if err != nil {
		return nil, err
	}
	mlb, err := charts.Load(chartDir)
	if err != nil {
		return nil, err
	}
	if _, err := charts.Apply(ctx, kc.kubeconfig, MetalLBNamespace, MetalLBRelease, mlb, MetalLBValues()); err != nil {
		return nil, err
	}
	// The project's images, built for the node's platform and loaded into every node.
	refs := map[string]string{}
	nodes, err := p.ListNodes(kc.name)
	if err != nil {
		return nil, err
	}
	for _, img := range images.Images {
		built, err := images.Build(ctx, img, images.Options{Root: root, Version: "e2e", Revision: "e2e",
			Platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}})
		if err != nil {
			return nil, err
		}
		idx := built.Index
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		image, err := idx.Image(m.Manifests[0].Digest)
		if err != nil {
			return nil, err
		}
		ref := "ghcr.io/cozystack/" + img.Name + ":e2e"
		tag, _ := name.NewTag(ref)
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarball.Write(tag, image, pw)) }()
		data, err := io.ReadAll(pr)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if err := nodeutils.LoadImageArchive(n, bytes.NewReader(data)); err != nil {
				return nil, fmt.Errorf("loading %s into %s: %w", ref, n.String(), err)
			}
		}
		refs[img.Name] = ref
	}
	// Both packages as Cozystack installs them: the wrapper charts with the Package values.
	plan, err := PackageInstalls(root, filepath.Join(kc.dir, "packages"), refs)
	if err != nil {
		return nil, err
	}
	for _, in := range plan {
		ch, err := charts.Load(in.ChartDir)
		if err != nil {
			return nil, err
		}
		if _, err := charts.Apply(ctx, kc.kubeconfig, in.Namespace, in.ReleaseName, ch, in.Values); err != nil {
			return nil, fmt.Errorf("installing the %s package: %w", in.Component, err)
		}
	}
	for _, d := range [][2]string{{"cozy-metallb", "metallb-controller"}, {"cozy-address-controller", "address-controller"}, {"cozy-metallb-iad", "metallb-iad"}} {
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			dep, err := cs.AppsV1().Deployments(d[0]).Get(ctx, d[1], metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range dep.Status.Conditions {
				if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return nil, fmt.Errorf("deployment %s/%s did not become available: %w", d[0], d[1], err)
		}
	}
	ok = true
	return kc, nil
}
