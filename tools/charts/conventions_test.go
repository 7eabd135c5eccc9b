package charts

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/images"
)

// packaged are the system packages of packages/, each wrapping the chart of the same name.
var packaged = []string{"address-controller", "metallb-iad"}

// Each system package is laid out as Cozystack's are (packages/system/<name> there): a Makefile
// with NAME and NAMESPACE that includes hack/common-envs.mk and hack/package.mk and has update,
// test and image targets; tests/ with helm-unittest suites; images/<name>/ with the image's build;
// a wrapper Chart.yaml at version 0.0.0 without dependencies; values under the wrapped chart's key.
func TestPackagesFollowCozystackConventions(t *testing.T) {
	for _, name := range packaged {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, "packages", "system", name)
			mk := readText(t, filepath.Join(dir, "Makefile"))
			for _, want := range []string{
				"export NAME=" + name + "\n",
				"export NAMESPACE=cozy-$(NAME)\n",
				"include ../../../hack/common-envs.mk\n",
				"include ../../../hack/package.mk\n",
				"\ntest:\n\thelm unittest .\n",
				"\nupdate:\n",
				"\nimage: ",
			} {
				if !strings.Contains(mk, want) {
					t.Errorf("Makefile lacks %q", want)
				}
			}
			if strings.Index(mk, "include ../../../hack/common-envs.mk") > strings.Index(mk, "include ../../../hack/package.mk") {
				t.Error("Makefile includes package.mk before common-envs.mk")
			}

			suites, _ := filepath.Glob(filepath.Join(dir, "tests", "*_test.yaml"))
			if len(suites) == 0 {
				t.Error("no helm-unittest suite under tests/*_test.yaml")
			}
			for _, s := range suites {
				var suite struct {
					Suite string
					Tests []map[string]any
				}
				if err := yaml.Unmarshal([]byte(readText(t, s)), &suite); err != nil || suite.Suite == "" || len(suite.Tests) == 0 {
					t.Errorf("%s is no helm-unittest suite with tests: %v", s, err)
				}
			}

			if _, err := os.Stat(filepath.Join(dir, "images", name, "Dockerfile")); err != nil {
				t.Errorf("no images/%s/Dockerfile: %v", name, err)
			}

			var meta map[string]any
			if err := yaml.Unmarshal([]byte(readText(t, filepath.Join(dir, "Chart.yaml"))), &meta); err != nil {
				t.Fatal(err)
			}
			if meta["apiVersion"] != "v2" || meta["name"] != "cozy-"+name || meta["version"] != "0.0.0" {
				t.Errorf("Chart.yaml %v, want apiVersion v2, name cozy-%s, version 0.0.0", meta, name)
			}
			for k := range meta {
				if !slices.Contains([]string{"apiVersion", "name", "version", "kubeVersion"}, k) {
					t.Errorf("Chart.yaml has %s, which Cozystack's wrappers do not", k)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "charts", name, "Chart.yaml")); err != nil {
				t.Errorf("the wrapped chart is not under charts/%s: %v", name, err)
			}

			var values map[string]any
			if err := yaml.Unmarshal([]byte(readText(t, filepath.Join(dir, "values.yaml"))), &values); err != nil {
				t.Fatal(err)
			}
			if len(values) != 1 || values[name] == nil {
				t.Errorf("values.yaml keys %v, want only %s (the wrapped chart's)", slices.Collect(mapKeys(values)), name)
			}
			img, _ := dig(values, name, "image").(map[string]any)
			if img["registry"] != "ghcr.io" || img["repository"] != "cozystack/"+name || images.ImageRef(img) == "" {
				t.Errorf("image %v, want ghcr.io/cozystack/%s as a map", img, name)
			}
		})
	}
}

// The image targets, run by make in a Cozystack-shaped tree (the stand-in hack/ of
// tools/packages/cozystack): the build of images/<name> tagged in ghcr.io/cozystack/<name>, not
// under Cozystack's own $(REGISTRY), and the digest written back into the wrapper's image map.
func TestPackageImageTargets(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	tree := t.TempDir()
	copyTree(t, filepath.Join(root, "tools", "packages", "cozystack", "hack"), filepath.Join(tree, "hack"))
	copyTree(t, filepath.Join(root, "packages"), filepath.Join(tree, "packages"))
	for _, name := range packaged {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("make", "-n", "-C", filepath.Join(tree, "packages", "system", name), "image", "IMAGE_TAG=v9.9.9")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n image: %v\n%s", err, out)
			}
			script := string(out)
			for _, want := range []string{
				"docker buildx build images/" + name,
				"--tag ghcr.io/cozystack/" + name + ":v9.9.9",
				"--metadata-file images/" + name + ".json",
				`REGISTRY_HOST="ghcr.io"`,
				`REPOSITORY="cozystack/` + name + `"`,
				`.["` + name + `"].image.registry = strenv(REGISTRY_HOST)`,
				`.["` + name + `"].image.repository = strenv(REPOSITORY)`,
				`.["` + name + `"].image.tag = strenv(TAG)`,
				`.["` + name + `"].image.digest = strenv(DIGEST)`,
			} {
				if !strings.Contains(script, want) {
					t.Errorf("make image does not run %q:\n%s", want, script)
				}
			}
			if strings.Contains(script, "ghcr.io/cozystack/cozystack/") {
				t.Errorf("make image tags under Cozystack's own registry:\n%s", script)
			}
			// The update target pulls the chart the release publishes.
			out, err = exec.Command("make", "-n", "-C", filepath.Join(tree, "packages", "system", name), "update").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "helm pull oci://ghcr.io/cozystack/charts/"+name+" --version ") {
				t.Errorf("make -n update: %v\n%s", err, out)
			}
		})
	}
}

// images/<name>/Dockerfile is the repository's <name>/Dockerfile but for where the source comes
// from: the release VERSION fetched by BuildKit, since Cozystack builds from the package alone.
func TestPackageDockerfilesBuildTheRelease(t *testing.T) {
	body := func(path string) []string {
		var out []string
		for _, l := range strings.Split(readText(t, path), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			out = append(out, l)
		}
		return out
	}
	for _, name := range packaged {
		repo := body(filepath.Join(root, name, "Dockerfile"))
		pkg := body(filepath.Join(root, "packages", "system", name, "images", name, "Dockerfile"))
		if len(repo) != len(pkg) {
			t.Fatalf("%s: the package's Dockerfile has %d lines, the repository's %d", name, len(pkg), len(repo))
		}
		for i := range repo {
			switch {
			case repo[i] == pkg[i]:
			case repo[i] == "COPY . ." && pkg[i] == "ADD https://github.com/cozystack/reserved-ips.git#${VERSION} /src":
			case repo[i] == "ARG REVISION=unknown" && pkg[i] == "ARG REVISION=${VERSION}":
			default:
				t.Errorf("%s: line %q differs from the repository's %q", name, pkg[i], repo[i])
			}
		}
	}
}

// distro-full is gone from Cozystack; nothing here treats it as a variant any more.
func TestNoDistroFullVariant(t *testing.T) {
	for _, dir := range []string{"docs", "packages", "tools", "README.md", "examples"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(path, "conventions_test.go") {
				return nil
			}
			data, err := os.ReadFile(path)
			if err == nil && bytes.Contains(data, []byte("distro-"+"full")) {
				t.Errorf("%s names the removed distro-full variant", path)
			}
			return nil
		})
	}
}

// The platform's files: PackageSources under sources/, the system-bundle entry outside templates/
// (its lines go into Cozystack's templates/bundles/system.yaml), nothing else that would render.
func TestPlatformFilesAreCozystacks(t *testing.T) {
	dir := filepath.Join(root, "packages", "core", "platform")
	if m, _ := filepath.Glob(filepath.Join(dir, "templates", "*")); len(m) != 0 {
		t.Errorf("packages/core/platform/templates holds %v; the entry goes inline into Cozystack's system bundle", m)
	}
	entry := readText(t, filepath.Join(root, systemEntry))
	if !regexp.MustCompile(`include "cozystack\.platform\.package\.optional\.default" \(list "cozystack\.address-controller" \$\)`).MatchString(entry) {
		t.Errorf("the entry does not list the core as an optional package:\n%s", entry)
	}
	for _, name := range packaged {
		var src map[string]any
		if err := yaml.Unmarshal([]byte(readText(t, filepath.Join(dir, "sources", name+".yaml"))), &src); err != nil {
			t.Fatal(err)
		}
		if dig(src, "metadata", "name") != "cozystack."+name || dig(src, "spec", "variants", 0, "components", 0, "path") != "system/"+name {
			t.Errorf("sources/%s.yaml: %v", name, src)
		}
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Monitoring is on in the wrappers, as Cozystack's own packages ship it: where the cluster serves
// the kinds (Cozystack's monitoring stack), the VMServiceScrape with the chart's scraper token and
// the PrometheusRule; where it does not, the package installs without them. No dashboard: that
// comes from Cozystack's dashboards list.
func TestWrapperMonitoringOnByDefault(t *testing.T) {
	monitoring := []string{"operator.victoriametrics.com/v1beta1/VMServiceScrape", "monitoring.coreos.com/v1/PrometheusRule",
		"grafana.integreatly.org/v1beta1/GrafanaDashboard"}
	for _, name := range packaged {
		t.Run(name, func(t *testing.T) {
			c, err := Load(filepath.Join(root, "packages", "system", name))
			if err != nil {
				t.Fatal(err)
			}
			manifest, err := RenderFor(c, name, "cozy-"+name, nil, append(slices.Clone(ServedKinds), monitoring...))
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeIndex(t, manifest)
			if dig(objs["VMServiceScrape/"+name], "spec", "endpoints", 0, "authorization", "credentials", "name") != name+"-metrics-scraper-token" ||
				objs["Secret/"+name+"-metrics-scraper-token"] == nil {
				t.Errorf("no VMServiceScrape with the scraper token: %v", keys(objs))
			}
			if objs["PrometheusRule/"+name] == nil {
				t.Errorf("no PrometheusRule: %v", keys(objs))
			}
			// The dashboard is served through Cozystack's dashboards list instead
			// (TestDashboardsTheCozystackWay).
			if objs["GrafanaDashboard/"+name] != nil || objs["ConfigMap/"+name+"-dashboard"] != nil {
				t.Error("the wrapper renders its dashboard; Cozystack's monitoring package serves it from its dashboards list")
			}
			if objs["ServiceMonitor/"+name] != nil {
				t.Error("the wrapper renders a ServiceMonitor; Cozystack scrapes with VictoriaMetrics")
			}
			manifest, err = RenderFor(c, name, "cozy-"+name, nil, ServedKinds)
			if err != nil {
				t.Fatal(err)
			}
			objs = decodeIndex(t, manifest)
			for _, kind := range []string{"VMServiceScrape", "PrometheusRule", "GrafanaDashboard"} {
				if objs[kind+"/"+name] != nil {
					t.Errorf("%s rendered where the cluster does not serve it", kind)
				}
			}
			if objs["Deployment/"+name] == nil {
				t.Error("no Deployment without the monitoring stack")
			}
		})
	}
}

// Dashboards go Cozystack's way: the JSON under dashboards/<folder>/<name>.json (the tree
// Cozystack's grafana-dashboards image serves), one <folder>/<name> line each in the list for
// Cozystack's monitoring package (packages/core/platform/dashboards-infra.list, lines to add to
// its dashboards-infra.list: system components' dashboards are infrastructure ones), the same
// JSON as the chart's; the monitoring package's template, given the list, renders a
// GrafanaDashboard per line that fetches that file. The wrappers render none of their own; the
// out-of-tree Packages, which Cozystack's dashboards server does not serve, turn the chart's on.
func TestDashboardsTheCozystackWay(t *testing.T) {
	list := readText(t, filepath.Join(root, "packages", "core", "platform", "dashboards-infra.list"))
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		if !regexp.MustCompile(`^[a-z0-9-]+/[a-z0-9-]+$`).MatchString(l) {
			t.Errorf("dashboards-infra.list line %q is not <folder>/<name>", l)
		}
		lines = append(lines, l)
	}
	var want []string
	for _, name := range packaged {
		want = append(want, "reserved-ips/"+name)
		got := readText(t, filepath.Join(root, "dashboards", "reserved-ips", name+".json"))
		if got != readText(t, filepath.Join(root, "charts", name, "files", "dashboard.json")) {
			t.Errorf("dashboards/reserved-ips/%s.json differs from the chart's files/dashboard.json (make vendor-charts)", name)
		}
	}
	if !slices.Equal(lines, want) {
		t.Errorf("dashboards-infra.list lists %v, want %v", lines, want)
	}
	files, _ := filepath.Glob(filepath.Join(root, "dashboards", "*", "*"))
	if len(files) != len(packaged) {
		t.Errorf("dashboards/ holds %v, want one JSON per package", files)
	}

	// The monitoring package's template, with the list as Cozystack builds it.
	tmpl := readText(t, filepath.Join(root, "tools", "packages", "cozystack", "monitoring", "templates", "dashboards.yaml"))
	mon := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: "v2", Name: "monitoring", Version: "0.0.0"},
		Templates: []*common.File{{Name: "templates/dashboards.yaml", Data: []byte(tmpl)}},
		Files:     []*common.File{{Name: "dashboards-infra.list", Data: []byte(list)}, {Name: "dashboards.list", Data: nil}},
	}
	manifest, err := Render(mon, "cozy-monitoring", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeIndex(t, manifest)
	for _, name := range packaged {
		gd := objs["GrafanaDashboard/reserved-ips-"+name]
		if gd == nil || dig(gd, "spec", "folder") != "reserved-ips" ||
			dig(gd, "spec", "url") != "http://grafana-dashboards.cozy-grafana-operator.svc/reserved-ips/"+name+".json" {
			t.Errorf("the monitoring package renders %v for %s (objects %v)", gd, name, keys(objs))
		}
	}

	// The out-of-tree Packages turn the chart's own GrafanaDashboard on.
	data := readText(t, filepath.Join(root, images.OutOfTreeFile))
	for _, doc := range strings.Split(data, "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o["kind"] != "Package" {
			continue
		}
		name := strings.TrimPrefix(dig(o, "metadata", "name").(string), "reserved-ips.")
		if dig(o, "spec", "components", name, "values", name, "metrics", "grafanaDashboard", "enabled") != true {
			t.Errorf("the out-of-tree Package %s does not turn the chart's GrafanaDashboard on", name)
		}
	}
}
