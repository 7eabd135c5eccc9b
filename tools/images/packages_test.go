package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpdatePackageValues(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"address-controller", "metallb-iad"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "packages", "system", n, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "system", n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "system", n, "values.yaml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref := "registry.example.org/cozystack/metallb-iad:v1.0.0@sha256:" + strings.Repeat("b", 64)
	if err := UpdatePackageValues(dir, "metallb-iad", ref); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "system", "metallb-iad", "values.yaml"))
	if !strings.Contains(string(data), "  image: "+ref+"\n") || !strings.Contains(string(data), "metallbNamespace: cozy-metallb") {
		t.Fatalf("values after update:\n%s", data)
	}
	if err := UpdatePackageValues(dir, "nonexistent", ref); err == nil {
		t.Fatal("updating a missing package succeeded")
	}
}
