package provider

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// PackageInstall is one Cozystack package as the platform installs it: the wrapper chart from
// packages/system/<component>, the release name and namespace its PackageSource gives, and the
// Package values (<component>.<key>) that reach the wrapped chart.
type PackageInstall struct {
	Component, ReleaseName, Namespace string
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
			ChartDir: chartDir, Values: map[string]any{c.Name: values}})
	}
	return out, nil
}
