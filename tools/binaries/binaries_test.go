package binaries

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The cache key is the version in the code; the build uses the pin module's go.mod. They must
// agree, or the cache would lie about what it holds.
func TestPinModulesRequireTheCodesVersions(t *testing.T) {
	comps := All
	for _, v := range MetalLBVersions {
		comps = append(comps, MetalLBAt(v))
	}
	for _, c := range comps {
		data, err := os.ReadFile(filepath.Join(c.PinDir(), "go.mod"))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(c.Module) + `\s+(\S+)`)
		m := re.FindSubmatch(data)
		if m == nil || string(m[1]) != c.Version {
			t.Errorf("%s/go.mod requires %s %s, code says %s", c.Name, c.Module, m, c.Version)
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
	if v := metalLBVersionFromEnv(); v != DefaultMetalLBVersion {
		t.Fatalf("without METALLB_VERSION the version is %s", v)
	}
	t.Setenv("METALLB_VERSION", "v0.15.2")
	if v := metalLBVersionFromEnv(); v != "v0.15.2" {
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
		t.Fatal("only MetalLB is pinned at several versions")
	}
	t.Setenv("RESERVED_IPS_BIN_CACHE", t.TempDir())
	err := (&Builder{PinsDir: ".", Progress: io.Discard}).Ensure(MetalLBAt("v0.9.9"))
	if err == nil || !strings.Contains(err.Error(), "v0.16.1") || !strings.Contains(err.Error(), "no pin module for metallb v0.9.9") {
		t.Fatalf("an unpinned version should be refused naming the pinned ones: %v", err)
	}
}
