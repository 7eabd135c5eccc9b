package charts

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// These tests run a real kube-apiserver and etcd from the binary cache (`make binaries`).

// The CRDs the monitoring objects are validated against, each from the Go module of its project
// (read from the module cache, downloaded through the Go module proxy when absent):
// prometheus-operator's ServiceMonitor and PrometheusRule, VictoriaMetrics operator's
// VMServiceScrape, grafana-operator's GrafanaDashboard (the version Cozystack ships).
var monitoringCRDs = []struct {
	module, version string
	// sum pins the module's hash where the checksum database does not serve it (the Go module
	// proxy here answers 404 for the VictoriaMetrics operator's entry): the zip is checked
	// against it instead.
	sum   string
	file  string // in the module
	crd   string // the CRD's name, where file holds several
	kinds []string
}{
	{"github.com/prometheus-operator/prometheus-operator", "v0.85.0", "",
		"example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml", "", []string{"ServiceMonitor"}},
	{"github.com/prometheus-operator/prometheus-operator", "v0.85.0", "",
		"example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml", "", []string{"PrometheusRule"}},
	// Cozystack ships operator v0.68.4, which the module proxy does not serve; v0.60.0 is the
	// newest release it does that this test has been run with.
	{"github.com/VictoriaMetrics/operator", "v0.60.0", "h1:DqBQ9dKywpNr4C+diOM4ShPGVqQ4Owu7bjk56cOLBbk=",
		"config/crd/overlay/crd.yaml", "vmservicescrapes.operator.victoriametrics.com", []string{"VMServiceScrape"}},
	{"github.com/grafana/grafana-operator/v5", "v5.13.0", "",
		"config/crd/bases/grafana.integreatly.org_grafanadashboards.yaml", "", []string{"GrafanaDashboard"}},
}

// moduleDir returns where a module version is extracted: from the module cache alone first
// (GOPROXY=off: no network), then through the Go module proxy. It runs outside the project's
// modules (GOWORK=off, a temporary directory, -mod=mod), so it never touches their go.mod. A
// module that neither yields skips the test, loudly.
func moduleDir(t *testing.T, module, version, sum string) string {
	t.Helper()
	var last string
	for _, proxy := range []string{"off", ""} {
		cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if proxy != "" {
			cmd.Env = append(cmd.Env, "GOPROXY="+proxy)
		}
		if sum != "" {
			cmd.Env = append(cmd.Env, "GONOSUMDB="+module)
		}
		out, _ := cmd.Output()
		var mod struct{ Dir, Sum, Error string }
		if err := json.Unmarshal(out, &mod); err != nil {
			last = string(out)
			continue
		}
		if mod.Dir == "" {
			last = mod.Error
			continue
		}
		if sum != "" && mod.Sum != sum {
			t.Fatalf("%s@%s has hash %s, pinned %s", module, version, mod.Sum, sum)
		}
		return mod.Dir
	}
	t.Skipf("\n*** SKIPPED: %s@%s is neither in the module cache nor served by the Go module proxy (%s):\n"+
		"*** the monitoring objects were NOT validated against their CRDs. ***", module, version, last)
	return ""
}

// crdDocument returns the YAML document of the CRD named name from data (several documents), or
// data itself when name is empty.
func crdDocument(t *testing.T, data []byte, name string) []byte {
	t.Helper()
	if name == "" {
		return data
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err == nil && meta.Kind == "CustomResourceDefinition" && meta.Metadata.Name == name {
			return []byte(doc)
		}
	}
	t.Fatalf("no CRD %s in the file", name)
	return nil
}

func startAPIServer(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.Start(context.Background(), controlplane.Options{WithoutControllerManager: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return cp
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last error %v)", what, timeout, last)
}

func crdFields(t *testing.T, dyn dynamic.Interface, name string) map[string]any {
	t.Helper()
	crd, err := dyn.Resource(crdGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	props, _ := dig(crd.Object, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties").(map[string]any)
	return props
}

// A plain-Helm upgrade to a chart whose CRD gained a field updates the CRD on the apiserver (Helm
// never upgrades crds/, which is why the chart templates them), objects can then use the field,
// and uninstalling the release keeps the CRDs (crds.keep).
func TestCRDUpgradeAddsAField(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "cozy-address-controller"
	installCoreChart(t, cp, nil)
	const claims = "ipaddressclaims.local.sdn.cozystack.io"
	if _, ok := crdFields(t, dyn, claims)["upgradeProbe"]; ok {
		t.Fatal("the CRD has the probe field before the upgrade")
	}

	// The next chart version: the claim CRD gains spec.upgradeProbe.
	next, err := Load(Dir(root, "address-controller"))
	if err != nil {
		t.Fatal(err)
	}
	next.Metadata.Version = "0.1.1-upgrade-test"
	changed := false
	for _, f := range next.Files {
		if f.Name != "files/crds/local.sdn.cozystack.io_ipaddressclaims.yaml" {
			continue
		}
		var crd map[string]any
		if err := yaml.Unmarshal(f.Data, &crd); err != nil {
			t.Fatal(err)
		}
		props := dig(crd, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties").(map[string]any)
		props["upgradeProbe"] = map[string]any{"type": "string", "description": "added by the upgrade test"}
		if f.Data, err = yaml.Marshal(crd); err != nil {
			t.Fatal(err)
		}
		changed = true
	}
	if !changed {
		t.Fatal("the chart has no files/crds/ claim CRD")
	}
	if _, err := Apply(ctx, cp.Kubeconfig, ns, "address-controller", next, map[string]any{"deploy": false}); err != nil {
		t.Fatal(err)
	}
	if _, ok := crdFields(t, dyn, claims)["upgradeProbe"]; !ok {
		t.Fatal("helm upgrade did not add the field to the CRD")
	}
	// A claim may now set the field, and the apiserver keeps it (an unknown field is pruned).
	claimGVR := schema.GroupVersionResource{Group: "local.sdn.cozystack.io", Version: "v1alpha1", Resource: "ipaddressclaims"}
	if err := cp.EnsureNamespace(ctx, "tenant-example", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a claim keeps the new field", func() (bool, error) {
		claim := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClaim",
			"metadata": map[string]any{"name": "probe", "namespace": "tenant-example"},
			"spec":     map[string]any{"upgradeProbe": "kept"},
		}}
		got, err := dyn.Resource(claimGVR).Namespace("tenant-example").Create(ctx, claim, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			return false, err
		}
		return dig(got.Object, "spec", "upgradeProbe") == "kept", nil
	})

	if err := Uninstall(cp.Kubeconfig, ns, "address-controller"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(crdGVR).Get(ctx, claims, metav1.GetOptions{}); err != nil {
		t.Fatalf("uninstalling the release removed the CRD despite crds.keep: %v", err)
	}
}

// The monitoring objects of both charts, when enabled, are accepted by the apiserver with their
// operators' CRDs installed (prometheus-operator, VictoriaMetrics operator, grafana-operator),
// with strict field validation (an unknown or misplaced field is an error, not silently pruned).
func TestMonitoringObjectsValidateAgainstTheirCRDs(t *testing.T) {
	crds := make([][]byte, 0, len(monitoringCRDs))
	gvrs := map[string]schema.GroupVersionResource{"ConfigMap": {Version: "v1", Resource: "configmaps"}}
	for _, m := range monitoringCRDs {
		data, err := readFile(filepath.Join(moduleDir(t, m.module, m.version, m.sum), filepath.FromSlash(m.file)))
		if err != nil {
			t.Fatal(err)
		}
		doc := crdDocument(t, data, m.crd)
		var crd struct {
			Spec struct {
				Group    string
				Names    struct{ Kind, Plural string }
				Versions []struct {
					Name            string
					Served, Storage bool
				}
			}
		}
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				gvrs[crd.Spec.Names.Kind] = schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			}
		}
		if _, ok := gvrs[m.kinds[0]]; !ok {
			t.Fatalf("%s: no storage version of %s", m.file, m.kinds[0])
		}
		crds = append(crds, doc)
	}
	cp := startAPIServer(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range crds {
		if _, err := kubeapply.Apply(ctx, cp.Config, "test", data); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range charts {
		ns := "cozy-" + name
		if err := cp.EnsureNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
		c, err := Load(Dir(root, name))
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := RenderRelease(c, name, ns, map[string]any{"metrics": map[string]any{
			"serviceMonitor":   map[string]any{"enabled": true, "interval": "30s"},
			"prometheusRule":   map[string]any{"enabled": true},
			"vmServiceScrape":  map[string]any{"enabled": true, "interval": "30s"},
			"dashboard":        map[string]any{"enabled": true},
			"grafanaDashboard": map[string]any{"enabled": true},
		}})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kubeapply.Decode([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		created := 0
		for _, o := range objs {
			gvr, ok := gvrs[o.GetKind()]
			if !ok {
				continue
			}
			o.SetNamespace(ns)
			eventually(t, 30*time.Second, "creating "+o.GetKind()+" "+o.GetName(), func() (bool, error) {
				_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"})
				if err != nil && (apierrors.IsNotFound(err) || strings.Contains(err.Error(), "the server could not find the requested resource")) {
					return false, err // the CRD is not served yet
				}
				if err != nil {
					t.Fatalf("%s: %s %s refused: %v", name, o.GetKind(), o.GetName(), err)
				}
				return true, nil
			})
			created++
			if o.GetKind() == "ConfigMap" {
				continue
			}
			// The CRD does check the object's fields: a stray one is refused.
			stray := o.DeepCopy()
			stray.SetName(o.GetName() + "-stray")
			if err := unstructured.SetNestedField(stray.Object, "x", "spec", "notAField"); err != nil {
				t.Fatal(err)
			}
			if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, stray, metav1.CreateOptions{FieldValidation: "Strict"}); err == nil {
				t.Errorf("%s: %s with an unknown spec field accepted: the CRD does not validate it", name, o.GetKind())
			}
		}
		if created != 5 {
			t.Errorf("%s: %d monitoring objects created, want a ServiceMonitor, a VMServiceScrape, a PrometheusRule, "+
				"a dashboard ConfigMap and a GrafanaDashboard", name, created)
		}
		// The scrape objects that verify a cert-manager certificate (tlsConfig ca and serverName,
		// no insecureSkipVerify) are valid too.
		manifest, err = RenderRelease(c, name, ns, map[string]any{"fullnameOverride": name + "-tls", "metrics": map[string]any{
			"serviceMonitor":  map[string]any{"enabled": true},
			"vmServiceScrape": map[string]any{"enabled": true},
			"tls":             map[string]any{"certManager": map[string]any{"enabled": true}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		objs, err = kubeapply.Decode([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		verified := 0
		for _, o := range objs {
			if k := o.GetKind(); k != "ServiceMonitor" && k != "VMServiceScrape" {
				continue
			}
			o.SetNamespace(ns)
			if _, err := dyn.Resource(gvrs[o.GetKind()]).Namespace(ns).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
				t.Errorf("%s: %s verifying the certificate refused: %v", name, o.GetKind(), err)
			}
			verified++
		}
		if verified != 2 {
			t.Errorf("%s: %d scrape objects with a verified certificate, want 2", name, verified)
		}
	}
}

// installCoreChart installs the core chart (no Deployment) with Helm on the test's apiserver, in
// cozy-address-controller, with values over deploy: false, and returns the release's manifest.
func installCoreChart(t *testing.T, cp *controlplane.ControlPlane, values map[string]any) string {
	t.Helper()
	ctx := context.Background()
	const ns = "cozy-address-controller"
	if err := cp.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Load(Dir(root, "address-controller"))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{"deploy": false}
	for k, v := range values {
		vals[k] = v
	}
	rel, err := Apply(ctx, cp.Kubeconfig, ns, "address-controller", c, vals)
	if err != nil {
		t.Fatal(err)
	}
	return rel.Manifest
}
