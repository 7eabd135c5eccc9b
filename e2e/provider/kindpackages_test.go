package provider

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// The kind provider's parts that need no Docker: it installs the wrapper packages as the
// platform does (PackageSource release names and namespaces, Package values), with the images
// it loaded, and its restarts find the pods of the Deployments those packages create.
func TestKindInstallsTheWrapperPackages(t *testing.T) {
	root := filepath.Join("..", "..")
	refs := map[string]string{
		"address-controller": "ghcr.io/cozystack/address-controller:e2e",
		"metallb-iad":        "ghcr.io/cozystack/metallb-iad:e2e",
	}
	plan, err := PackageInstalls(root, t.TempDir(), refs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"address-controller": {"address-controller", "cozy-address-controller"}, "metallb-iad": {"metallb-iad", "cozy-metallb-iad"}}
	if len(plan) != len(want) {
		t.Fatalf("plan %+v", plan)
	}
	for _, in := range plan {
		if w := want[in.Component]; in.ReleaseName != w[0] || in.Namespace != w[1] {
			t.Errorf("%s: release %s in %s, want %s in %s (its PackageSource)", in.Component, in.ReleaseName, in.Namespace, w[0], w[1])
		}
		c, err := charts.Load(in.ChartDir)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.Name(), "cozy-") {
			t.Errorf("%s: installs %s, not the wrapper chart", in.Component, c.Name())
		}
		manifest, err := charts.Render(c, in.Namespace, in.Values)
		if err != nil {
			t.Fatalf("%s: the wrapper does not render with the Package values: %v", in.Component, err)
		}
		objs, err := kubeapply.Decode([]byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		var dep *appsv1.Deployment
		for _, o := range objs {
			if o.GetKind() == "Deployment" {
				dep = &appsv1.Deployment{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
					t.Fatal(err)
				}
			}
		}
		if dep == nil {
			t.Fatalf("%s: the wrapper renders no Deployment", in.Component)
		}
		ctr := dep.Spec.Template.Spec.Containers[0]
		if ctr.Image != refs[in.Component] || ctr.ImagePullPolicy != "Never" {
			t.Errorf("%s: container image %s (%s), want the loaded %s (Never)", in.Component, ctr.Image, ctr.ImagePullPolicy, refs[in.Component])
		}
		if in.Component == "metallb-iad" && !strings.Contains(strings.Join(ctr.Args, " "), "--metallb-namespace=cozy-metallb") {
			t.Errorf("metallb-iad: the wrapper's own values (cozy-metallb) were lost: %v", ctr.Args)
		}
		// Restart finds these pods: the selector matches the pod labels under the real release name.
		w := KindWorkloads[in.Component]
		sel, err := labels.Parse(w.Selector)
		if err != nil {
			t.Fatal(err)
		}
		podLabels := labels.Set(dep.Spec.Template.Labels)
		podLabels["app.kubernetes.io/instance"] = in.ReleaseName // Render names the release after the chart
		if w.Namespace != in.Namespace || !sel.Matches(podLabels) {
			t.Errorf("%s: restart looks for %s in %s; the pods are labelled %v in %s", in.Component, w.Selector, w.Namespace, dep.Spec.Template.Labels, in.Namespace)
		}
	}
}
