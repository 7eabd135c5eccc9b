package charts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/images"
)

// The wrapper charts ship the digest references of images.yaml, reach the wrapped chart's
// image value as <component>.image, and render with the package's namespace settings.
func TestPackageWrappers(t *testing.T) {
	// The shipped references come from images.yaml, the one source of truth (issue 14, defect 7).
	shipped, err := images.ReadShipped(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range shipped {
		data, err := os.ReadFile(filepath.Join(root, "packages", "system", name, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var values map[string]map[string]any
		if err := yaml.Unmarshal(data, &values); err != nil {
			t.Fatal(err)
		}
		if images.ImageRef(values[name]["image"]) != want {
			t.Errorf("%s.image = %v, want %s", name, values[name]["image"], want)
		}
		// The wrapped chart renders with the package's values (the chart directory stands in
		// for the dependency the packaging vendors).
		c, err := Load(Dir(root, name))
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := Render(c, "cozy-"+name, values[name])
		if err != nil {
			t.Fatalf("%s with the package values: %v", name, err)
		}
		if !strings.Contains(manifest, want) {
			t.Errorf("%s: the rendered Deployment does not use %s", name, want)
		}
		if name == "metallb-iad" && (!strings.Contains(manifest, "--metallb-namespace=cozy-metallb") || !strings.Contains(manifest, `validationActions: ["Deny"]`)) {
			t.Errorf("metallb-iad package must set cozy-metallb and Deny:\n%s", manifest)
		}
	}
	// PackageSources: namespaces, CRD upgrades, dependencies.
	src := func(name string) map[string]any {
		data, err := os.ReadFile(filepath.Join(root, "packages", "core", "platform", "sources", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	core := src("address-controller")
	if dig(core, "spec", "variants", 0, "components", 0, "install", "upgradeCRDs") != "CreateReplace" ||
		dig(core, "spec", "variants", 0, "components", 0, "install", "namespace") != "cozy-address-controller" {
		t.Errorf("cozystack.address-controller source: %v", core["spec"])
	}
	drv := src("metallb-iad")
	deps := toStrings(dig(drv, "spec", "variants", 0, "dependsOn"))
	if !slices.Contains(deps, "cozystack.address-controller") || !slices.Contains(deps, "cozystack.metallb") ||
		dig(drv, "spec", "variants", 0, "components", 0, "install", "namespace") != "cozy-metallb-iad" {
		t.Errorf("cozystack.metallb-iad source: %v", drv["spec"])
	}
}
