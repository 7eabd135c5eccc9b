// Package kindnode builds the offline kind node image: a Debian rootfs made with debootstrap,
// with kind's node files (from the kind Go module), Kubernetes' node and control-plane commands
// built from Go modules (tools/binaries), and every image a cluster needs at start preloaded
// into the node's containerd (the control plane's, kube-proxy's, pause, MetalLB's controller
// and speaker), each assembled with go-containerregistry. Nothing is pulled from an image
// registry.
//
// The build is content-keyed: the key covers the versions of Kubernetes, etcd and MetalLB, the
// Debian suite and the package set with the versions apt offers for it, and Format. The parts
// (rootfs.tar and the image tarballs) are cached under the binary cache
// ($XDG_CACHE_HOME/reserved-ips/bin/kind-node/<key>-linux-<arch>), and the image is tagged
// reserved-ips/kind-node:<key> in the Docker engine.
package kindnode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// Format is the layout of the image this code builds; bump it when the layout changes so that
// cached images are rebuilt.
const Format = "3"

// Suite is the Debian release of the node's rootfs.
const Suite = "bookworm"

// Packages are the Debian packages of the node's rootfs (debootstrap --variant=minbase adds the
// essential ones): what kind's base image installs, with Debian's containerd, runc and CNI
// plugins in place of kind's own builds.
var Packages = []string{
	"bash", "ca-certificates", "conntrack", "containerd", "containernetworking-plugins", "dbus",
	"ebtables", "ethtool", "iproute2", "iptables", "kmod", "libseccomp2", "mount", "nftables",
	"procps", "runc", "socat", "systemd", "systemd-sysv", "util-linux",
}

// Network is where the kind suite's containers live, all in 198.18.0.0/15 (the benchmarking
// range), never in a private range.
var Network = struct {
	// Subnet, Gateway and IPv6Subnet are the kind Docker network's.
	Subnet, Gateway, IPv6Subnet string
	// PodSubnet and ServiceSubnet are the cluster's (both families, comma-separated as kubeadm
	// takes them); NodePodRange and NodePodRange6 are the single node's pod ranges, which the
	// node's CNI configuration serves (the first of each family the controller-manager assigns).
	PodSubnet, ServiceSubnet, NodePodRange, NodePodRange6 string
}{
	Subnet: "198.18.1.0/24", Gateway: "198.18.1.1", IPv6Subnet: "2001:db8:1::/64",
	PodSubnet: "198.19.0.0/17,2001:db8:2::/56", ServiceSubnet: "198.19.128.0/20,2001:db8:3::/112",
	NodePodRange: "198.19.0.0/24", NodePodRange6: "2001:db8:2::/64",
}

// Options configure a build.
type Options struct {
	// PinsDir holds the pin modules (tools/binaries in the checkout).
	PinsDir string
	// Mirror is the Debian mirror debootstrap installs from ($DEBIAN_MIRROR, else Debian's).
	Mirror string
	// Progress receives one line per step.
	Progress io.Writer
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "[kind-node] "+format+"\n", args...)
	}
}

func (o Options) mirror() string {
	if o.Mirror != "" {
		return o.Mirror
	}
	if m := os.Getenv("DEBIAN_MIRROR"); m != "" {
		return m
	}
	return "http://deb.debian.org/debian"
}

// Key is the content key of the node image: it changes with the versions of Kubernetes, etcd
// and MetalLB, the Debian suite, the package set and the versions apt offers for it (when apt is
// there to ask), and Format; nothing else.
func Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\nkubernetes %s\netcd %s\nmetallb %s\nsuite %s\n", Format,
		binaries.KubernetesVersion, binaries.EtcdVersion, binaries.MetalLBNodeAt(binaries.MetalLBVersion).Version+binaries.MetalLBNodeAt(binaries.MetalLBVersion).PatchesDigest(), Suite)
	for _, p := range Packages {
		fmt.Fprintf(h, "package %s %s\n", p, candidates[p])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// candidates are the versions apt offers for Packages, read once.
var candidates = aptCandidates(Packages)

func aptCandidates(pkgs []string) map[string]string {
	out, err := exec.Command("apt-cache", append([]string{"policy"}, pkgs...)...).Output()
	if err != nil {
		return nil
	}
	return parsePolicy(string(out))
}

// parsePolicy reads the candidate version of each package from apt-cache policy's output.
func parsePolicy(out string) map[string]string {
	m := map[string]string{}
	pkg := ""
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":") {
			pkg = strings.TrimSuffix(line, ":")
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Candidate:"); ok && pkg != "" {
			m[pkg] = strings.TrimSpace(v)
		}
	}
	return m
}

// Ref is the node image's name in the Docker engine.
func Ref() string { return "reserved-ips/kind-node:" + Key() }

// Dir is the cache directory of the node image's parts.
func Dir() (string, error) {
	root, err := binaries.CacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "kind-node", Key()+"-linux-"+runtime.GOARCH), nil
}

const doneMarker = ".complete"

// Ensure makes the node image present in the Docker engine and returns its reference: from the
// engine when it has it, else assembled from the cached parts, else built from scratch.
func Ensure(ctx context.Context, opts Options) (string, error) {
	ref := Ref()
	if exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil {
		opts.say("%s is in the Docker engine", ref)
		return ref, nil
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	unlock, err := lock(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, doneMarker)); err != nil {
		start := time.Now()
		if err := buildParts(ctx, opts, dir); err != nil {
			return "", fmt.Errorf("building the kind node image's parts: %w", err)
		}
		opts.say("parts built in %s: %s", time.Since(start).Round(time.Second), dir)
	}
	start := time.Now()
	if err := assemble(ctx, opts, dir, ref); err != nil {
		return "", fmt.Errorf("assembling the kind node image: %w", err)
	}
	opts.say("%s assembled in %s", ref, time.Since(start).Round(time.Second))
	return ref, nil
}

func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// buildParts writes rootfs.tar and images/*.tar into dir (renamed into place when complete).
func buildParts(ctx context.Context, opts Options, dir string) error {
	tmp := fmt.Sprintf("%s.partial-%d", dir, os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// debootstrap waits mostly on the mirror and the disk, the binaries' builds on the CPU: they
	// run side by side.
	rootfs := filepath.Join(tmp, "rootfs")
	strapped := make(chan error, 1)
	go func() { strapped <- debootstrap(ctx, opts, rootfs) }()
	b := &binaries.Builder{PinsDir: opts.PinsDir, Progress: opts.Progress}
	for _, c := range binaries.Node {
		if err := b.Ensure(c); err != nil {
			// debootstrap is left to finish (killing it would leave its mounts in rootfs).
			if serr := <-strapped; serr != nil {
				opts.say("debootstrap: %v", serr)
			}
			return err
		}
	}
	if err := <-strapped; err != nil {
		return err
	}
	if err := customize(ctx, opts, rootfs); err != nil {
		return fmt.Errorf("installing kind's node files: %w", err)
	}
	opts.say("packing rootfs.tar")
	if out, err := exec.CommandContext(ctx, "tar", "-C", rootfs, "--numeric-owner", "--xattrs", "-cf",
		filepath.Join(tmp, "rootfs.tar"), ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, out)
	}
	if err := os.RemoveAll(rootfs); err != nil {
		return err
	}
	if err := buildImages(ctx, opts, filepath.Join(tmp, "rootfs.tar"), filepath.Join(tmp, "images")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, doneMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func debootstrap(ctx context.Context, opts Options, rootfs string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("debootstrap is missing: apt-get install -y debootstrap")
	}
	opts.say("debootstrap %s (%d packages) from %s", Suite, len(Packages), opts.mirror())
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(Packages, ","),
		Suite, rootfs, opts.mirror())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap: %w\n%s", err, tail(out.String(), 30))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kindFiles are the files of kind's base image (images/base/files in the kind module) the node
// takes as they are; the containerd unit and the fuse-overlayfs snapshotter are Debian's and
// left out.
var kindFiles = map[string]os.FileMode{
	"usr/local/bin/entrypoint":                             0o755,
	"kind/bin/mount-product-files.sh":                      0o755,
	"kind/bin/undo-mount-hacks.sh":                         0o755,
	"kind/bin/create-kubelet-cgroup-v2.sh":                 0o755,
	"etc/systemd/system/kubelet.service":                   0o644,
	"etc/systemd/system/kubelet.slice":                     0o644,
	"etc/systemd/system/undo-mount-hacks.service":          0o644,
	"etc/systemd/system/kubelet.service.d/10-kubeadm.conf": 0o644,
	"etc/systemd/system/kubelet.service.d/11-kind.conf":    0o644,
	"etc/default/kubelet":                                  0o644,
	"etc/sysctl.d/10-network-security.conf":                0o644,
	"etc/sysctl.d/10-network-magic.conf":                   0o644,
}

// kindModuleDir is the kind module's source in the module cache (the version e2e/go.mod
// requires).
func kindModuleDir(ctx context.Context, pins string) (string, error) {
	e2e := filepath.Join(pins, "..", "..", "e2e")
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/kind")
	cmd.Dir = e2e
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the kind module from %s: %w", e2e, err)
	}
	var info struct{ Dir string }
	if err := yaml.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("locating the kind module: %v", err)
	}
	return info.Dir, nil
}

func customize(ctx context.Context, opts Options, rootfs string) error {
	kind, err := kindModuleDir(ctx, opts.PinsDir)
	if err != nil {
		return err
	}
	write := func(rel string, data []byte, mode os.FileMode) error {
		p := filepath.Join(rootfs, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return err
		}
		return os.Chmod(p, mode)
	}
	for rel, mode := range kindFiles {
		data, err := os.ReadFile(filepath.Join(kind, "images", "base", "files", rel))
		if err != nil {
			return err
		}
		if err := write(rel, data, mode); err != nil {
			return err
		}
	}
	// Kubernetes' commands where kind's units and actions look for them.
	for _, cmd := range []string{"kubelet", "kubeadm", "kubectl"} {
		src, err := binaries.KubernetesNode.Path(cmd)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := write("usr/bin/"+cmd, data, 0o755); err != nil {
			return err
		}
	}
	pause, err := pauseImageRef(ctx)
	if err != nil {
		return err
	}
	files := map[string]string{
		"kind/version":                     binaries.KubernetesVersion + "\n",
		"etc/containerd/config.toml":       containerdConfig(pause),
		"etc/cni/net.d/10-bridge.conflist": cniConfig(),
		"etc/crictl.yaml":                  "runtime-endpoint: unix:///run/containerd/containerd.sock\n",
		// kind applies these at cluster creation: no storage provisioner (the suite needs
		// none) and, unless the cluster config disables it, a CNI manifest that installs
		// nothing, as the node's CNI is the static configuration above.
		"kind/manifests/default-storage.yaml": defaultStorage,
		"kind/manifests/default-cni.yaml":     defaultCNI,
		"etc/modules-load.d/.keep":            "",
	}
	for rel, content := range files {
		if err := write(rel, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc/kubernetes/manifests"), 0o755); err != nil {
		return err
	}
	// kind's base image: journald does not read the kernel's log, and only the units the node
	// needs start.
	f, err := os.OpenFile(filepath.Join(rootfs, "etc/systemd/journald.conf"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "ReadKMsg=no")
	f.Close()
	for _, glob := range []string{
		"lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
		"lib/systemd/system/multi-user.target.wants/*", "etc/systemd/system/*.wants/*",
		"lib/systemd/system/local-fs.target.wants/*", "lib/systemd/system/sockets.target.wants/*udev*",
		"lib/systemd/system/sockets.target.wants/*initctl*", "lib/systemd/system/basic.target.wants/*",
	} {
		matches, _ := filepath.Glob(filepath.Join(rootfs, glob))
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	for _, args := range [][]string{
		{"systemctl", "enable", "kubelet.service", "containerd.service", "undo-mount-hacks.service"},
		{"systemctl", "mask", "systemd-binfmt.service"},
	} {
		if out, err := exec.CommandContext(ctx, "chroot", append([]string{rootfs}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("chroot %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// Debian keeps the CNI plugins in /usr/lib/cni; kind's and kubelet's default is /opt/cni/bin.
	if err := os.MkdirAll(filepath.Join(rootfs, "opt/cni"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/usr/lib/cni", filepath.Join(rootfs, "opt/cni/bin")); err != nil {
		return err
	}
	// No apt lists or caches in the image.
	for _, d := range []string{"var/lib/apt/lists", "var/cache/apt/archives"} {
		entries, _ := os.ReadDir(filepath.Join(rootfs, d))
		for _, e := range entries {
			if e.Type().IsRegular() {
				_ = os.Remove(filepath.Join(rootfs, d, e.Name()))
			}
		}
	}
	return nil
}

func containerdConfig(pause string) string {
	return `# The kind node's containerd (Debian's 1.6): kind's settings, with the pause image that
# tools/kindnode preloads, Debian's CNI plugin directory and OOM scores restricted.
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + pause + `"
  tolerate_missing_hugepages_controller = true
  # Without CAP_SYS_RESOURCE (a VM whose bounding set lacks it) nothing in the node may lower an
  # OOM score: runc fails to start a container asked for a negative one (the pause container's
  # -998). Restricted, no container gets a score below containerd's own.
  restrict_oom_score_adj = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
`
}

// cniConfig is the node's pod network: a bridge with host-local addresses from the single
// node's pod ranges, both families.
func cniConfig() string {
	return `{
  "cniVersion": "1.0.0",
  "name": "kind-bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + Network.NodePodRange + `"}], [{"subnet": "` + Network.NodePodRange6 + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`
}

const defaultStorage = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
`

const defaultCNI = `# The node's CNI is a static bridge configuration in /etc/cni/net.d (tools/kindnode).
apiVersion: v1
kind: ConfigMap
metadata:
  name: kind-node-cni
  namespace: kube-system
data:
  cni: /etc/cni/net.d/10-bridge.conflist
`

// kubeadmImages are the images kubeadm's manifests name, as the built kubeadm lists them.
func kubeadmImages(ctx context.Context) (map[string]string, error) {
	kubeadm, err := binaries.KubernetesNode.Path("kubeadm")
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, kubeadm, "config", "images", "list", "--kubernetes-version", binaries.KubernetesVersion).Output()
	if err != nil {
		return nil, fmt.Errorf("kubeadm config images list: %w", err)
	}
	m := map[string]string{}
	for _, ref := range strings.Fields(string(out)) {
		repo := ref
		if i := strings.LastIndex(ref, ":"); i > 0 {
			repo = ref[:i]
		}
		m[filepath.Base(repo)] = ref
	}
	for _, want := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "pause"} {
		if m[want] == "" {
			return nil, fmt.Errorf("kubeadm lists no %s image: %s", want, out)
		}
	}
	return m, nil
}

func pauseImageRef(ctx context.Context) (string, error) {
	m, err := kubeadmImages(ctx)
	if err != nil {
		return "", err
	}
	return m["pause"], nil
}

// MetalLBImages are the references of MetalLB's controller and speaker images in its chart
// (values.yaml's repository, tagged with the chart's appVersion), which the node preloads.
func MetalLBImages() (controller, speaker string, err error) {
	chart, err := binaries.MetalLB.Path("chart")
	if err != nil {
		return "", "", err
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Controller struct {
			Image struct{ Repository, Tag string } `json:"image"`
		} `json:"controller"`
		Speaker struct {
			Image struct{ Repository, Tag string } `json:"image"`
		} `json:"speaker"`
	}
	for file, v := range map[string]any{"Chart.yaml": &meta, "values.yaml": &values} {
		data, err := os.ReadFile(filepath.Join(chart, file))
		if err != nil {
			return "", "", err
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			return "", "", fmt.Errorf("%s: %w", file, err)
		}
	}
	ref := func(repo, tag string) string {
		if tag == "" {
			tag = meta.AppVersion
		}
		return repo + ":" + tag
	}
	return ref(values.Controller.Image.Repository, values.Controller.Image.Tag),
		ref(values.Speaker.Image.Repository, values.Speaker.Image.Tag), nil
}

// image is one preloaded image: a reference and what it is made of.
type image struct {
	ref string
	// files are written into one layer, path → (content, mode).
	files map[string]file
	// base is a layer tarball under the files (kube-proxy's: the node's rootfs, for iptables).
	base       string
	entrypoint []string
}

type file struct {
	data []byte
	mode int64
}

func buildImages(ctx context.Context, opts Options, rootfsTar, dir string) error {
	refs, err := kubeadmImages(ctx)
	if err != nil {
		return err
	}
	bin := func(c binaries.Component, cmd string) (file, error) {
		p, err := c.Path(cmd)
		if err != nil {
			return file{}, err
		}
		data, err := os.ReadFile(p)
		return file{data, 0o755}, err
	}
	var imgs []image
	for _, cmd := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		f, err := bin(binaries.KubernetesNode, cmd)
		if err != nil {
			return err
		}
		img := image{ref: refs[cmd], files: map[string]file{"usr/local/bin/" + cmd: f}}
		if cmd == "kube-proxy" {
			img.base = rootfsTar
		}
		imgs = append(imgs, img)
	}
	etcd, err := bin(binaries.Etcd, "etcd")
	if err != nil {
		return err
	}
	imgs = append(imgs, image{ref: refs["etcd"], files: map[string]file{"usr/local/bin/etcd": etcd}})
	pause, err := goBuild(ctx, opts, "./cmd/pause")
	if err != nil {
		return err
	}
	imgs = append(imgs, image{ref: refs["pause"], files: map[string]file{"pause": {pause, 0o755}}, entrypoint: []string{"/pause"}})
	controllerRef, speakerRef, err := MetalLBImages()
	if err != nil {
		return err
	}
	controller, err := bin(binaries.MetalLBNodeAt(binaries.MetalLBVersion), "metallb-controller")
	if err != nil {
		return err
	}
	speaker, err := bin(binaries.MetalLBNodeAt(binaries.MetalLBVersion), "metallb-speaker")
	if err != nil {
		return err
	}
	imgs = append(imgs,
		image{ref: controllerRef, files: map[string]file{"controller": controller}, entrypoint: []string{"/controller"}},
		image{ref: speakerRef, files: map[string]file{"speaker": speaker}, entrypoint: []string{"/speaker"}})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, img := range imgs {
		opts.say("image %s", img.ref)
		if err := writeImage(img, filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.ref)+".tar")); err != nil {
			return fmt.Errorf("image %s: %w", img.ref, err)
		}
	}
	return nil
}

func goBuild(ctx context.Context, opts Options, pkg string) ([]byte, error) {
	out := filepath.Join(os.TempDir(), fmt.Sprintf("kindnode-%d-%s", os.Getpid(), filepath.Base(pkg)))
	defer os.Remove(out)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = filepath.Join(opts.PinsDir, "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return os.ReadFile(out)
}

var epoch = time.Unix(0, 0).UTC()

func writeImage(img image, path string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	paths := make([]string, 0, len(img.files))
	for p := range img.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range append([]string{"tmp/x"}, paths...) {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, p := range paths {
		f := img.files[p]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	data := buf.Bytes()
	var layers []v1.Layer
	if img.base != "" {
		base, err := tarball.LayerFromFile(img.base)
		if err != nil {
			return err
		}
		layers = append(layers, base)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	layers = append(layers, layer)
	image, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.DockerManifestSchema2), layers...)
	if err != nil {
		return err
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Entrypoint = img.entrypoint
	if image, err = mutate.ConfigFile(image, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(img.ref)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarball.Write(tag, image, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// assemble imports rootfs.tar into the Docker engine, loads the image tarballs into its
// containerd (not unpacked: the node's containerd unpacks on first use, as kind's own node
// images do) and commits the result as ref.
func assemble(ctx context.Context, opts Options, dir, ref string) error {
	docker := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 20))
		}
		return strings.TrimSpace(string(out)), nil
	}
	base := ref + "-base"
	opts.say("docker import rootfs.tar")
	if _, err := docker("import", filepath.Join(dir, "rootfs.tar"), base); err != nil {
		return err
	}
	defer func() { _, _ = docker("rmi", base) }()
	imgDir := filepath.Join(dir, "images")
	id, err := docker("run", "-d", "--privileged", "--entrypoint", "sleep", "-v", imgDir+":/kind-images:ro", base, "infinity")
	if err != nil {
		return err
	}
	defer func() { _, _ = docker("rm", "-f", "-v", id) }()
	if _, err := docker("exec", id, "bash", "-c", "nohup containerd >/tmp/containerd.log 2>&1 &"); err != nil {
		return err
	}
	if _, err := docker("exec", id, "bash", "-c", "for i in $(seq 60); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 1; done; cat /tmp/containerd.log; exit 1"); err != nil {
		return err
	}
	tars, err := filepath.Glob(filepath.Join(imgDir, "*.tar"))
	if err != nil {
		return err
	}
	for _, t := range tars {
		opts.say("loading %s into the node's containerd", filepath.Base(t))
		if _, err := docker("exec", id, "ctr", "--namespace=k8s.io", "images", "import", "--label=io.cri-containerd.pinned=pinned",
			"--all-platforms", "--no-unpack", "/kind-images/"+filepath.Base(t)); err != nil {
			return err
		}
	}
	list, err := docker("exec", id, "ctr", "--namespace=k8s.io", "images", "list", "-q")
	if err != nil {
		return err
	}
	opts.say("preloaded: %s", strings.Join(strings.Fields(list), " "))
	// sleep, the container's first process, reaps nothing: a stopped containerd stays a zombie.
	if _, err := docker("exec", id, "bash", "-c", "pkill -x containerd; for i in $(seq 30); do ps -C containerd -o stat= | grep -qv '^Z' || exit 0; sleep 1; done; exit 1"); err != nil {
		return err
	}
	// Docker 20.10's commit cannot set STOPSIGNAL; kind removes its nodes with docker rm -f.
	_, err = docker("commit",
		"--change", `ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]`,
		"--change", `CMD []`,
		"--change", "ENV container=docker",
		id, ref)
	return err
}
