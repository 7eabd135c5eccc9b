package charts

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// platformHarness assembles a chart shaped like Cozystack's platform chart: the stand-in for the
// platform's own helpers, values layout and system bundle (testdata/platform), the entry inserted
// unchanged into the bundle's list of optional packages, and the PackageSources under sources/.
func platformHarness(t *testing.T) *chart.Chart {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "platform")
	copyTree(t, filepath.Join("testdata", "platform"), dir)
	copyTree(t, filepath.Join(root, "packages", "core", "platform", "sources"), filepath.Join(dir, "sources"))
	// The pull request's one edit of a Cozystack file: the entry, inline in the system bundle's
	// list of optional packages.
	entry, err := os.ReadFile(filepath.Join(root, systemEntry))
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "templates", "bundles", "system.yaml")
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "# OPTIONAL\n") {
		t.Fatal("the stand-in system bundle has no OPTIONAL marker")
	}
	if err := os.WriteFile(bundle, []byte(strings.Replace(string(data), "# OPTIONAL\n", string(entry), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// systemEntry holds the lines that go into Cozystack's templates/bundles/system.yaml.
const systemEntry = "packages/core/platform/bundles/system-entry.yaml"

// ours are the Packages the entry emits.
var ours = []string{"cozystack.address-controller", "cozystack.metallb-iad"}

type emissionCase struct {
	name     string
	system   bool
	variant  string
	enabled  []any
	disabled []any
	want     []string
}

var both = []any{"cozystack.address-controller", "cozystack.metallb-iad"}

var emissionCases = []emissionCase{
	{"isp-full, both enabled", true, "isp-full", both, nil, []string{"cozystack.address-controller", "cozystack.metallb-iad"}},
	{"isp-full-generic, both enabled", true, "isp-full-generic", both, nil, []string{"cozystack.address-controller", "cozystack.metallb-iad"}},
	{"isp-hosted: no MetalLB, no driver", true, "isp-hosted", both, nil, []string{"cozystack.address-controller"}},
	// bundles.enabledPackages never emits MetalLB: the platform emits it only with the common
	// system packages of the isp-full variants, so naming it there brings no driver.
	{"isp-hosted that lists MetalLB: still no driver", true, "isp-hosted", append(slices.Clone(both), "cozystack.metallb"), nil,
		[]string{"cozystack.address-controller"}},
	{"isp-full-generic, MetalLB disabled", true, "isp-full-generic", both, []any{"cozystack.metallb"}, []string{"cozystack.address-controller"}},
	{"MetalLB disabled", true, "isp-full", both, []any{"cozystack.metallb"}, []string{"cozystack.address-controller"}},
	{"only the core", true, "isp-full", []any{"cozystack.address-controller"}, nil, []string{"cozystack.address-controller"}},
	// docs/design.md#packaging: a driver without the core would wait on a missing dependency for
	// ever.
	{"only the driver: nothing", true, "isp-full", []any{"cozystack.metallb-iad"}, nil, nil},
	{"core disabled: no driver either", true, "isp-full", both, []any{"cozystack.address-controller"}, nil},
	{"driver disabled", true, "isp-full", both, []any{"cozystack.metallb-iad"}, []string{"cozystack.address-controller"}},
	{"nothing enabled", true, "isp-full", nil, nil, nil},
	// The platform's default variant (values.yaml alone) turns the system bundle off: packages are
	// then added with cozypkg (TestCozypkgInstallsTheDependencies).
	{"platform variant default: system bundle off", false, "isp-full", both, nil, nil},
}

func (tc emissionCase) values() map[string]any {
	return map[string]any{"bundles": map[string]any{
		"system":          map[string]any{"enabled": tc.system, "variant": tc.variant},
		"enabledPackages": tc.enabled, "disabledPackages": tc.disabled,
	}}
}

// platformEmits is what Cozystack's platform chart itself emits in a configuration, as far as
// our sources depend on it (packages/core/platform/templates/bundles/system.yaml and the
// common-packages helper of its _helpers.tpl): the networking package on the isp-full,
// isp-full-generic and isp-hosted variants, MetalLB only with the
// common system packages of the two isp-full variants, and nothing that
// bundles.disabledPackages names. bundles.enabledPackages adds neither: neither is optional.
func (tc emissionCase) platformEmits() []string {
	if !tc.system {
		return nil
	}
	var out []string
	emit := func(name string) {
		if !slices.Contains(tc.disabled, any(name)) {
			out = append(out, name)
		}
	}
	switch tc.variant {
	case "isp-full", "isp-full-generic":
		emit("cozystack.networking")
		emit("cozystack.metallb")
	case "isp-hosted":
		emit("cozystack.networking")
	}
	return out
}

// renderPackages renders the harness and returns the emitted Packages (all kept on removal) and
// the PackageSources by name.
func renderPackages(t *testing.T, c *chart.Chart, values map[string]any) ([]string, map[string]map[string]any) {
	t.Helper()
	manifest, err := RenderRelease(c, "platform", "cozy-system", values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeapply.Decode([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var packages []string
	sources := map[string]map[string]any{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Package":
			if slices.Contains(ours, o.GetName()) && (o.GetAnnotations()["helm.sh/resource-policy"] != "keep" || dig(o.Object, "spec", "variant") != "default") {
				t.Errorf("Package %s: annotations %v, spec %v", o.GetName(), o.GetAnnotations(), o.Object["spec"])
			}
			packages = append(packages, o.GetName())
		case "PackageSource":
			sources[o.GetName()] = o.Object
		default:
			t.Errorf("unexpected object %s/%s", o.GetKind(), o.GetName())
		}
	}
	return packages, sources
}

// The platform's emission rule, dropped into a chart with the platform's values layout
// (bundles.system.variant) and optional-package helper: which Packages each variant and bundle
// setting emits. The driver is never emitted without the core.
func TestPackageEmission(t *testing.T) {
	c := platformHarness(t)
	for _, tc := range emissionCases {
		t.Run(tc.name, func(t *testing.T) {
			all, _ := renderPackages(t, c, tc.values())
			var got []string
			for _, p := range all {
				if slices.Contains(ours, p) {
					got = append(got, p)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("emitted %v, want %v", got, tc.want)
			}
		})
	}
}

// Every dependency of every emitted Package is emitted too, in every configuration: a Package
// waiting on one that never comes keeps the platform release from becoming Ready. The core
// depends on the networking package, as Cozystack's own sources of system packages do.
func TestPackageSourceDependencies(t *testing.T) {
	c := platformHarness(t)
	_, sources := renderPackages(t, c, emissionCases[0].values())
	for _, name := range []string{"cozystack.address-controller", "cozystack.metallb-iad"} {
		if sources[name] == nil {
			t.Fatalf("PackageSource %s is not rendered by the platform's sources glob: %v", name, slices.Collect(maps.Keys(sources)))
		}
		if dig(sources[name], "spec", "variants", 0, "name") != "default" {
			t.Errorf("%s: first variant is not default", name)
		}
	}
	deps := func(name string) []string { return toStrings(dig(sources[name], "spec", "variants", 0, "dependsOn")) }
	if !slices.Contains(deps("cozystack.address-controller"), "cozystack.networking") {
		t.Errorf("cozystack.address-controller depends on %v, want cozystack.networking among them", deps("cozystack.address-controller"))
	}
	// As Cozystack's own sources list the networking package directly even where another
	// dependency implies it (cozystack.metallb's source itself depends on it).
	for _, want := range []string{"cozystack.networking", "cozystack.address-controller", "cozystack.metallb"} {
		if !slices.Contains(deps("cozystack.metallb-iad"), want) {
			t.Errorf("cozystack.metallb-iad depends on %v, want %s among them", deps("cozystack.metallb-iad"), want)
		}
	}
	for _, tc := range emissionCases {
		all, _ := renderPackages(t, c, tc.values())
		for _, p := range all {
			if !slices.Contains(ours, p) {
				continue
			}
			for _, d := range deps(p) {
				if !slices.Contains(all, d) {
					t.Errorf("%s: %s is emitted but its dependency %s is not (emitted: %v)", tc.name, p, d, all)
				}
			}
		}
		// The stand-in emits what the model of Cozystack's bundle says.
		for _, p := range tc.platformEmits() {
			if !slices.Contains(all, p) {
				t.Errorf("%s: the stand-in does not emit %s", tc.name, p)
			}
		}
	}
}

// The fragment uses only what Cozystack's platform chart provides: its optional-package helper,
// its bundle values, and templates it defines itself.
func TestEmissionFragmentUsesOnlyPlatformInterfaces(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, systemEntry))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`define "([^"]+)"`).FindAllStringSubmatch(text, -1) {
		defined[m[1]] = true
	}
	platformHelpers := map[string]bool{"cozystack.platform.package.optional.default": true, "cozystack.platform.package.optional": true}
	for _, m := range regexp.MustCompile(`include "([^"]+)"`).FindAllStringSubmatch(text, -1) {
		if !defined[m[1]] && !platformHelpers[m[1]] {
			t.Errorf("the fragment includes %q, which neither it nor the platform chart defines", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`\.Values((?:\.[A-Za-z]+)+)`).FindAllStringSubmatch(text, -1) {
		if !strings.HasPrefix(m[1], ".bundles") {
			t.Errorf("the fragment reads .Values%s; the platform keeps the bundle settings under .Values.bundles", m[1])
		}
	}
	if strings.Contains(text, ".Values.variant") {
		t.Error("the fragment reads .Values.variant; the platform's variant is bundles.system.variant")
	}
}

// cozystackSources are PackageSources of Cozystack's platform chart that ours depend on
// (packages/core/platform/sources there), with their own dependencies.
var cozystackSources = map[string][]string{
	"cozystack.networking": nil, // its variants' dependencies are Cozystack's own business
	"cozystack.metallb":    {"cozystack.networking"},
}

// On the platform's default variant nothing is emitted, and cozypkg adds a package with every
// PackageSource its variants depend on, dependencies first: adding the driver adds the core,
// MetalLB and networking, each before whatever depends on it, and nothing outside Cozystack's and
// our sources.
func TestCozypkgInstallsTheDependencies(t *testing.T) {
	c := platformHarness(t)
	defaultVariant := map[string]any{"bundles": map[string]any{"system": map[string]any{"enabled": false, "variant": "isp-full"},
		"enabledPackages": both}}
	emitted, sources := renderPackages(t, c, defaultVariant)
	if len(emitted) != 0 {
		t.Fatalf("the default variant emits %v", emitted)
	}
	dependsOn := map[string][]string{}
	for name, deps := range cozystackSources {
		dependsOn[name] = deps
	}
	for name, src := range sources {
		for _, v := range dig(src, "spec", "variants").([]any) {
			dependsOn[name] = append(dependsOn[name], toStrings(dig(v.(map[string]any), "dependsOn"))...)
		}
	}
	// cozypkg's walk: the closure, then an order with every dependency first.
	var order []string
	state := map[string]int{}
	var visit func(string)
	visit = func(n string) {
		deps, ok := dependsOn[n]
		if !ok {
			t.Fatalf("%s is no PackageSource of Cozystack's or ours", n)
		}
		if state[n] == 1 {
			t.Fatalf("dependency cycle through %s", n)
		}
		if state[n] == 2 {
			return
		}
		state[n] = 1
		for _, d := range deps {
			visit(d)
		}
		state[n] = 2
		order = append(order, n)
	}
	visit("cozystack.metallb-iad")
	want := []string{"cozystack.networking", "cozystack.address-controller", "cozystack.metallb", "cozystack.metallb-iad"}
	if !slices.Equal(order, want) {
		t.Errorf("cozypkg add cozystack.metallb-iad installs %v, want %v", order, want)
	}
}
