package charts

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/chartdocs"
	"github.com/cozystack/reserved-ips/tools/images"
)

// copyTree copies the directory src to dst (which must not exist).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := binaries.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}

// packagesAlone copies packages/ — and nothing else of the checkout — into a temporary
// directory, the way Cozystack builds its package artifact, and returns the copy's root.
func packagesAlone(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "packages")
	copyTree(t, filepath.Join(root, "packages"), dst)
	return dst
}

// The wrappers render from a copy of packages/ alone, with the wrapper's own values (digest-
// pinned image, Cozystack namespaces and policy settings), and a Package's component values reach
// the wrapped chart. Helm hands every subchart a `global` value, which the charts' schemas accept.
func TestWrappersRenderFromPackagesAlone(t *testing.T) {
	pkgs := packagesAlone(t)
	mirror := "mirror.example.org/cozystack/%s@sha256:" + strings.Repeat("b", 64)
	for _, name := range []string{"address-controller", "metallb-iad"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(pkgs, "system", name)
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			var wrapperValues map[string]map[string]any
			data, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, &wrapperValues); err != nil {
				t.Fatal(err)
			}
			image := images.ImageRef(wrapperValues[name]["image"])
			if !strings.Contains(image, "@sha256:") {
				t.Fatalf("wrapper %s pins no digest: %q", name, image)
			}

			for _, values := range []map[string]any{
				nil,
				{"global": map[string]any{"cozystack": map[string]any{"cluster": "example"}}},
			} {
				objs := renderChart(t, c, name, "cozy-"+name, values)
				dep := objs["Deployment/"+name]
				if dep == nil {
					t.Fatalf("the wrapper renders no Deployment of %s: %v", name, keys(objs))
				}
				if got := dig(dep, "spec", "template", "spec", "containers", 0, "image"); got != image {
					t.Errorf("Deployment image %v, want the wrapper's %s", got, image)
				}
				if name == "address-controller" && objs["CustomResourceDefinition/ipaddressclaims.local.sdn.cozystack.io"] == nil {
					t.Error("the wrapper renders no CRDs")
				}
				if name == "metallb-iad" {
					args := strings.Join(toStrings(dig(dep, "spec", "template", "spec", "containers", 0, "args")), " ")
					if !strings.Contains(args, "--metallb-namespace=cozy-metallb") {
						t.Errorf("args %s lack cozy-metallb", args)
					}
					if got := toStrings(dig(objs["ValidatingAdmissionPolicyBinding/metallb-iad-service-pins"], "spec", "validationActions")); strings.Join(got, ",") != "Deny" {
						t.Errorf("policy actions %v, want Deny", got)
					}
				}
			}

			// A Package's values (spec.components.<name>.values) arrive under the subchart's key.
			objs := renderChart(t, c, name, "cozy-"+name, map[string]any{name: map[string]any{"image": strings.Replace(mirror, "%s", name, 1)}})
			if got := dig(objs["Deployment/"+name], "spec", "template", "spec", "containers", 0, "image"); got != strings.Replace(mirror, "%s", name, 1) {
				t.Errorf("Package image value not used: %v", got)
			}
		})
	}
}

// The wrapper pins the same kubeVersion as the chart it wraps (Helm checks only the chart being
// installed, which on Cozystack is the wrapper) and carries the vendored chart at its version.
func TestWrappersKubeVersion(t *testing.T) {
	for _, name := range []string{"address-controller", "metallb-iad"} {
		w, err := Load(filepath.Join(root, "packages", "system", name))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Load(Dir(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if w.Metadata.KubeVersion == "" || w.Metadata.KubeVersion != c.Metadata.KubeVersion {
			t.Errorf("%s: wrapper kubeVersion %q, chart %q", name, w.Metadata.KubeVersion, c.Metadata.KubeVersion)
		}
		// As Cozystack's wrappers: the chart under charts/ is not declared (Helm loads it all the same).
		if len(w.Metadata.Dependencies) != 0 || len(w.Dependencies()) != 1 || w.Dependencies()[0].Name() != name ||
			w.Dependencies()[0].Metadata.Version != c.Metadata.Version {
			t.Errorf("%s: the wrapper must carry the vendored chart %s %s undeclared: %+v", name, name, c.Metadata.Version, w.Metadata.Dependencies)
		}
	}
}

// The vendored copy under packages/system/<name>/charts/<name> is byte for byte charts/<name>
// (make vendor-charts; make check-vendored fails the same way).
func TestVendoredChartsAreFresh(t *testing.T) {
	for _, name := range []string{"address-controller", "metallb-iad"} {
		src := Dir(root, name)
		dst := filepath.Join(root, "packages", "system", name, "charts", name)
		seen := map[string]bool{}
		err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			seen[rel] = true
			want, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			got, err := os.ReadFile(filepath.Join(dst, rel))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: vendored %s is missing or stale; run make vendor-charts", name, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = filepath.WalkDir(dst, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dst, path)
				if !seen[rel] {
					t.Errorf("%s: vendored %s is not in charts/%s; run make vendor-charts", name, rel, name)
				}
			}
			return nil
		})
	}
}

// Each chart README's value table is what make chart-docs generates from values.yaml (make
// check-chart-docs fails the same way, from git status; this runs on any tree, a release's too).
func TestChartDocsAreFresh(t *testing.T) {
	for _, name := range []string{"address-controller", "metallb-iad"} {
		current, regenerated, err := chartdocs.Generate(Dir(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if current != regenerated {
			t.Errorf("%s: the README's value table is stale; run make chart-docs", name)
		}
	}
}

func readme(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Dir(root, name), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }
