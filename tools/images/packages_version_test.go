package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each package's Makefile names the release the checkout carries (RESERVED_IPS_VERSION, the chart
// its update target pulls and the source its image target builds), the one the out-of-tree file
// installs: make release writes both, so a release that leaves the Makefiles behind fails here,
// in make check-images and in make release-commit.
func TestPackagesNameTheCheckoutsRelease(t *testing.T) {
	versions, err := PackagesVersions(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) < 2 {
		t.Fatalf("found the version of only %v", versions)
	}
	stale, err := StalePackagesVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Error(s)
	}
}

// The out-of-tree file pinned to a new release without the Makefiles is stale until
// PinPackagesVersion writes the release into each of them, changing nothing else.
func TestPinPackagesVersion(t *testing.T) {
	root := t.TempDir()
	copyFile := func(rel string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	makefiles, err := filepath.Glob(filepath.Join(repoRoot, "packages", "system", "*", "Makefile"))
	if err != nil || len(makefiles) < 2 {
		t.Fatalf("package Makefiles: %v, %v", makefiles, err)
	}
	for _, m := range makefiles {
		rel, _ := filepath.Rel(repoRoot, m)
		copyFile(rel)
	}
	copyFile(OutOfTreeFile)
	if err := PinOutOfTree(root, "registry.example/cozystack/"+PackagesArtifact+":v9.8.7@sha256:"+strings.Repeat("a", 64)); err != nil {
		t.Fatal(err)
	}
	if v, err := OutOfTreeVersion(root); err != nil || v != "v9.8.7" {
		t.Fatalf("out-of-tree version %q, %v", v, err)
	}
	stale, err := StalePackagesVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != len(makefiles) || !strings.Contains(stale[0], "RESERVED_IPS_VERSION is ") || !strings.Contains(stale[0], "want v9.8.7") {
		t.Fatalf("stale %q, want every Makefile", stale)
	}
	before := map[string]string{}
	for _, m := range makefiles {
		rel, _ := filepath.Rel(repoRoot, m)
		data, _ := os.ReadFile(filepath.Join(root, rel))
		before[rel] = string(data)
	}
	if err := PinPackagesVersion(root, "v9.8.7"); err != nil {
		t.Fatal(err)
	}
	if stale, err := StalePackagesVersion(root); err != nil || len(stale) != 0 {
		t.Fatalf("after PinPackagesVersion: %q, %v", stale, err)
	}
	for rel, old := range before {
		data, _ := os.ReadFile(filepath.Join(root, rel))
		if want := packagesVersionLine.ReplaceAllString(old, "${1}v9.8.7"); string(data) != want || !strings.Contains(string(data), "\nRESERVED_IPS_VERSION ?= v9.8.7\n") {
			t.Errorf("%s after PinPackagesVersion:\n%s", rel, data)
		}
	}
	// A Makefile without the line is an error, not a silent skip.
	if err := os.WriteFile(filepath.Join(root, "packages", "system", "address-controller", "Makefile"), []byte("update:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PinPackagesVersion(root, "v9.8.8"); err == nil {
		t.Fatal("a Makefile without RESERVED_IPS_VERSION was accepted")
	}
}
