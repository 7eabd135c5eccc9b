package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The release files: the image list one digest reference a line, the chart list, and a hauler
// manifest with the images by digest and the charts by OCI repository and version.
func TestReleaseFiles(t *testing.T) {
	dir := t.TempDir()
	d := "@sha256:" + strings.Repeat("a", 64)
	r := ReleaseFiles{
		Images:   Shipped{"metallb-iad": "ghcr.io/cozystack/metallb-iad:v1" + d, "address-controller": "ghcr.io/cozystack/address-controller:v1" + d},
		Charts:   map[string]string{"address-controller": "ghcr.io/cozystack/charts/address-controller:1.0.0" + d},
		Packages: "ghcr.io/cozystack/reserved-ips-packages:v1" + d,
		Version:  "v1.0.0", MetalLB: "v0.16.1", UpgradeNotes: "Run the migration.",
	}
	// Each image has its own digest, so that the notes are seen to name every one.
	r.Images["metallb-iad"] = "ghcr.io/cozystack/metallb-iad:v1@sha256:" + strings.Repeat("b", 64)
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, ReleaseNotesFile))
	if err != nil {
		t.Fatalf("no release notes: %v", err)
	}
	for _, want := range []string{"# reserved-ips v1.0.0", "| address-controller | v1.0.0 | 1.0.0 |", "| metallb-iad | v1.0.0 | 1.0.0 |",
		"MetalLB v0.16.1", "`" + r.Images["address-controller"] + "`", "`" + r.Images["metallb-iad"] + "`",
		"`oci://" + r.Charts["address-controller"] + "`", "`oci://" + r.Packages + "`", "## Upgrade notes\n\nRun the migration.\n"} {
		if !strings.Contains(string(notes), want) {
			t.Errorf("the release notes lack %q:\n%s", want, notes)
		}
	}
	for _, ref := range r.Images {
		if !strings.Contains(string(notes), ref[strings.Index(ref, "@")+1:]) {
			t.Errorf("the release notes do not name the digest of %s", ref)
		}
	}
	list, _ := os.ReadFile(filepath.Join(dir, "images.txt"))
	if string(list) != r.Images["address-controller"]+"\n"+r.Images["metallb-iad"]+"\n" {
		t.Errorf("images.txt %q", list)
	}
	charts, _ := os.ReadFile(filepath.Join(dir, "charts.txt"))
	if string(charts) != "oci://"+r.Charts["address-controller"]+"\noci://"+r.Packages+"\n" {
		t.Errorf("charts.txt %q", charts)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "hauler.yaml"))
	docs := strings.Split(strings.TrimPrefix(string(data), "---\n"), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("hauler.yaml:\n%s", data)
	}
	var imgs, chs struct {
		APIVersion, Kind string
		Spec             struct {
			Images []struct{ Name string }
			Charts []struct{ Name, RepoURL, Version string }
		}
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &imgs); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[1]), &chs); err != nil {
		t.Fatal(err)
	}
	if imgs.APIVersion != "content.hauler.cattle.io/v1" || imgs.Kind != "Images" || len(imgs.Spec.Images) != 2 || imgs.Spec.Images[1].Name != r.Images["metallb-iad"] {
		t.Errorf("hauler Images %+v", imgs)
	}
	if chs.Kind != "Charts" || len(chs.Spec.Charts) != 1 || chs.Spec.Charts[0].RepoURL != "oci://ghcr.io/cozystack/charts" || chs.Spec.Charts[0].Version != "1.0.0" ||
		chs.Spec.Charts[0].Name != "address-controller" {
		t.Errorf("hauler Charts %+v", chs)
	}
}

// PinOutOfTree points the out-of-tree OCIRepository at a pushed artifact, adding the digest line
// on the first release.
func TestPinOutOfTree(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(repoRoot, OutOfTreeFile))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(dir, filepath.Dir(OutOfTreeFile)), 0o755)
	if err := os.WriteFile(filepath.Join(dir, OutOfTreeFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1.0.0", "v1.0.1"} {
		d := "sha256:" + strings.Repeat(v[len(v)-1:], 64)
		if err := PinOutOfTree(dir, "127.0.0.1:5000/x/reserved-ips-packages:"+v+"@"+d); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, OutOfTreeFile))
		if !strings.Contains(string(got), "  url: oci://127.0.0.1:5000/x/reserved-ips-packages\n  ref:\n    tag: "+v+"\n    digest: "+d+"\n") {
			t.Fatalf("after pinning %s:\n%s", v, got)
		}
	}
	if err := PinOutOfTree(dir, "no-digest:v1"); err == nil {
		t.Error("a reference without digest is taken")
	}
}

// The upgrade notes come from the "Next release" section of docs/upgrading.md, up to the next
// section.
func TestReadUpgradeNotes(t *testing.T) {
	notes, err := ReadUpgradeNotes(repoRoot)
	if err != nil || notes == "" || strings.Contains(notes, "## ") {
		t.Fatalf("%q, %v", notes, err)
	}
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, UpgradeNotesFile), []byte("# Upgrading\n\n## Next release\n\nDo this.\n\n## v0.1.0\n\nOld.\n"), 0o644)
	if notes, err := ReadUpgradeNotes(dir); err != nil || notes != "Do this." {
		t.Errorf("%q, %v; want the section alone", notes, err)
	}
	_ = os.WriteFile(filepath.Join(dir, UpgradeNotesFile), []byte("# Upgrading\n"), 0o644)
	if _, err := ReadUpgradeNotes(dir); err == nil {
		t.Error("a file without the section should be refused")
	}
}
