package images

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The SBOM of the driver (which imports the core module of the same workspace) lists every
// module the linker used, with a package URL and, for proxy modules, the go.sum hash; the
// workspace's own modules carry the version and revision, never "(devel)".
func TestSBOMListsTheModuleGraph(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "metallb-iad")
	cmd := exec.Command("go", append(append([]string{"build"}, GoBuildFlags("v1.2.3")...), "-o", bin, "./metallb-iad/cmd/metallb-iad")...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	data, _ := os.ReadFile(bin)
	doc, err := SBOM(data, "metallb-iad", v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Options{Version: "v1.2.3", Revision: "abc123", Source: "https://github.com/cozystack/reserved-ips"})
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Packages []struct {
			Name     string `json:"name"`
			Version  string `json:"versionInfo"`
			Download string `json:"downloadLocation"`
			Refs     []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
			Checksums []struct{ Algorithm string } `json:"checksums"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range parsed.Packages {
		seen[p.Name] = true
		if p.Version == "(devel)" || strings.Contains(p.Download, "(devel)") {
			t.Errorf("%s: %s %s", p.Name, p.Version, p.Download)
		}
		if strings.HasPrefix(p.Download, "https://proxy.golang.org/") && (len(p.Checksums) == 0 || len(p.Refs) == 0) {
			t.Errorf("%s: no go.sum hash or package URL", p.Name)
		}
	}
	for _, want := range []string{"github.com/cozystack/reserved-ips/metallb-iad", "github.com/cozystack/reserved-ips/address-controller",
		"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "stdlib", "/usr/local/bin/metallb-iad"} {
		if !seen[want] {
			t.Errorf("the SBOM lacks %s", want)
		}
	}
}
