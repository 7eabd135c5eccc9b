package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var repoRoot = filepath.Join("..", "..")

// Every place that names a shipped image names the reference in images.yaml: the packages'
// wrapper values, the charts' values and READMEs, the vendored charts, the docs.
func TestShippedImagesAreDerivedEverywhere(t *testing.T) {
	s, err := ReadShipped(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files, err := DerivedFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// At least the two wrappers' and the two charts' values are derived places.
	var values int
	for _, f := range files {
		if _, key := imageValue(repoRoot, f); key != nil {
			values++
		}
	}
	if values < 4 {
		t.Fatalf("only %d values files among the derived places %v", values, files)
	}
	stale, err := Stale(repoRoot, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Fatalf("places that do not name the shipped images (run `make sync-images`):\n  %s", strings.Join(stale, "\n  "))
	}
}

// copyDerived copies images.yaml and every derived place into a fresh root.
func copyDerived(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := DerivedFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, filepath.Join(repoRoot, ShippedFile)) {
		rel, _ := filepath.Rel(repoRoot, f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A release to another registry moves every derived place, and leaves a mirror's reference in
// an example alone.
func TestSyncMovesEveryDerivedPlace(t *testing.T) {
	dir := copyDerived(t)
	old, err := ReadShipped(dir)
	if err != nil {
		t.Fatal(err)
	}
	mirrorRef := "mirror.example.org/cozystack/metallb-iad:v9@sha256:" + strings.Repeat("c", 64)
	doc := filepath.Join(dir, "docs", "example.md")
	_ = os.MkdirAll(filepath.Dir(doc), 0o755)
	if err := os.WriteFile(doc, []byte("shipped: `"+old["metallb-iad"]+"`\nmirror: `"+mirrorRef+"`\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	next := Shipped{
		"address-controller": "127.0.0.1:5000/test/address-controller:v1.2.3@sha256:" + strings.Repeat("a", 64),
		"metallb-iad":        "127.0.0.1:5000/test/metallb-iad:v1.2.3@sha256:" + strings.Repeat("b", 64),
	}
	if err := WriteShipped(dir, next); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShipped(dir); err != nil || got["metallb-iad"] != next["metallb-iad"] {
		t.Fatalf("images.yaml after the write: %v, %v", got, err)
	}
	// Before the sync every values file is stale, and the check says which.
	stale, err := Stale(dir, next)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"packages/system/address-controller/values.yaml", "packages/system/metallb-iad/values.yaml",
		"charts/address-controller/values.yaml", "charts/metallb-iad/values.yaml"} {
		if !strings.Contains(strings.Join(stale, "\n"), want) {
			t.Errorf("the stale check misses %s: %v", want, stale)
		}
	}
	changed, err := Sync(dir, old, next)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) < 5 {
		t.Errorf("changed only %v", changed)
	}
	files, _ := DerivedFiles(dir)
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, n := range []string{"address-controller", "metallb-iad"} {
			if strings.Contains(string(data), old[n]) {
				t.Errorf("%s still names %s", f, old[n])
			}
		}
	}
	data, _ := os.ReadFile(doc)
	if !strings.Contains(string(data), mirrorRef) || !strings.Contains(string(data), next["metallb-iad"]) {
		t.Errorf("docs after the sync:\n%s", data)
	}
	values, _ := os.ReadFile(filepath.Join(dir, "packages", "system", "metallb-iad", "values.yaml"))
	if !strings.Contains(string(values), "    registry: 127.0.0.1:5000\n    repository: test/metallb-iad\n    tag: v1.2.3\n    digest: sha256:"+strings.Repeat("b", 64)+"\n") ||
		!strings.Contains(string(values), "metallbNamespace: cozy-metallb") {
		t.Fatalf("wrapper values after the sync:\n%s", values)
	}
	if stale, _ := Stale(dir, next); len(stale) > 0 {
		t.Fatalf("stale after the sync: %v", stale)
	}
}

func TestReadShippedInsistsOnDigests(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, ShippedFile), []byte("address-controller: ghcr.io/cozystack/address-controller:v1\nmetallb-iad: x@sha256:"+strings.Repeat("a", 64)+"\n"), 0o644)
	if _, err := ReadShipped(dir); err == nil || !strings.Contains(err.Error(), "not a digest reference") {
		t.Fatalf("ReadShipped accepted a tag: %v", err)
	}
}
