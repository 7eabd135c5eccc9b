package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
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
	"github.com/cozystack/reserved-ips/tools/kindnode"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// ErrUnavailable means the provider cannot run on this machine; the suite reports its tests as
// skipped, never as passed.
var ErrUnavailable = errors.New("provider unavailable")

// Kind runs the suite on a kind cluster (a Docker engine is required): the images are built
// with the project's image tool and loaded into the nodes, MetalLB is installed from the chart
// its Go module ships (the binary cache's metallb component), and both Cozystack packages are
// installed as the platform installs them: the wrapper charts of packages/ with Package values,
// under the release names and namespaces of their PackageSources, as Cozystack's operator and Flux's
// helm-controller install them (kindpackages.go). Components restart through
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
	// packages are the Cozystack packages as installed, for UpgradePackage.
	packages []PackageInstall
}

// PackageUpgrader is a cluster that runs the components from their Cozystack packages (kind's):
// a test changes a component's chart values by upgrading its package release, keeping the
// Package values it was installed with.
type PackageUpgrader interface {
	UpgradePackage(ctx context.Context, component string, values map[string]any) error
}

// PackageManager is a cluster whose components are Cozystack packages that a test may upgrade to
// another chart, remove and install again, as the operator and Flux would.
type PackageManager interface {
	PackageUpgrader
	// ApplyPackage installs or upgrades the component's package from the wrapper chart in
	// chartDir ("" for the one it was first installed from), with values merged over its Package
	// values.
	ApplyPackage(ctx context.Context, component, chartDir string, values map[string]any) error
	// RemovePackage uninstalls the component's package and waits until its objects are gone.
	RemovePackage(ctx context.Context, component string) error
	// Packages are the packages as first installed.
	Packages() []PackageInstall
}

// UpgradePackage applies the component's package again with values merged over the Package values
// it was installed with (the image, the pull policy).
func (c *kindCluster) UpgradePackage(ctx context.Context, component string, values map[string]any) error {
	return c.ApplyPackage(ctx, component, "", values)
}

func (c *kindCluster) ApplyPackage(ctx context.Context, component, chartDir string, values map[string]any) error {
	in, err := c.packageOf(component)
	if err != nil {
		return err
	}
	if chartDir != "" {
		in.ChartDir = chartDir
	}
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	return installPackage(ctx, cs, c.kubeconfig, in, values)
}

func (c *kindCluster) RemovePackage(_ context.Context, component string) error {
	in, err := c.packageOf(component)
	if err != nil {
		return err
	}
	return charts.UninstallWith(c.kubeconfig, in.Namespace, in.ReleaseName, true)
}

func (c *kindCluster) Packages() []PackageInstall { return slices.Clone(c.packages) }

func (c *kindCluster) packageOf(component string) (PackageInstall, error) {
	for _, in := range c.packages {
		if in.Component == component {
			return in, nil
		}
	}
	return PackageInstall{}, fmt.Errorf("no package %q installed", component)
}

func (c *kindCluster) Kubeconfig() string   { return c.kubeconfig }
func (c *kindCluster) Config() *rest.Config { return c.config }
func (c *kindCluster) Stop(context.Context) error {
	defer os.RemoveAll(c.dir)
	return c.provider.Delete(c.name, c.kubeconfig)
}

// KindNetwork is the Docker network the kind nodes join (kind's KIND_EXPERIMENTAL_DOCKER_NETWORK):
// created here in 198.18.0.0/15 and 2001:db8::/32, so that no container network of the suite
// takes a private range, as kind's own "kind" network would.
const KindNetwork = "reserved-ips-kind"

func ensureKindNetwork(ctx context.Context) error {
	if exec.CommandContext(ctx, "docker", "network", "inspect", KindNetwork).Run() != nil {
		out, err := exec.CommandContext(ctx, "docker", "network", "create", "--driver", "bridge",
			"--subnet", kindnode.Network.Subnet, "--gateway", kindnode.Network.Gateway,
			"--ipv6", "--subnet", kindnode.Network.IPv6Subnet,
			"-o", "com.docker.network.bridge.enable_ip_masquerade=true",
			"-o", "com.docker.network.driver.mtu=1500", KindNetwork).CombinedOutput()
		if err != nil {
			return fmt.Errorf("creating the docker network %s: %w: %s", KindNetwork, err, out)
		}
	}
	return checkKindBridge(ctx)
}

// checkKindBridge makes sure the host reaches the kind network through the network's own bridge.
// A bridge that an earlier Docker engine left behind (its data directory gone, the kernel device
// not) can hold the same subnet; the kernel may then route the nodes' addresses to that dead
// bridge, and the nodes, MetalLB's announcements and the traffic test are out of the host's
// reach with nothing saying why. tools/kindnode/dockerd.sh drops such bridges when it starts an
// engine; this catches them on an engine started otherwise, and says what else it finds: the
// network made earlier with other subnets, a bridge in use holding the subnet, or a host whose
// route to the nodes goes elsewhere. Without the ip command it cannot look at the route.
func checkKindBridge(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "-f",
		`{{.Id}}|{{index .Options "com.docker.network.bridge.name"}}|{{range .IPAM.Config}}{{.Subnet}} {{end}}`, KindNetwork).Output()
	if err != nil {
		return fmt.Errorf("inspecting the docker network %s: %w%s", KindNetwork, err, stderrOf(err))
	}
	want, subnets := networkBridge(string(out))
	if !slices.Contains(subnets, kindnode.Network.Subnet) || !slices.Contains(subnets, kindnode.Network.IPv6Subnet) {
		return fmt.Errorf("the docker network %s has the subnets %q, not %s and %s: it was made some other way; "+
			"remove it (docker network rm %s) and the suite makes it again",
			KindNetwork, subnets, kindnode.Network.Subnet, kindnode.Network.IPv6Subnet, KindNetwork)
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil
	}
	node := netip.MustParseAddr(kindnode.Network.Gateway).Next() // the first node's address
	out, err = exec.CommandContext(ctx, ip, "-o", "route", "get", node.String()).Output()
	if err != nil {
		return fmt.Errorf("looking up the host's route to %s: %w%s", node, err, stderrOf(err))
	}
	r := parseRoute(string(out))
	if r.dev == want {
		return nil
	}
	if !r.local && !r.via {
		if ports, ok := bridgePorts(r.dev); ok && len(ports) == 0 {
			return fmt.Errorf("the host routes the kind network %s (%s) through the bridge %s, which has no ports, "+
				"not through the network's own bridge %s: another bridge holds the same subnet, most likely one left by a "+
				"Docker engine that is gone. If another engine or tool still runs with it, remove its network there "+
				"(docker network rm) or stop it; otherwise delete the bridge (ip link delete %s), or start the engine "+
				"with tools/kindnode/dockerd.sh start, which drops such bridges",
				KindNetwork, kindnode.Network.Subnet, r.dev, want, r.dev)
		} else if ok {
			return fmt.Errorf("the host routes the kind network %s (%s) through the bridge %s, not through the network's "+
				"own bridge %s: that bridge is in use (ports %s) and holds the same subnet, another engine's network or "+
				"another tool's; free %s on this host",
				KindNetwork, kindnode.Network.Subnet, r.dev, want, strings.Join(ports, ", "), kindnode.Network.Subnet)
		}
	}
	return fmt.Errorf("the host's route to the first kind node's address %s is %q, not through the network's bridge %s: "+
		"the nodes are out of this host's reach. Either the Docker engine runs in another network namespace "+
		"(rootless, remote through DOCKER_HOST, Docker Desktop), which the kind suite cannot use, "+
		"or another interface on this host holds %s (a VPN's, for instance)",
		node, strings.TrimSpace(string(out)), want, kindnode.Network.Subnet)
}

// stderrOf is ": " and what a failed command wrote to its standard error, if anything.
func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(bytes.TrimSpace(exit.Stderr)) > 0 {
		return ": " + string(bytes.TrimSpace(exit.Stderr))
	}
	return ""
}

// networkBridge reads "ID|NAME|SUBNET ..." (a Docker bridge network's id, its
// com.docker.network.bridge.name option, empty or "<no value>" when unset, and its subnets): the
// network's Linux bridge, the name when set, else br- and the id's first twelve characters as
// Docker names it, and its subnets.
func networkBridge(inspect string) (bridge string, subnets []string) {
	parts := strings.SplitN(strings.TrimSpace(inspect), "|", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	id, name := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
	subnets = strings.Fields(parts[2])
	if name != "" && name != "<no value>" {
		return name, subnets
	}
	return "br-" + id[:min(12, len(id))], subnets
}

// route is what ip -o route get says of an address: the device, whether through a gateway
// (via), and whether the address is the host's own (local).
type route struct {
	dev        string
	via, local bool
}

func parseRoute(out string) route {
	var r route
	fields := strings.Fields(out)
	r.local = len(fields) > 0 && fields[0] == "local"
	for i := 0; i+1 < len(fields); i++ {
		switch fields[i] {
		case "dev":
			r.dev = fields[i+1]
		case "via":
			r.via = true
		}
	}
	return r
}

// sysClassNet is where the kernel lists network devices: a bridge has a brif directory there,
// with an entry per port.
var sysClassNet = "/sys/class/net"

// bridgePorts lists a bridge's ports; ok is false when dev is not a bridge.
func bridgePorts(dev string) (ports []string, ok bool) {
	if dev == "" {
		return nil, false
	}
	entries, err := os.ReadDir(filepath.Join(sysClassNet, dev, "brif"))
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		ports = append(ports, e.Name())
	}
	return ports, true
}

// KindConfig is the suite's cluster: one node from the offline image, dual-stack, with pod and
// Service ranges in 198.18.0.0/15 and 2001:db8::/32, the node image's static CNI (no kindnet
// image is built), and kubelet allowed to run on a cgroup v1 host (Kubernetes v1.35 and later
// refuse it unless failCgroupV1 is false).
func KindConfig(nodeImage string) *v1alpha4.Cluster {
	return &v1alpha4.Cluster{
		Nodes: []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole, Image: nodeImage}},
		Networking: v1alpha4.Networking{
			IPFamily:          v1alpha4.DualStackFamily,
			PodSubnet:         kindnode.Network.PodSubnet,
			ServiceSubnet:     kindnode.Network.ServiceSubnet,
			DisableDefaultCNI: true,
		},
		KubeadmConfigPatches: []string{`kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
failCgroupV1: false
`},
	}
}

// waitNodesReady waits until every node reports Ready.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) == 0 {
			last = fmt.Sprint(err)
			return false, nil
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					last = fmt.Sprintf("node %s: %s %s", n.Name, c.Reason, c.Message)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the kind nodes did not become Ready (%s): %w", last, err)
	}
	return nil
}

// ImageLoader is a cluster whose nodes take images directly (kind's), with no registry.
type ImageLoader interface {
	LoadImage(ref string, image v1.Image) error
}

// LoadImage loads image under ref into every node's containerd.
func (c *kindCluster) LoadImage(ref string, image v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, image, &buf); err != nil {
		return err
	}
	nodes, err := c.provider.ListNodes(c.name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := nodeutils.LoadImageArchive(n, bytes.NewReader(buf.Bytes())); err != nil {
			return fmt.Errorf("loading %s into %s: %w", ref, n.String(), err)
		}
	}
	return nil
}

func (Kind) Start(ctx context.Context) (Cluster, error) {
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		return nil, fmt.Errorf("%w: kind needs a running Docker engine (docker info: %v)", ErrUnavailable, err)
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		return nil, err
	}
	// The offline node image: built here (tools/kindnode) the first time, then cached.
	nodeImage, err := kindnode.Ensure(ctx, kindnode.Options{PinsDir: filepath.Join(root, "tools", "binaries"), Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	if err := ensureKindNetwork(ctx); err != nil {
		return nil, err
	}
	os.Setenv("KIND_EXPERIMENTAL_DOCKER_NETWORK", KindNetwork)
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	// A run stopped before its teardown (interrupted, or past go test's -timeout) leaves its
	// cluster behind: removed here once the process that made it is gone.
	ns := pidNamespace()
	if names, err := p.List(); err == nil {
		for _, name := range StaleClusters(names, ns, processRuns) {
			fmt.Fprintf(os.Stderr, "deleting the kind cluster %s, left by a run that stopped before its teardown\n", name)
			deleteStaleCluster(p, name)
		}
	}
	kc := &kindCluster{provider: p, name: fmt.Sprintf("%s%s-%d", clusterPrefix, ns, os.Getpid())}
	if kc.dir, err = os.MkdirTemp("", kc.name+"-"); err != nil {
		return nil, err
	}
	kc.kubeconfig = filepath.Join(kc.dir, "kubeconfig")
	cfg := KindConfig(nodeImage)
	if err := p.Create(kc.name, cluster.CreateWithV1Alpha4Config(cfg), cluster.CreateWithKubeconfigPath(kc.kubeconfig),
		cluster.CreateWithWaitForReady(5*time.Minute)); err != nil {
		return nil, fmt.Errorf("creating the kind cluster: %w", err)
	}
	ok := false
	defer func() {
		if !ok && os.Getenv("KIND_RETAIN") != "1" { // KIND_RETAIN=1 keeps a cluster that failed to set up
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
	// kind only warns when its wait for Ready times out.
	if err := waitNodesReady(ctx, cs, 3*time.Minute); err != nil {
		return nil, err
	}
	// The namespaces: the tenants' as the sandbox has them; MetalLB's as the operator applies it
	// for the cozystack.metallb package (privileged, for the speaker); the project's when their
	// packages are installed below.
	for _, ns := range sandbox.Namespaces {
		if strings.HasPrefix(ns.Name, "cozy-") {
			continue
		}
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if _, err := cs.CoreV1().Namespaces().Apply(ctx, OperatorNamespace(MetalLBNamespace, true),
		metav1.ApplyOptions{FieldManager: OperatorFieldManager, Force: true}); err != nil {
		return nil, err
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
		if err := kc.LoadImage(ref, image); err != nil {
			return nil, err
		}
		refs[img.Name] = ref
	}
	// Both packages as Cozystack installs them: the wrapper charts with the Package values.
	plan, err := PackageInstalls(root, filepath.Join(kc.dir, "packages"), refs)
	if err != nil {
		return nil, err
	}
	kc.packages = plan
	for _, in := range plan {
		if err := installPackage(ctx, cs, kc.kubeconfig, in, nil); err != nil {
			return nil, fmt.Errorf("installing: %w", err)
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
	// MetalLB's validating webhook answers some time after its Deployment is available (its
	// certificate, the Service's endpoints, kube-proxy's rules): wait until a pool passes it,
	// with a server-side dry run that stores nothing.
	dyn, err := dynamic.NewForConfig(kc.config)
	if err != nil {
		return nil, err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "e2e-webhook-probe", "namespace": MetalLBNamespace},
		"spec":     map[string]any{"addresses": []any{"198.51.100.255/32"}, "autoAssign": false},
	}}
	var last error
	pools := dyn.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}).Namespace(MetalLBNamespace)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = pools.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	}); err != nil {
		return nil, fmt.Errorf("MetalLB's webhook did not answer: %v: %w", last, err)
	}
	ok = true
	return kc, nil
}

// clusterPrefix names the suite's kind clusters, followed by the run's pid namespace (pidNamespace)
// and its pid: a run only ever judges the clusters of runs whose pids it can see.
const clusterPrefix = "reserved-ips-e2e-"

// pidNamespace identifies this process's pid namespace (the inode of /proc/self/ns/pid), or
// "unknown" when it cannot be read, then no run is ever judged stale.
func pidNamespace() string {
	link, err := os.Readlink("/proc/self/ns/pid")
	if digits := strings.Trim(strings.TrimPrefix(link, "pid:"), "[]"); err == nil && digits != "" && strings.Trim(digits, "0123456789") == "" {
		return digits
	}
	return "unknown"
}

// StaleClusters returns the suite's clusters among names made by a run in pid namespace ns that no
// longer runs (runs says whether a pid does). Other clusters, those of runs in other namespaces
// (another container sharing the Docker engine) and names of another shape are never returned.
func StaleClusters(names []string, ns string, runs func(pid int) bool) []string {
	if ns == "unknown" {
		return nil
	}
	var stale []string
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, clusterPrefix+ns+"-")
		if !ok {
			continue
		}
		if pid, err := strconv.Atoi(rest); err == nil && pid > 0 && !runs(pid) {
			stale = append(stale, name)
		}
	}
	return stale
}

// deleteStaleCluster deletes a cluster a stopped run left, and its kubeconfig's directory (the
// run's os.MkdirTemp(name+"-")), touching no other kubeconfig.
func deleteStaleCluster(p *cluster.Provider, name string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), name+"-*"))
	kubeconfig := filepath.Join(os.TempDir(), name+".stale-kubeconfig")
	if len(dirs) > 0 {
		kubeconfig = filepath.Join(dirs[0], "kubeconfig")
	}
	if err := p.Delete(name, kubeconfig); err != nil {
		fmt.Fprintf(os.Stderr, "deleting %s: %v\n", name, err)
	}
	_ = os.Remove(filepath.Join(os.TempDir(), name+".stale-kubeconfig"))
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}

// processRuns says whether a process with this pid exists (one of another user's counts).
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
