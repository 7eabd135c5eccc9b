package provider

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts"
)

// PackageInstall is one Cozystack package as the platform installs it: the wrapper chart from
// packages/system/<component>, the release name and namespace its PackageSource gives, and the
// Package values (<component>.<key>) that reach the wrapped chart.
type PackageInstall struct {
	Component, ReleaseName, Namespace string
	// Privileged is the PackageSource's install.privileged: the operator labels the namespace
	// for the privileged Pod Security level.
	Privileged bool
	// ChartDir is a copy of the wrapper with its chart vendored under charts/, as Cozystack's
	// package artifact holds it.
	ChartDir string
	Values   map[string]any
}

// PackageInstalls plans the installs of both packages into dir, with images (component →
// reference) loaded into the nodes (imagePullPolicy Never).
func PackageInstalls(root, dir string, images map[string]string) ([]PackageInstall, error) {
	var out []PackageInstall
	for _, component := range []string{"address-controller", "metallb-iad"} {
		data, err := os.ReadFile(filepath.Join(root, "packages", "core", "platform", "sources", component+".yaml"))
		if err != nil {
			return nil, err
		}
		var src struct {
			Spec struct {
				Variants []struct {
					Components []struct {
						Name    string `json:"name"`
						Path    string `json:"path"`
						Install struct {
							ReleaseName string `json:"releaseName"`
							Namespace   string `json:"namespace"`
							Privileged  bool   `json:"privileged"`
						} `json:"install"`
					} `json:"components"`
				} `json:"variants"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &src); err != nil {
			return nil, fmt.Errorf("PackageSource of %s: %w", component, err)
		}
		if len(src.Spec.Variants) == 0 || len(src.Spec.Variants[0].Components) == 0 {
			return nil, fmt.Errorf("PackageSource of %s has no component", component)
		}
		c := src.Spec.Variants[0].Components[0]
		chartDir := filepath.Join(dir, component)
		if err := binaries.CopyTree(filepath.Join(root, "packages", filepath.FromSlash(c.Path)), chartDir); err != nil {
			return nil, err
		}
		// Vendor the chart when the checkout has not (make vendor-charts does the same).
		vendored := filepath.Join(chartDir, "charts", c.Name)
		if _, err := os.Stat(vendored); err != nil {
			if err := binaries.CopyTree(filepath.Join(root, "charts", c.Name), vendored); err != nil {
				return nil, err
			}
		}
		values := map[string]any{"image": images[component], "imagePullPolicy": "Never"}
		out = append(out, PackageInstall{Component: component, ReleaseName: c.Install.ReleaseName, Namespace: c.Install.Namespace,
			Privileged: c.Install.Privileged, ChartDir: chartDir, Values: map[string]any{c.Name: values}})
	}
	return out, nil
}

// How Cozystack's operator (cozystack-operator's Package reconciler) and Flux's helm-controller
// install a package, which the kind provider repeats without running either:
//
//   - the operator applies each component's namespace (server-side apply, its own field
//     manager), labelled cozystack.io/system unless it is a tenant's, labelled for the privileged
//     Pod Security level when the PackageSource says so, and annotated to be kept by Helm;
//   - its values replicator copies the platform's cozystack-values Secret into that namespace,
//     and the HelmRelease takes it as valuesFrom before the Package's values, so the chart gets
//     _cluster (and the like) beside the component's values;
//   - helm-controller installs and upgrades with the Helm v4 SDK: server-side apply with conflicts
//     forced, taking over objects it did not make, values reset on upgrade, a kstatus wait with
//     the operator's timeout (10 minutes), a history of 5; it uninstalls with a wait.
const (
	OperatorFieldManager = "cozystack-package-controller"
	CozystackValues      = "cozystack-values"
	PackageTimeout       = 10 * time.Minute
	PackageMaxHistory    = 5
)

// PlatformValues is what the kind provider's cozystack-values Secret holds, in the platform's
// shape (packages/core/platform/templates/apps.yaml in cozystack/cozystack): keys every package
// chart receives at the top of its values.
func PlatformValues() map[string]any {
	return map[string]any{"_cluster": map[string]any{
		"root-host": "example.org", "bundle-name": "isp-full", "solver": "http01", "issuer-name": "letsencrypt-prod",
		"oidc-enabled": "false",
	}}
}

// OperatorNamespace is the namespace the operator applies for a component.
func OperatorNamespace(name string, privileged bool) *corev1ac.NamespaceApplyConfiguration {
	labels := map[string]string{}
	if !strings.HasPrefix(name, "tenant-") {
		labels["cozystack.io/system"] = "true"
	}
	if privileged {
		labels["pod-security.kubernetes.io/enforce"] = "privileged"
	}
	return corev1ac.Namespace(name).WithLabels(labels).WithAnnotations(map[string]string{"helm.sh/resource-policy": "keep"})
}

// FluxValues merges a HelmRelease's values as helm-controller does: each valuesFrom in order, then
// spec.values, maps merged key by key, anything else replaced.
func FluxValues(layers ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, l := range layers {
		out = mergeValues(out, l)
	}
	return out
}

func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(bm, vm)
				continue
			}
			out[k] = mergeValues(map[string]any{}, vm)
			continue
		}
		out[k] = v
	}
	return out
}

// installPackage installs or upgrades one package as the operator and helm-controller do, with
// component values merged over the Package values it was planned with.
func installPackage(ctx context.Context, cs kubernetes.Interface, kubeconfig string, in PackageInstall, component map[string]any) error {
	if _, err := cs.CoreV1().Namespaces().Apply(ctx, OperatorNamespace(in.Namespace, in.Privileged),
		metav1.ApplyOptions{FieldManager: OperatorFieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying namespace %s: %w", in.Namespace, err)
	}
	platform, err := yaml.Marshal(PlatformValues())
	if err != nil {
		return err
	}
	secret := corev1ac.Secret(CozystackValues, in.Namespace).WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{"values.yaml": platform})
	if _, err := cs.CoreV1().Secrets(in.Namespace).Apply(ctx, secret, metav1.ApplyOptions{FieldManager: OperatorFieldManager, Force: true}); err != nil {
		return fmt.Errorf("applying the %s Secret in %s: %w", CozystackValues, in.Namespace, err)
	}
	ch, err := charts.Load(in.ChartDir)
	if err != nil {
		return err
	}
	values := FluxValues(PlatformValues(), in.Values, map[string]any{in.Component: component})
	if _, err := charts.ApplyWith(ctx, kubeconfig, in.Namespace, in.ReleaseName, ch, values,
		charts.Options{Wait: true, Timeout: PackageTimeout, MaxHistory: PackageMaxHistory}); err != nil {
		return fmt.Errorf("the %s package: %w", in.Component, err)
	}
	return nil
}
