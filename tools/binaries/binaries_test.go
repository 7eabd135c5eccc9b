package binaries

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The cache key is the version in the code; the build uses the pin module's go.mod. They must
// agree, or the cache would lie about what it holds.
func TestPinModulesRequireTheCodesVersions(t *testing.T) {
	for _, c := range All {
		data, err := os.ReadFile(filepath.Join(c.Name, "go.mod"))
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
