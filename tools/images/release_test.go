package images

import (
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/charts"
)

// copyCheckout copies the checkout's files (tracked and untracked, not ignored) into a fresh git
// repository and commits them, so the release runs on exactly the code under test.
func copyCheckout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "checkout under test")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@example.org",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@example.org", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@example.org",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@example.org", "GIT_CONFIG_GLOBAL=/dev/null"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
	}
	return out.String()
}

// The release, without the network: `make release` against a registry on loopback moves every
// derived place to the pushed digests so that the repository's own tests pass on the result,
// and `make release-commit` tags the commit whose packages name those digests
// (build → push → update → commit → tag).
func TestMakeReleaseOutputPassesTheRepositorysTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both images")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/cozystack"
	dir := copyCheckout(t)
	before, err := ReadShipped(dir)
	if err != nil {
		t.Fatal(err)
	}
	sbomDir := t.TempDir()
	platforms := testPlatforms()
	out := run(t, dir, nil, "make", "release", "REGISTRY="+reg, "VERSION=v0.0.0-rc.1", "SBOM_DIR="+sbomDir, "PLAIN_HTTP=1",
		"PLATFORMS="+platformList(platforms))
	after, err := ReadShipped(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range Images {
		ref := after[img.Name]
		if ref == before[img.Name] || !strings.HasPrefix(ref, reg+"/"+img.Name+":v0.0.0-rc.1@sha256:") || !strings.Contains(out, img.Name+" "+ref) {
			t.Fatalf("%s: images.yaml names %s after the release\n%s", img.Name, ref, out)
		}
		d, _ := name.NewDigest(ref)
		if _, err := remote.Head(d); err != nil {
			t.Fatalf("%s is not in the registry: %v", ref, err)
		}
	}
	sboms, _ := filepath.Glob(filepath.Join(sbomDir, "*.spdx.json"))
	if len(sboms) != len(Images)*len(platforms) {
		t.Fatalf("want an SBOM file per image and platform, got %v", sboms)
	}
	// Named <image>_<platform image digest hex>.spdx.json: the release workflow attests each
	// file to the digest in its name, and the air-gap guide verifies those (TestAirGapGuide).
	for _, img := range Images {
		d, _ := name.NewDigest(after[img.Name])
		idx, err := remote.Index(d)
		if err != nil {
			t.Fatal(err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Manifests {
			if _, err := os.Stat(filepath.Join(sbomDir, img.Name+"_"+p.Digest.Hex+".spdx.json")); err != nil {
				t.Errorf("no SBOM file named for the %s platform image %s: %v (have %v)", img.Name, p.Digest, err, sboms)
			}
		}
	}
	// The charts, published with the Helm SDK, name the released images; the release files list
	// them; the out-of-tree PackageSources' OCIRepository is pinned to the packages artifact.
	for _, img := range Images {
		c, err := charts.PullChart(reg+"/charts", img.Name, "v0.0.0-rc.1", true)
		if err != nil {
			t.Fatal(err)
		}
		if c.Metadata.Version != "0.0.0-rc.1" || ImageRef(c.Values["image"]) != after[img.Name] {
			t.Errorf("published chart %s %s names %v, want %s", img.Name, c.Metadata.Version, c.Values["image"], after[img.Name])
		}
		if !strings.Contains(out, "chart "+reg+"/charts/"+img.Name+":0.0.0-rc.1@sha256:") {
			t.Errorf("make release did not print the chart %s:\n%s", img.Name, out)
		}
	}
	release := filepath.Join(dir, "bin", "release")
	list, err := os.ReadFile(filepath.Join(release, "images.txt"))
	if err != nil || string(list) != after["address-controller"]+"\n"+after["metallb-iad"]+"\n" {
		t.Errorf("images.txt %q (%v)", list, err)
	}
	for _, img := range Images {
		c, err := charts.Load(filepath.Join(release, img.Name+"-0.0.0-rc.1.tgz"))
		if err != nil || ImageRef(c.Values["image"]) != after[img.Name] {
			t.Errorf("the chart archive of %s in the release directory: %v", img.Name, err)
		}
	}
	hauler, _ := os.ReadFile(filepath.Join(release, "hauler.yaml"))
	for _, want := range []string{"kind: Images", "- name: " + after["metallb-iad"], "kind: Charts", "repoURL: oci://" + reg + "/charts", "version: 0.0.0-rc.1"} {
		if !strings.Contains(string(hauler), want) {
			t.Errorf("hauler.yaml lacks %q:\n%s", want, hauler)
		}
	}
	// The release notes name the release, MetalLB, every image digest and every chart.
	notes, err := os.ReadFile(filepath.Join(release, ReleaseNotesFile))
	if err != nil {
		t.Fatalf("make release wrote no release notes: %v", err)
	}
	for _, img := range Images {
		if !strings.Contains(string(notes), "`"+after[img.Name]+"`") || !strings.Contains(string(notes), "oci://"+reg+"/charts/"+img.Name+":0.0.0-rc.1@sha256:") {
			t.Errorf("the release notes do not name %s's image %s and chart:\n%s", img.Name, after[img.Name], notes)
		}
	}
	if !strings.Contains(string(notes), "# reserved-ips v0.0.0-rc.1") || !strings.Contains(string(notes), "MetalLB v") {
		t.Errorf("the release notes do not name the release and MetalLB:\n%s", notes)
	}
	oot, _ := os.ReadFile(filepath.Join(dir, OutOfTreeFile))
	if !regexp.MustCompile(`url: oci://` + regexp.QuoteMeta(reg) + `/reserved-ips-packages\n  ref:\n    tag: v0.0.0-rc.1\n    digest: sha256:[0-9a-f]{64}\n`).Match(oot) {
		t.Errorf("%s not pinned to the packages artifact:\n%s", OutOfTreeFile, oot)
	}

	// The repository's own tests pass on the released tree.
	run(t, dir, nil, "go", "run", "./tools/cmd/images", "check")
	run(t, dir, []string{"GOFLAGS=-buildvcs=false -trimpath"}, "go", "test", "-count=1",
		"-run", "TestShippedImagesAreDerivedEverywhere|TestPackageWrappers|TestPackageImagesReadsTheShippedReferences|TestChart|"+
			"TestWrappers|TestVendoredChartsAreFresh|TestChartDocsAreFresh|TestPackagesNameTheCheckoutsRelease",
		"./tools/images/", "./tools/charts/", "./tools/mirror/")

	// Commit and tag: the tag points at the commit whose packages name the pushed digests.
	run(t, dir, nil, "make", "release-commit", "VERSION=v0.0.0-rc.1")
	if git(t, dir, "rev-parse", "v0.0.0-rc.1^{commit}") != git(t, dir, "rev-parse", "HEAD") {
		t.Fatal("the tag is not on the release commit")
	}
	if status := git(t, dir, "status", "--porcelain"); status != "" {
		t.Fatalf("the release left changes out of the commit:\n%s", status)
	}
	if !strings.Contains(git(t, dir, "show", "v0.0.0-rc.1:"+OutOfTreeFile), "tag: v0.0.0-rc.1") {
		t.Errorf("%s at the tag is not pinned to the release", OutOfTreeFile)
	}
	// The packages' Makefiles name the release, so the packages artifact and the tagged commit
	// pull that release's charts and build its source.
	for _, img := range Images {
		f := "packages/system/" + img.Name + "/Makefile"
		if !strings.Contains(git(t, dir, "show", "v0.0.0-rc.1:"+f), "\n"+PackagesVersionVar+" ?= v0.0.0-rc.1\n") {
			t.Errorf("%s at the tag does not name the release in %s", f, PackagesVersionVar)
		}
	}
	for _, f := range []string{"images.yaml", "packages/system/metallb-iad/values.yaml", "charts/metallb-iad/values.yaml"} {
		text := git(t, dir, "show", "v0.0.0-rc.1:"+f)
		if f != "images.yaml" {
			// The values name the image as a map (registry, repository, tag, digest).
			tmp := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			key := []string{"image"}
			if strings.HasPrefix(f, "packages/") {
				key = []string{"metallb-iad", "image"}
			}
			if text, _ = valueAt(tmp, key); text == "" {
				t.Errorf("%s at the tag names no image", f)
			}
		}
		if !strings.Contains(text, after["metallb-iad"]) {
			t.Errorf("%s at the tag does not name %s", f, after["metallb-iad"])
		}
	}
}
