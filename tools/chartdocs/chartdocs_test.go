package chartdocs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// chartCopy copies charts/<name> of the checkout into a temporary directory.
func chartCopy(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := binaries.CopyTree(filepath.Join("..", "..", "charts", name), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// helm-docs renders the README from README.md.gotmpl: the prose as written, and a row per value
// in values.yaml's order with its default and its "# --" comment, continuation lines joined.
func TestRenderKeepsTheProseAndTablesTheValues(t *testing.T) {
	dir := chartCopy(t, "address-controller")
	out, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# address-controller chart\n",
		"**Requires Kubernetes 1.33 or newer**",
		"| Key | Type | Default | Description |",
		"| workers | int | `16` | Concurrent reconciles per controller. |",
		"| deploy | bool | `true` | Run the controller in the cluster. Set to false to install only the API, RBAC and ServiceAccount and run the controller elsewhere (the project's sandbox does). |",
		"## High availability\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the rendered README lacks %q", want)
		}
	}
	if strings.Index(out, "| nameOverride |") > strings.Index(out, "| tenantRoles.enabled |") {
		t.Error("the values are not in values.yaml's order")
	}
}

// A changed default or comment makes the README stale, and Update brings it back in step.
func TestGenerateFindsAStaleTable(t *testing.T) {
	dir := chartCopy(t, "address-controller")
	if err := Update(dir); err != nil {
		t.Fatal(err)
	}
	if current, regenerated, err := Generate(dir); err != nil || current != regenerated {
		t.Fatalf("fresh after Update: %v", err)
	}
	edit(t, filepath.Join(dir, "values.yaml"), "\nworkers: 16\n", "\nworkers: 8\n")
	current, regenerated, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if current == regenerated || !strings.Contains(regenerated, "| workers | int | `8` |") {
		t.Fatal("a changed default leaves the README fresh")
	}
	if err := Update(dir); err != nil {
		t.Fatal(err)
	}
	if current, regenerated, _ := Generate(dir); current != regenerated {
		t.Fatal("stale after Update")
	}
}

// A value without a "# --" comment, or one whose comment helm-docs cannot read (text with " --"
// in it reads to helm-docs as another key's comment), fails the rendering, and the README is
// left as it was.
func TestUndocumentedValueIsAnError(t *testing.T) {
	for _, tc := range []struct{ old, new string }{
		{"# -- Concurrent reconciles per controller.\n", "# Concurrent reconciles per controller.\n"},
		{"# -- Concurrent reconciles per controller.\n", "# -- Concurrent reconciles, as with --workers.\n"},
	} {
		dir := chartCopy(t, "address-controller")
		before, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		edit(t, filepath.Join(dir, "values.yaml"), tc.old, tc.new)
		if err := Update(dir); err == nil || !strings.Contains(err.Error(), `value workers has no \"# --\" comment`) {
			t.Errorf("%q: error %v, want one naming workers", tc.new, err)
		}
		if after, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(after) != string(before) {
			t.Errorf("%q: the README was changed by a failed rendering", tc.new)
		}
	}
}

// On a cold module cache the go command reports its downloads on stderr before helm-docs runs:
// not a warning about the chart.
func TestWarningsLeaveOutTheGoCommandsDownloads(t *testing.T) {
	if got := warnings("go: downloading github.com/norwoodj/helm-docs v1.14.2\ngo: downloading golang.org/x/text v0.14.0\n"); got != "" {
		t.Fatalf("downloads taken for warnings: %q", got)
	}
	if got := warnings("go: downloading x v1\nlevel=warning msg=\"unknown key\"\n"); got != `level=warning msg="unknown key"` {
		t.Fatalf("got %q", got)
	}
}
