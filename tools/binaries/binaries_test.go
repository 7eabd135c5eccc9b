package binaries

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The cache key is the version in the code; the build uses the pin module's go.mod. They must
// agree, or the cache would lie about what it holds.
func TestPinModulesRequireTheCodesVersions(t *testing.T) {
	comps := All
	for _, v := range append(MetalLBVersions, PatchedMetalLBVersion) {
		comps = append(comps, MetalLBAt(v))
	}
	for _, c := range comps {
		data, err := os.ReadFile(filepath.Join(c.PinDir(), "go.mod"))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(c.Module) + `\s+(\S+)`)
		m := re.FindSubmatch(data)
		if m == nil || string(m[1]) != c.PinnedVersion() {
			t.Errorf("%s/go.mod requires %s %s, code says %s", c.Name, c.Module, m, c.PinnedVersion())
		}
		if len(c.Packages) != len(c.Commands) {
			t.Errorf("%s: %d packages but %d command names", c.Name, len(c.Packages), len(c.Commands))
		}
	}
}

func TestCacheLocation(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	root, err := CacheRoot()
	if err != nil || root != "/x/reserved-ips/bin" {
		t.Fatalf("CacheRoot() = %q, %v", root, err)
	}
	dir, _ := Etcd.Dir()
	if !strings.HasPrefix(dir, "/x/reserved-ips/bin/etcd/"+EtcdVersion+"-") {
		t.Fatalf("etcd dir %q is not keyed by component and version", dir)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if root, _ := CacheRoot(); root != "/home/u/.cache/reserved-ips/bin" {
		t.Fatalf("without XDG_CACHE_HOME the cache is %q", root)
	}
}

func TestMissingBinaryErrorSaysHowToBuild(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	_, err := Etcd.Path("etcd")
	if err == nil || !strings.Contains(err.Error(), "make binaries") || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("error %v should name the component and the fix", err)
	}
	if Etcd.Built() {
		t.Fatal("an empty cache reports etcd as built")
	}
}

func TestBuildFailureNamesTheComponent(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	pins := t.TempDir()
	// A pin module whose version disagrees with the code's.
	if err := os.MkdirAll(filepath.Join(pins, "etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(pins, "etcd", "go.mod"),
		[]byte("module pin\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v3.6.0\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	b := &Builder{PinsDir: pins, Progress: &progress}
	err = b.Ensure(Etcd)
	if err == nil || !strings.Contains(err.Error(), "building etcd "+EtcdVersion) {
		t.Fatalf("error %v should name the component", err)
	}
	if dir, _ := Etcd.Dir(); exists(dir) {
		t.Fatal("a failed build left a cache directory behind")
	}
	// No pin module at all.
	if err := (&Builder{PinsDir: t.TempDir()}).Ensure(MetalLB); err == nil || !strings.Contains(err.Error(), "metallb") {
		t.Fatalf("error %v should name the component", err)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// METALLB_VERSION picks the MetalLB every command and test uses; each version is cached under its
// own key, and a version without a pin module is refused with the versions that have one.
func TestMetalLBVersionIsAKnob(t *testing.T) {
	if MetalLBVersions[0] != DefaultMetalLBVersion {
		t.Fatalf("the newest pinned MetalLB is %s, the default %s", MetalLBVersions[0], DefaultMetalLBVersion)
	}
	t.Setenv("METALLB_VERSION", "")
	if v := envOr("METALLB_VERSION", DefaultMetalLBVersion); v != DefaultMetalLBVersion {
		t.Fatalf("without METALLB_VERSION the version is %s", v)
	}
	t.Setenv("METALLB_VERSION", "v0.15.2")
	if v := envOr("METALLB_VERSION", DefaultMetalLBVersion); v != "v0.15.2" {
		t.Fatalf("METALLB_VERSION=v0.15.2 gives %s", v)
	}
	t.Setenv("RESERVED_IPS_BIN_CACHE", "/c")
	a, _ := MetalLBAt("v0.15.2").Dir()
	b, _ := MetalLBAt("v0.16.1").Dir()
	if a == b || !strings.Contains(a, "/metallb/v0.15.2-") {
		t.Fatalf("versions share a cache directory or are not keyed by version: %s, %s", a, b)
	}
	c, ok := ByName("metallb@v0.15.2")
	if !ok || c.Version != "v0.15.2" || c.PinDir() != "metallb/v0.15.2" {
		t.Fatalf("ByName(metallb@v0.15.2) = %+v, %v", c, ok)
	}
	if _, ok := ByName("etcd@v3.0.0"); ok {
		t.Fatal("only MetalLB and Kubernetes are pinned at several versions")
	}
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	err := (&Builder{PinsDir: ".", Progress: io.Discard}).Ensure(MetalLBAt("v0.9.9"))
	if err == nil || !strings.Contains(err.Error(), "v0.16.1") || !strings.Contains(err.Error(), "no pin module for metallb v0.9.9") {
		t.Fatalf("an unpinned version should be refused naming the pinned ones: %v", err)
	}
}

// KUBERNETES_VERSION picks the Kubernetes the control plane, the kind node and envtest use: each
// pinned version has a pin module of its own, is cached under its own key and reports its own
// version (the linker stamps), and a version without a pin module is refused naming the pinned
// ones.
func TestKubernetesVersionIsAKnob(t *testing.T) {
	if KubernetesVersions[0] != DefaultKubernetesVersion {
		t.Fatalf("the newest pinned Kubernetes is %s, the default %s", KubernetesVersions[0], DefaultKubernetesVersion)
	}
	t.Setenv("RESERVED_IPS_BIN_CACHE", "/c")
	seen := map[string]bool{}
	for _, v := range KubernetesVersions {
		c, ok := ByName("kubernetes@" + v)
		if !ok || c.Version != v || c.PinDir() != "kubernetes/"+v {
			t.Fatalf("ByName(kubernetes@%s) = %+v, %v", v, c, ok)
		}
		minor := strconv.Itoa(KubernetesMinor(v))
		if !strings.Contains(c.LDFlags, "version.gitVersion="+v+" ") || !strings.Contains(c.LDFlags, "version.gitMinor="+minor+" ") {
			t.Fatalf("%s is not stamped with its version: %s", v, c.LDFlags)
		}
		data, err := os.ReadFile(filepath.Join(c.PinDir(), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		staging := "v0." + strings.TrimPrefix(v, "v1.")
		if !strings.Contains(string(data), "require k8s.io/kubernetes "+v+"\n") ||
			!strings.Contains(string(data), "k8s.io/api => k8s.io/api "+staging+"\n") {
			t.Fatalf("the pin module of %s does not require it with its staging modules at %s:\n%s", v, staging, data)
		}
		node, ok := ByName("kubernetes-node@" + v)
		if !ok || node.Base == nil || !SameBuild(*node.Base, c) {
			t.Fatalf("the node build of %s does not copy the control plane's commands of the same build: %+v", v, node)
		}
		dir, _ := c.Dir()
		if seen[dir] || !strings.Contains(dir, "/kubernetes/"+v+"-") {
			t.Fatalf("%s is not cached under a key of its own: %s", v, dir)
		}
		seen[dir] = true
	}
	if KubernetesMinor("v1.33.13") != 33 || KubernetesMinor("v1.37.2") != 37 || KubernetesMinor("junk") != 0 {
		t.Fatal("KubernetesMinor misreads a version")
	}
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	err := (&Builder{PinsDir: ".", Progress: io.Discard}).Ensure(KubernetesAt("v1.30.0"))
	if err == nil || !strings.Contains(err.Error(), "v1.33.13") || !strings.Contains(err.Error(), "no pin module for kubernetes v1.30.0") {
		t.Fatalf("an unpinned version should be refused naming the pinned ones: %v", err)
	}
}

// METALLB_VERSION=v0.16.1+patched is v0.16.1's pin module and source with the patches under
// metallb/patches (embedded, in file-name order), cached under a key of its own that changes
// with any patch.
func TestPatchedMetalLBIsAVersionOfItsOwn(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", "/c")
	t.Setenv("METALLB_VERSION", PatchedMetalLBVersion)
	if v := envOr("METALLB_VERSION", DefaultMetalLBVersion); v != "v0.16.1+patched" {
		t.Fatalf("METALLB_VERSION=v0.16.1+patched gives %s", v)
	}
	c, ok := ByName("metallb@" + PatchedMetalLBVersion)
	if !ok || c.Version != "v0.16.1+patched" || c.PinDir() != "metallb/v0.16.1" || c.PinnedVersion() != "v0.16.1" {
		t.Fatalf("ByName(metallb@%s) = %+v, %v", PatchedMetalLBVersion, c, ok)
	}
	files, err := filepath.Glob("metallb/patches/*.patch")
	if err != nil || len(files) < 2 {
		t.Fatalf("patches on disk: %v, %v", files, err)
	}
	if len(c.Patches) != len(files) {
		t.Fatalf("%d patches embedded, %d on disk", len(c.Patches), len(files))
	}
	for i, f := range files { // Glob sorts
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if c.Patches[i].Name != filepath.Base(f) || string(c.Patches[i].Data) != string(data) {
			t.Errorf("patch %d is %s, want %s as on disk", i, c.Patches[i].Name, f)
		}
	}

	// make test-metallb-patches tests the patches on the version they are built on.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^METALLB_PATCHED\s*:=\s*(\S+)`).FindSubmatch(mk); m == nil || string(m[1]) != PatchedMetalLBVersion {
		t.Errorf("the Makefile's METALLB_PATCHED is %q, want %s", m, PatchedMetalLBVersion)
	}

	stock, _ := MetalLBAt(DefaultMetalLBVersion).Dir()
	patched, _ := c.Dir()
	if MetalLBAt(DefaultMetalLBVersion).PatchesDigest() != "" || len(MetalLBAt(DefaultMetalLBVersion).Patches) != 0 {
		t.Fatal("the stock build has patches")
	}
	want := "/c/metallb/v0.16.1+patched-" + c.PatchesDigest() + "-"
	if patched == stock || !strings.HasPrefix(patched, want) || len(c.PatchesDigest()) != 12 {
		t.Fatalf("patched build cached in %s (stock %s), want %s...", patched, stock, want)
	}
	edited := c
	edited.Patches = append([]Patch(nil), c.Patches...)
	edited.Patches[1] = Patch{Name: c.Patches[1].Name, Data: append([]byte("x"), c.Patches[1].Data...)}
	reordered := c
	reordered.Patches = []Patch{c.Patches[1], c.Patches[0]}
	for what, other := range map[string]Component{"an edited patch": edited, "patches in another order": reordered} {
		if d, _ := other.Dir(); d == patched {
			t.Errorf("%s keeps the cache key %s", what, d)
		}
	}
}

func TestApplyPatches(t *testing.T) {
	const (
		orig = "one\ntwo\nthree\n"
		good = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
		bad  = "--- a/g.txt\n+++ b/g.txt\n@@ -1,1 +1,1 @@\n-absent\n+present\n"
	)
	// The tree is a subdirectory of a git work tree, as a copy under the checkout would be.
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	dir := filepath.Join(repo, "sub", "tree")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func() {
		for _, f := range []string{"f.txt", "g.txt"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(orig), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(f string) string {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	write()
	err := ApplyPatches(dir, []Patch{{Name: "0001-good.patch", Data: []byte(good)}, {Name: "0002-bad.patch", Data: []byte(bad)}})
	if err == nil || !strings.Contains(err.Error(), "g.txt") {
		t.Fatalf("a patch that does not apply: %v, want an error naming its file", err)
	}
	if read("f.txt") != orig {
		t.Fatal("a failed set of patches left the ones before it applied")
	}

	write()
	if err := ApplyPatches(dir, []Patch{{Name: "0001-good.patch", Data: []byte(good)}}); err != nil {
		t.Fatal(err)
	}
	if got := read("f.txt"); got != "one\n2\nthree\n" {
		t.Fatalf("patched f.txt = %q", got)
	}
}

// The patches apply to the MetalLB they are built on and to the newer releases named in
// PatchesAlsoApplyTo (which are only patched, not built).
func TestMetalLBPatchesApply(t *testing.T) {
	c := MetalLBAt(PatchedMetalLBVersion)
	dir := t.TempDir()
	if err := (&Builder{PinsDir: ".", Progress: io.Discard}).Source(c, dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "controller", "service.go"))
	if err != nil || !strings.Contains(string(data), "func ipModeFor(") {
		t.Fatalf("the patched source's controller/service.go lacks the first patch: %v", err)
	}
	if !strings.Contains(string(data), "func (c *controller) releaseDeletedHolders(") {
		t.Fatal("the patched source's controller/service.go lacks the third patch")
	}
	data, err = os.ReadFile(filepath.Join(dir, "internal", "k8s", "controllers", "reconciliation_test.go"))
	if err != nil || !strings.Contains(string(data), "so wait\n\t\t\t// for the status, not only for the object.") {
		t.Fatalf("the patched source's reconciliation_test.go lacks the test patch: %v", err)
	}
	if err := (&Builder{PinsDir: ".", Progress: io.Discard}).Source(c, dir); err == nil {
		t.Fatal("Source wrote into a directory that is not empty")
	}

	for _, v := range PatchesAlsoApplyTo {
		b := &Builder{}
		out, err := b.run(t.TempDir(), "", "mod", "download", "-json", c.Module+"@"+v)
		if err != nil {
			t.Fatalf("downloading %s@%s: %v\n%s", c.Module, v, err, out)
		}
		var info struct{ Dir string }
		if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
			t.Fatalf("locating %s@%s: %v", c.Module, v, err)
		}
		src := filepath.Join(t.TempDir(), "src")
		if err := CopyTree(info.Dir, src); err != nil {
			t.Fatal(err)
		}
		if err := ApplyPatches(src, c.Patches); err != nil {
			t.Errorf("the patches do not apply to MetalLB %s: %v", v, err)
		} else if err := ApplyPatches(src, c.TestPatches); err != nil {
			t.Errorf("the test patches do not apply to MetalLB %s: %v", v, err)
		}
	}
}

// A test patch may change tests only: Source refuses one that changes anything else, as git
// apply reads it, before it writes a file, so that the tests make test-metallb-patches runs test
// the code a build compiles.
func TestSourceRefusesATestPatchOfCode(t *testing.T) {
	if err := onlyTests(MetalLBTestPatches()); err != nil {
		t.Errorf("the test patches: %v", err)
	}
	const (
		codeDiff = "--- a/controller/service.go\n+++ b/controller/service.go\n@@ -1 +1 @@\n-package controller\n+package controller // changed\n"
		testDiff = "diff --git a/controller/service_test.go b/controller/service_test.go\n" +
			"--- a/controller/service_test.go\n+++ b/controller/service_test.go\n@@ -1 +1 @@\n-package controller\n+package controller\n"
		notATest = "changes controller/service.go, which is not a test"
	)
	for _, tc := range []struct {
		name    string
		patches []string
		want    string
	}{
		{"a git diff of code", []string{"diff --git a/controller/service.go b/controller/service.go\n" + codeDiff}, "test patch 0001-x.patch: " + notATest},
		{"a plain unified diff of code", []string{codeDiff}, "test patch 0001-x.patch: " + notATest},
		{"a test and code", []string{testDiff + "diff --git a/controller/service.go b/controller/service.go\n" + codeDiff}, "test patch 0001-x.patch: " + notATest},
		{"a git header naming a test over --- and +++ lines naming code", []string{"diff --git a/controller/service_test.go b/controller/service_test.go\n" +
			"--- a/controller/service.go\nindex 0000000..1111111 100644\n+++ b/controller/service.go\n@@ -1 +1 @@\n-package controller\n+package controller // changed\n"},
			"test patch 0001-x.patch: " + notATest},
		{"+++ before ---", []string{"diff --git a/controller/service_test.go b/controller/service_test.go\n" +
			"+++ b/controller/service.go\n--- a/controller/service.go\n@@ -1 +1 @@\n-package controller\n+package controller // changed\n"},
			notATest},
		{"a rename of code into a test", []string{"diff --git a/controller/service.go b/controller/service_test.go\nsimilarity index 100%\n" +
			"rename from controller/service.go\nrename to controller/service_test.go\n"}, "a test patch may not rename or copy files"},
		{"two patches that would make a diff of code only together: the second is no patch alone", []string{testDiff + "--- a/controller/service.go\n",
			"+++ b/controller/service.go\n@@ -1 +1 @@\n-package controller\n+package controller // changed\n" + testDiff},
			"test patch 0002-x.patch: git apply cannot read it"},
		{"two patches each of tests alone that rename a test into code joined", []string{
			testDiff + "diff --git a/controller/t_test.go b/controller/t_test.go\n",
			"rename from controller/t_test.go\nrename to controller/zz.go\n" + testDiff},
			"the test patches joined: rename controller/{t_test.go => zz.go}"},
		{"no diff at all", []string{"just a message\n"}, "git apply cannot read it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := MetalLBAt(PatchedMetalLBVersion)
			c.TestPatches = nil
			for i, data := range tc.patches {
				c.TestPatches = append(c.TestPatches, Patch{Name: fmt.Sprintf("%04d-x.patch", i+1), Data: []byte(data)})
			}
			dir := filepath.Join(t.TempDir(), "src")
			err := (&Builder{PinsDir: ".", Progress: io.Discard}).Source(c, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Source: %v, want an error saying %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("Source wrote %s before refusing the test patches (%v)", dir, err)
			}
		})
	}
}

// PatchedFiles names what git apply would write, renames apart.
func TestPatchedFiles(t *testing.T) {
	for _, tc := range []struct {
		data         string
		files, moved []string
	}{
		{"diff --git a/x_test.go b/x_test.go\n--- a/x_test.go\n+++ b/x_test.go\n@@ -1 +1 @@\n-a\n+b\n", []string{"x_test.go"}, nil},
		{"--- a/p.go\t2026-12-03 13:00:00\n+++ b/p.go\t2026-12-03 13:01:00\n@@ -1 +1 @@\n-a\n+b\n", []string{"p.go"}, nil},
		{"diff --git a/n_test.go b/n_test.go\nnew file mode 100644\n--- /dev/null\n+++ b/n_test.go\n@@ -0,0 +1 @@\n+a\n", []string{"n_test.go"}, nil},
		{"diff --git a/m.go b/m.go\nold mode 100644\nnew mode 100755\n", []string{"m.go"}, nil},
		{"diff --git a/old_test.go b/new.go\nsimilarity index 90%\nrename from old_test.go\nrename to new.go\n--- a/old_test.go\n+++ b/new.go\n@@ -1 +1 @@\n-a\n+b\n",
			[]string{"new.go"}, []string{"rename old_test.go => new.go (90%)"}},
	} {
		files, moved, err := PatchedFiles([]Patch{{Data: []byte(tc.data)}})
		if err != nil || !slices.Contains(files, tc.files[0]) || len(files) != len(tc.files) || !slices.Equal(moved, tc.moved) {
			t.Errorf("PatchedFiles(%q) = %q, %q, %v; want %q, %q", tc.data, files, moved, err, tc.files, tc.moved)
		}
	}
}

func TestGoCommandName(t *testing.T) {
	for pkg, want := range map[string]string{
		"k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
		"go.etcd.io/etcd/server/v3":            "server",
		"example.com/tool/v1":                  "v1",
		"example.com/tool/v0":                  "v0",
		"example.com/tool/v10":                 "tool",
		"example.com/tool/vx":                  "vx",
		"tool":                                 "tool",
	} {
		if got := goCommandName(pkg); got != want {
			t.Errorf("goCommandName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// A component whose Base is built the same way copies the commands they share from Base's cache
// and compiles only the rest, in one go build, under the component's names (a package ending in
// a major version included); with other flags it builds everything itself.
func TestBaseCommandsAreCopiedNotLinkedAgain(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	pins, src := t.TempDir(), t.TempDir()
	write := func(file, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(src, "go.mod"), "module example.com/kit\n\ngo 1.26.0\n")
	write(filepath.Join(src, "one", "main.go"), "package main\n\nfunc main() { println(\"one\") }\n")
	write(filepath.Join(src, "two", "v2", "main.go"), "package main\n\nfunc main() { println(\"two\") }\n")
	write(filepath.Join(pins, "kit", "go.mod"), "module pin\n\ngo 1.26.0\n\nrequire example.com/kit v1.0.0\n\nreplace example.com/kit => "+src+"\n")
	base := Component{Name: "kit", Module: "example.com/kit", Version: "v1.0.0",
		Packages: []string{"example.com/kit/one"}, Commands: []string{"kit-one"}, Env: []string{"CGO_ENABLED=0"}}
	node := Component{Name: "kit-node", Pin: "kit", Module: base.Module, Version: base.Version,
		Packages: []string{"example.com/kit/one", "example.com/kit/two/v2"}, Commands: []string{"kit-one", "kit-two"},
		Env: base.Env, Base: &base}
	var progress strings.Builder
	b := &Builder{PinsDir: pins, Progress: &progress}
	if err := b.Ensure(base); err != nil {
		t.Fatal(err)
	}
	if err := b.Ensure(node); err != nil {
		t.Fatal(err)
	}
	log := progress.String()
	if !strings.Contains(log, "kit-one: built as kit's is, copied from its cache") || !strings.Contains(log, "[kit-node v1.0.0] compiling kit-two\n") {
		t.Fatalf("kit-one should be copied and only kit-two compiled:\n%s", log)
	}
	run := func(c Component, cmd, want string) {
		t.Helper()
		p, err := c.Path(cmd)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(p).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("%s printed %q (%v), want %q", p, out, err, want)
		}
	}
	run(node, "kit-one", "one")
	run(node, "kit-two", "two")

	// Other linker flags: not the same build, nothing copied.
	other := node
	other.Name, other.LDFlags = "kit-other", "-X main.unused=1"
	progress.Reset()
	if err := b.Ensure(other); err != nil {
		t.Fatal(err)
	}
	if log := progress.String(); strings.Contains(log, "copied") || !strings.Contains(log, "compiling kit-one, kit-two") {
		t.Fatalf("a build with other flags copied from the base:\n%s", log)
	}
	run(other, "kit-one", "one")
	run(other, "kit-two", "two")

}

// The copy rests on what the base was built with, recorded in its cache, not on what the code
// declares today: the cache key is the version alone, so a base cached under other linker
// flags, another pin module (go.mod, go.sum) or before builds were recorded is built again.
func TestBaseCopyNeedsTheSameRecordedBuild(t *testing.T) {
	pins, src := t.TempDir(), t.TempDir()
	write := func(file, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(src, "go.mod"), "module example.com/kit\n\ngo 1.26.0\n")
	write(filepath.Join(src, "one", "main.go"), "package main\n\nvar stamp = \"new\"\n\nfunc main() { println(stamp) }\n")
	pinMod := "module pin\n\ngo 1.26.0\n\nrequire example.com/kit v1.0.0\n\nreplace example.com/kit => " + src + "\n"
	write(filepath.Join(pins, "kit", "go.mod"), pinMod)
	base := Component{Name: "kit", Module: "example.com/kit", Version: "v1.0.0",
		Packages: []string{"example.com/kit/one"}, Commands: []string{"kit-one"}, Env: []string{"CGO_ENABLED=0"}}
	node := Component{Name: "kit-node", Pin: "kit", Module: base.Module, Version: base.Version,
		Packages: base.Packages, Commands: base.Commands, Env: base.Env, Base: &base}
	var progress strings.Builder
	b := &Builder{PinsDir: pins, Progress: &progress}
	ensureNode := func(t *testing.T, wantCopied bool) {
		t.Helper()
		nodeDir, err := node.Dir()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(nodeDir); err != nil {
			t.Fatal(err)
		}
		progress.Reset()
		if err := b.Ensure(node); err != nil {
			t.Fatal(err)
		}
		if copied := strings.Contains(progress.String(), "copied from its cache"); copied != wantCopied {
			t.Fatalf("copied = %v, want %v:\n%s", copied, wantCopied, progress.String())
		}
		p, err := node.Path("kit-one")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(p).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "new" {
			t.Fatalf("%s printed %q (%v), want the build the code declares (\"new\")", p, out, err)
		}
	}

	t.Run("same recorded build is copied", func(t *testing.T) {
		t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
		if err := b.Ensure(base); err != nil {
			t.Fatal(err)
		}
		ensureNode(t, true)
	})
	t.Run("base cached under other linker flags", func(t *testing.T) {
		t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
		old := base
		old.LDFlags = "-X main.stamp=old"
		if err := b.Ensure(old); err != nil { // the same cache key as base
			t.Fatal(err)
		}
		ensureNode(t, false)
	})
	t.Run("base cached from another pin module", func(t *testing.T) {
		t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
		write(filepath.Join(pins, "kit", "go.mod"), pinMod+"\n// another pin\n")
		if err := b.Ensure(base); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(pins, "kit", "go.mod"), pinMod)
		ensureNode(t, false)
	})
	t.Run("base cached before builds were recorded", func(t *testing.T) {
		t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
		if err := b.Ensure(base); err != nil {
			t.Fatal(err)
		}
		dir, err := base.Dir()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, buildRecord)); err != nil {
			t.Fatal(err)
		}
		ensureNode(t, false)
	})
}

// kitPins writes a one-command module and a pin module for it (named kit), returning PinsDir.
func kitPins(t *testing.T) string {
	t.Helper()
	pins, src := t.TempDir(), t.TempDir()
	for file, text := range map[string]string{
		filepath.Join(src, "go.mod"):         "module example.com/kit\n\ngo 1.26.0\n",
		filepath.Join(src, "one", "main.go"): "package main\n\nfunc main() { println(\"one\") }\n",
		filepath.Join(pins, "kit", "go.mod"): "module pin\n\ngo 1.26.0\n\nrequire example.com/kit v1.0.0\n\nreplace example.com/kit => " + src + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pins
}

var kit = Component{Name: "kit", Module: "example.com/kit", Version: "v1.0.0", Packages: []string{"example.com/kit/one"}, Commands: []string{"kit-one"}}

// A component is built static for the cache key's platform whatever the caller exports, so a
// CGO_ENABLED=1 or GOARCH=arm64 in the caller's environment neither changes what the cache
// holds nor keeps a base from being copied.
func TestBuildsDoNotFollowTheCallersGoEnvironment(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	pins := kitPins(t)
	node := kit
	node.Name, node.Pin, node.Base = "kit-node", "kit", &kit
	var progress strings.Builder
	b := &Builder{PinsDir: pins, Progress: &progress}
	t.Setenv("CGO_ENABLED", "1")
	other := "arm64"
	if runtime.GOARCH == other {
		other = "amd64"
	}
	t.Setenv("GOARCH", other)
	if err := b.Ensure(kit); err != nil {
		t.Fatal(err)
	}
	dir, _ := kit.Dir()
	record, err := os.ReadFile(filepath.Join(dir, buildRecord))
	if err != nil {
		t.Fatal(err)
	}
	// "go env GOVERSION CGO_ENABLED GOOS GOARCH …"
	var settings []string
	for _, line := range strings.Split(string(record), "\n") {
		if rest, ok := strings.CutPrefix(line, "go env "); ok {
			settings = strings.Fields(rest)
		}
	}
	if len(settings) < 4 || settings[1] != "0" || settings[2] != runtime.GOOS || settings[3] != runtime.GOARCH {
		t.Errorf("the record of a build under CGO_ENABLED=1 GOARCH=%s does not say static for %s/%s:\n%s", other, runtime.GOOS, runtime.GOARCH, record)
	}
	out, err := exec.Command(filepath.Join(dir, "kit-one")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "one" {
		t.Fatalf("the command built under the caller's GOARCH=%s does not run here: %v %s", os.Getenv("GOARCH"), err, out)
	}
	t.Setenv("CGO_ENABLED", "0")
	t.Setenv("GOARCH", runtime.GOARCH)
	if err := b.Ensure(node); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "copied from its cache") {
		t.Fatalf("the base was not copied although both were built the same way:\n%s", progress.String())
	}
}

// The cache key is the version alone: a cached build whose record differs from the build the
// code now declares (linker flags changed, or made before builds were recorded) is built again,
// and one that matches is used as it is.
func TestACachedBuildMadeAnotherWayIsBuiltAgain(t *testing.T) {
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	var progress strings.Builder
	b := &Builder{PinsDir: kitPins(t), Progress: &progress}
	dir, _ := kit.Dir()
	ensure := func(c Component, want string) {
		t.Helper()
		progress.Reset()
		if err := b.Ensure(c); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(progress.String(), want) {
			t.Fatalf("Ensure said, wanting %q:\n%s", want, progress.String())
		}
		record, err := os.ReadFile(filepath.Join(dir, buildRecord))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(record), "ldflags "+c.LDFlags+"\n") {
			t.Fatalf("the cache holds another build than asked for (ldflags %q):\n%s", c.LDFlags, record)
		}
	}
	ensure(kit, "compiling kit-one")
	ensure(kit, "cached in")

	flagged := kit
	flagged.LDFlags = "-X main.version=v1.0.0"
	ensure(flagged, `the cached build was made another way ("ldflags ", now "ldflags -X main.version=v1.0.0"): building it again`)
	ensure(flagged, "cached in")

	if err := os.Remove(filepath.Join(dir, buildRecord)); err != nil {
		t.Fatal(err)
	}
	ensure(flagged, "the cached build was made before builds were recorded: building it again")

	if err := os.Remove(filepath.Join(dir, "kit-one")); err != nil {
		t.Fatal(err)
	}
	ensure(flagged, "the cached build lacks kit-one: building it again")
	if _, err := os.Stat(filepath.Join(dir, "kit-one")); err != nil {
		t.Fatal(err)
	}
	if leftovers, _ := filepath.Glob(dir + ".*"); len(leftovers) != 0 {
		t.Errorf("the replaced build is left beside the cache: %v", leftovers)
	}
}
