// Package binaries builds the pinned control-plane binaries from Go modules and finds them in a
// cache outside the checkout.
//
// Each component is pinned by a tiny Go module of its own under tools/binaries/<component>
// (kept out of go.work). A build runs `go build` inside that module and installs the result into
//
//	$XDG_CACHE_HOME/reserved-ips/bin/<component>/<version>-<goos>-<goarch>/
//
// (~/.cache when XDG_CACHE_HOME is unset). A directory is only ever renamed into place when
// complete, and builds take a file lock, so interrupted or concurrent builds never leave a
// half-written binary behind.
//
// A patched build (MetalLB's controller at "v0.16.1+patched") compiles a copy of the module's
// source with the patches under tools/binaries/metallb/patches applied; the patches' digest is
// part of its cache key.
package binaries

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Component is one pinned upstream project and the commands built from it.
type Component struct {
	// Name is the cache key and, unless Pin says otherwise, the name of the pin module's
	// directory.
	Name string
	// Pin is the pin module's directory under the pins directory when it is not Name (a
	// component pinned at several versions keeps one pin module per version).
	Pin string
	// Module is the upstream Go module the pin requires.
	Module string
	// Version is the upstream version and the cache key's; it must match the pin module's
	// go.mod unless ModuleVersion is set.
	Version string
	// ModuleVersion is the version of Module the pin module requires when Version is not it:
	// a patched build is Version "v0.16.1+patched" of ModuleVersion "v0.16.1".
	ModuleVersion string
	// Patches are applied in order (git apply, all or none) to a copy of the module's source,
	// which replaces the module in a copy of the pin module for the build. Their digest is part
	// of the cache key.
	Patches []Patch
	// TestPatches change only the module's tests (files ending in _test.go): Source applies them
	// after Patches, so that the module's own tests can run on the patched source; a build never
	// does, and they are not part of the cache key.
	TestPatches []Patch
	// Packages are the main packages built, in the order of Commands.
	Packages []string
	// Commands are the file names of the built binaries.
	Commands []string
	// LDFlags are extra linker flags (version stamping).
	LDFlags string
	// Files are directories of the upstream module copied beside the binaries
	// (source path in the module → destination name).
	Files map[string]string
	// Env is added to the go command's environment, over the builder's (which builds static
	// for this machine); it is part of the build's record.
	Env []string
	// Base is a component built from the same pin module with the same flags whose commands
	// this one also has: when Base is in the cache, those commands are copied from it instead of
	// linked again (SameBuild says when the flags allow it).
	Base *Component
}

const (
	// DefaultKubernetesVersion is the Kubernetes every command and test uses unless
	// KUBERNETES_VERSION names another of KubernetesVersions.
	DefaultKubernetesVersion = "v1.37.2"
	EtcdVersion              = "v3.6.16"
	// DefaultMetalLBVersion is the MetalLB that Cozystack ships (its packages/system/metallb
	// chart): the version every command and test uses unless METALLB_VERSION names another.
	DefaultMetalLBVersion = "v0.16.1"
	ControllerGenVersion  = "v0.23.0"
	GolangCILintVersion   = "v2.15.0"
	DistributionVersion   = "v3.1.2"
)

// KubernetesVersions are the Kubernetes releases with a pin module
// (tools/binaries/kubernetes/<version>), newest first: the newest, and the 1.33 line that
// Cozystack hosts run (v1.33.13 is the newest 1.33 release the Go module proxy builds: v1.33.12's
// cri-api and externaljwt staging modules are refused). Adding one is a directory with a go.mod
// requiring k8s.io/kubernetes at it and replacing every k8s.io staging module with the matching
// v0 release, and a line here.
var KubernetesVersions = []string{"v1.37.2", "v1.33.13"}

var (
	// KubernetesVersion is the Kubernetes in use: $KUBERNETES_VERSION, else
	// DefaultKubernetesVersion.
	KubernetesVersion = envOr("KUBERNETES_VERSION", DefaultKubernetesVersion)
	// Kubernetes is the local control plane's commands at KubernetesVersion.
	Kubernetes = KubernetesAt(KubernetesVersion)
	// KubernetesNode is the rest of Kubernetes that a kind node runs (the offline node image of
	// tools/kindnode) at KubernetesVersion.
	KubernetesNode = KubernetesNodeAt(KubernetesVersion)
	Etcd           = Component{
		Name:     "etcd",
		Module:   "go.etcd.io/etcd/server/v3",
		Version:  EtcdVersion,
		Packages: []string{"go.etcd.io/etcd/server/v3"},
		Commands: []string{"etcd"},
		Env:      []string{"CGO_ENABLED=0"},
	}
	// MetalLBVersion is the MetalLB version in use: $METALLB_VERSION, else DefaultMetalLBVersion.
	MetalLBVersion = envOr("METALLB_VERSION", DefaultMetalLBVersion)
	// MetalLB is MetalLB's controller at MetalLBVersion.
	MetalLB       = MetalLBAt(MetalLBVersion)
	ControllerGen = Component{
		Name:     "controller-gen",
		Module:   "sigs.k8s.io/controller-tools",
		Version:  ControllerGenVersion,
		Packages: []string{"sigs.k8s.io/controller-tools/cmd/controller-gen"},
		Commands: []string{"controller-gen"},
	}
	GolangCILint = Component{
		Name:     "golangci-lint",
		Module:   "github.com/golangci/golangci-lint/v2",
		Version:  GolangCILintVersion,
		Packages: []string{"github.com/golangci/golangci-lint/v2/cmd/golangci-lint"},
		Commands: []string{"golangci-lint"},
		LDFlags:  "-X main.version=" + strings.TrimPrefix(GolangCILintVersion, "v"),
	}
	// Distribution is the CNCF registry server; the mirror tool's tests run it on loopback.
	Distribution = Component{
		Name:     "distribution",
		Module:   "github.com/distribution/distribution/v3",
		Version:  DistributionVersion,
		Packages: []string{"github.com/distribution/distribution/v3/cmd/registry"},
		Commands: []string{"registry"},
		LDFlags:  "-X github.com/distribution/distribution/v3/version.version=" + DistributionVersion,
	}
)

// MetalLBVersions are the MetalLB versions with a pin module (tools/binaries/metallb/<version>),
// newest first. Adding one is a directory with a go.mod requiring it (`go mod tidy` fills in the
// rest) and a line here.
var MetalLBVersions = []string{"v0.16.1", "v0.15.2"}

// PatchedSuffix, after a pinned MetalLB version, names MetalLB's controller built from that
// version with the patches under tools/binaries/metallb/patches: METALLB_VERSION=v0.16.1+patched.
const PatchedSuffix = "+patched"

// PatchedMetalLBVersion is the patched MetalLB the patches are written and tested against.
const PatchedMetalLBVersion = DefaultMetalLBVersion + PatchedSuffix

// PatchesAlsoApplyTo are newer MetalLB releases the patches must apply to (checked by a test;
// they are not built).
var PatchesAlsoApplyTo = []string{"v0.16.2"}

// Each pattern must match a file: with no test patch left, drop its pattern (the build fails
// until then).
//
//go:embed metallb/patches/*.patch metallb/test-patches/*.patch
var metalLBPatchFiles embed.FS

// MetalLBPatches are the patches of a patched MetalLB build, in file-name order.
func MetalLBPatches() []Patch { return embeddedPatches("metallb/patches") }

// MetalLBTestPatches fix MetalLB's own tests of the packages the patches change where they fail
// for reasons of their own (a test racing the code it tests), in file-name order: applied to the
// source make test-metallb-patches tests, never to a build.
func MetalLBTestPatches() []Patch { return embeddedPatches("metallb/test-patches") }

func embeddedPatches(dir string) []Patch {
	names, err := fs.Glob(metalLBPatchFiles, dir+"/*.patch")
	if err != nil {
		panic(err) // the pattern is a constant
	}
	sort.Strings(names)
	patches := make([]Patch, 0, len(names))
	for _, n := range names {
		data, err := metalLBPatchFiles.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		patches = append(patches, Patch{Name: path.Base(n), Data: data})
	}
	return patches
}

// MetalLBAt is MetalLB's controller at version, cached under its own key like every component
// (its CRDs and Helm chart are copied beside it). A version ending in PatchedSuffix is the
// pinned version before it with MetalLBPatches applied.
func MetalLBAt(version string) Component {
	base, patched := strings.CutSuffix(version, PatchedSuffix)
	c := Component{
		Name:     "metallb",
		Pin:      "metallb/" + base,
		Module:   "go.universe.tf/metallb",
		Version:  version,
		Packages: []string{"go.universe.tf/metallb/controller"},
		Commands: []string{"metallb-controller"},
		Files: map[string]string{
			"config/crd/bases": "crds",
			"charts/metallb":   "chart",
		},
		// Static like MetalLB's own images, and like the kind node's build of it
		// (MetalLBNodeAt), which then copies the controller from here.
		Env: []string{"CGO_ENABLED=0"},
	}
	if patched {
		c.ModuleVersion = base
		c.Patches = MetalLBPatches()
		c.TestPatches = MetalLBTestPatches()
	}
	return c
}

// MetalLBNodeAt is MetalLB's controller and speaker at version, static, for the images of the
// kind node (tools/kindnode); a patched version's controller has the patches, as MetalLBAt's.
func MetalLBNodeAt(version string) Component {
	base := MetalLBAt(version)
	c := base
	c.Name = "metallb-node"
	c.Packages = []string{"go.universe.tf/metallb/controller", "go.universe.tf/metallb/speaker"}
	c.Commands = []string{"metallb-controller", "metallb-speaker"}
	c.Files = nil
	c.Base = &base
	return c
}

// KubernetesAt is kube-apiserver, kube-controller-manager and kubectl at version, built from
// the pin module tools/binaries/kubernetes/<version>, static and stamped with the version
// (without the stamp the servers report v0.0.0-master, which Helm's kubeVersion checks reject).
func KubernetesAt(version string) Component {
	minor := strconv.Itoa(KubernetesMinor(version))
	return Component{
		Name:    "kubernetes",
		Pin:     "kubernetes/" + version,
		Module:  "k8s.io/kubernetes",
		Version: version,
		Packages: []string{
			"k8s.io/kubernetes/cmd/kube-apiserver",
			"k8s.io/kubernetes/cmd/kube-controller-manager",
			"k8s.io/kubernetes/cmd/kubectl",
		},
		Commands: []string{"kube-apiserver", "kube-controller-manager", "kubectl"},
		LDFlags: "-X k8s.io/component-base/version.gitVersion=" + version +
			" -X k8s.io/component-base/version.gitMajor=1" +
			" -X k8s.io/component-base/version.gitMinor=" + minor +
			" -X k8s.io/component-base/version.gitTreeState=clean" +
			" -X k8s.io/client-go/pkg/version.gitVersion=" + version +
			" -X k8s.io/client-go/pkg/version.gitMajor=1" +
			" -X k8s.io/client-go/pkg/version.gitMinor=" + minor,
		Env: []string{"CGO_ENABLED=0"},
	}
}

// KubernetesNodeAt is what a kind node of Kubernetes version runs: KubernetesAt's commands and
// the node's (kube-scheduler, kube-proxy, kubelet, kubeadm), static, from the same pin module
// and with the same flags, so that the commands both build are copied from KubernetesAt's cache.
func KubernetesNodeAt(version string) Component {
	base := KubernetesAt(version)
	c := base
	c.Name = "kubernetes-node"
	c.Packages = append(append([]string{}, base.Packages...), "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kube-proxy", "k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kubeadm")
	c.Commands = append(append([]string{}, base.Commands...), "kube-scheduler", "kube-proxy", "kubelet", "kubeadm")
	c.Base = &base
	return c
}

// KubernetesMinor is the minor release of a Kubernetes version ("v1.33.13" → 33), 0 when it
// cannot be read.
func KubernetesMinor(version string) int {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return 0
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return 0
	}
	return n
}

// SameBuild reports whether a and b build a command they share identically: the same module at
// the same version from the same pin module, with the same patches, linker flags and
// environment.
func SameBuild(a, b Component) bool {
	return a.Module == b.Module && a.Version == b.Version && a.PinDir() == b.PinDir() &&
		a.PatchesDigest() == b.PatchesDigest() && a.LDFlags == b.LDFlags && slices.Equal(a.Env, b.Env)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// PinDir is the pin module's directory under the pins directory.
func (c Component) PinDir() string {
	if c.Pin != "" {
		return c.Pin
	}
	return c.Name
}

// PinnedVersion is the version of Module the pin module requires.
func (c Component) PinnedVersion() string {
	if c.ModuleVersion != "" {
		return c.ModuleVersion
	}
	return c.Version
}

// Patch is one patch in git format-patch (or git diff) form, applied at the module's root.
type Patch struct {
	Name string
	Data []byte
}

// PatchesDigest identifies the patches (names, order and content): the part of a patched
// build's cache key that changes whenever a patch does. Empty without patches.
func (c Component) PatchesDigest() string {
	if len(c.Patches) == 0 {
		return ""
	}
	h := sha256.New()
	for _, p := range c.Patches {
		fmt.Fprintf(h, "%s\x00%d\x00", p.Name, len(p.Data))
		h.Write(p.Data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// All lists every component, in build order (fast ones first).
var All = []Component{ControllerGen, GolangCILint, Etcd, Distribution, MetalLB, Kubernetes}

// Node lists the components the offline kind node image is made of (tools/kindnode), built
// only by the targets that need it (make kind-node-image), as they take long on a cold cache.
var Node = []Component{Etcd, MetalLB, MetalLBNodeAt(MetalLBVersion), KubernetesNode}

// ByName returns the component called name; "metallb@v0.15.2" names MetalLB at another
// version than the one in use, "kubernetes@v1.33.13" (and kubernetes-node@…) Kubernetes.
func ByName(name string) (Component, bool) {
	if n, v, ok := strings.Cut(name, "@"); ok && v != "" {
		switch n {
		case MetalLB.Name:
			return MetalLBAt(v), true
		case Kubernetes.Name:
			return KubernetesAt(v), true
		case KubernetesNode.Name:
			return KubernetesNodeAt(v), true
		}
		return Component{}, false
	}
	for _, c := range append(append([]Component{}, All...), Node...) {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// CacheRoot is the directory holding every built component.
func CacheRoot() (string, error) {
	if d := os.Getenv("RESERVED_IPS_BIN_CACHE"); d != "" {
		return d, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locating the binary cache: neither XDG_CACHE_HOME nor HOME is usable: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "reserved-ips", "bin"), nil
}

// Dir is where the component's binaries live once built.
func (c Component) Dir() (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	key := c.Version
	if d := c.PatchesDigest(); d != "" {
		key += "-" + d
	}
	return filepath.Join(root, c.Name, key+"-"+runtime.GOOS+"-"+runtime.GOARCH), nil
}

// Path returns the path of one of the component's commands or copied directories, or an error
// telling how to build it when it is not in the cache.
func (c Component) Path(file string) (string, error) {
	dir, err := c.Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, file)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not built (%s missing): run `make binaries` first", c.Name, c.Version, p)
	}
	return p, nil
}

// Built reports whether the component is complete in the cache.
func (c Component) Built() bool {
	dir, err := c.Dir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, doneMarker))
	return err == nil
}

// doneMarker is written last; a directory without it is never used.
const doneMarker = ".complete"

// Tool returns the path of a built command, searching every component.
func Tool(command string) (string, error) {
	for _, c := range append(append([]Component{}, All...), Node...) {
		for _, cmd := range c.Commands {
			if cmd == command {
				return c.Path(command)
			}
		}
	}
	return "", fmt.Errorf("no pinned component builds %q", command)
}

// EnvtestAssets returns a directory laid out as controller-runtime's envtest expects
// (kube-apiserver, etcd and kubectl side by side), suitable for KUBEBUILDER_ASSETS. It is
// made of symlinks into the component directories and created on first use.
func EnvtestAssets() (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "envtest", fmt.Sprintf("kubernetes-%s_etcd-%s-%s-%s",
		Kubernetes.Version, Etcd.Version, runtime.GOOS, runtime.GOARCH))
	links := map[string]Component{"kube-apiserver": Kubernetes, "kubectl": Kubernetes, "etcd": Etcd}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, c := range links {
		target, err := c.Path(name)
		if err != nil {
			return "", err
		}
		link := filepath.Join(dir, name)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		tmp := fmt.Sprintf("%s.tmp%d", link, os.Getpid())
		if err := os.Symlink(target, tmp); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, link); err != nil {
			return "", err
		}
	}
	return dir, nil
}
