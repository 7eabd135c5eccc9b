package charts

import (
	"context"
	"encoding/json"
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

// prometheusOperatorVersion is the prometheus-operator release whose CRDs the monitoring objects
// are validated against; its Go module ships them under example/prometheus-operator-crd.
const prometheusOperatorVersion = "v0.85.0"

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
	if err := cp.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Load(Dir(root, "address-controller"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, cp.Kubeconfig, ns, "address-controller", c, map[string]any{"deploy": false}); err != nil {
		t.Fatal(err)
	}
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

// The monitoring objects of both charts, when enabled, are accepted by the apiserver with
// prometheus-operator's CRDs installed, with strict field validation (an unknown or misplaced
// field is an error, not silently pruned).
func TestMonitoringObjectsValidateAgainstTheirCRDs(t *testing.T) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@"+prometheusOperatorVersion).Output()
	if err != nil {
		t.Fatalf("downloading prometheus-operator %s through the Go module proxy: %v", prometheusOperatorVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %s", out)
	}
	cp := startAPIServer(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		data, err := readFile(filepath.Join(mod.Dir, "example", "prometheus-operator-crd", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeapply.Apply(ctx, cp.Config, "test", data); err != nil {
			t.Fatal(err)
		}
	}
	gvrs := map[string]schema.GroupVersionResource{
		"ServiceMonitor": {Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"},
		"PrometheusRule": {Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"},
		"ConfigMap":      {Version: "v1", Resource: "configmaps"},
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
			"serviceMonitor": map[string]any{"enabled": true, "interval": "30s"},
			"prometheusRule": map[string]any{"enabled": true},
			"dashboard":      map[string]any{"enabled": true},
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
		}
		if created != 3 {
			t.Errorf("%s: %d monitoring objects created, want a ServiceMonitor, a PrometheusRule and a dashboard ConfigMap", name, created)
		}
	}
}
