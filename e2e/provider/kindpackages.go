package provider

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
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
		if err := copyDir(filepath.Join(root, "packages", filepath.FromSlash(c.Path)), chartDir); err != nil {
			return nil, err
		}
		// Vendor the chart when the checkout has not (make vendor-charts does the same).
		vendored := filepath.Join(chartDir, "charts", c.Name)
		if _, err := os.Stat(vendored); err != nil {
			if err := copyDir(filepath.Join(root, "charts", c.Name), vendored); err != nil {
				return nil, err
			}
		}
		values := map[string]any{"image": images[component], "imagePullPolicy": "Never"}
		out = append(out, PackageInstall{Component: component, ReleaseName: c.Install.ReleaseName, Namespace: c.Install.Namespace,
			ChartDir: chartDir, Values: map[string]any{c.Name: values}})
	}
	return out, nil
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// Workload is a component the suite restarts, and how to find its pods on a cluster.
type Workload struct {
	Namespace, Selector string
}

// KindWorkloads maps the process names the local provider restarts to the pods of the same
// components on a kind cluster (labels of the charts, and of MetalLB's chart).
var KindWorkloads = map[string]Workload{
	"address-controller": {"cozy-address-controller", "app.kubernetes.io/name=address-controller,app.kubernetes.io/instance=address-controller"},
	"metallb-iad":        {"cozy-metallb-iad", "app.kubernetes.io/name=metallb-iad,app.kubernetes.io/instance=metallb-iad"},
	"metallb-controller": {"cozy-metallb", "app.kubernetes.io/component=controller"},
}

// Restarter is a cluster that can restart a component as a crash would.
type Restarter interface {
	Restart(ctx context.Context, names ...string) error
}

// Restart deletes the components' pods at once (no grace period, as a crash) and waits until
// their Deployments run replacements that are ready.
func (c *kindCluster) Restart(ctx context.Context, names ...string) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	return restartPods(ctx, cs, names...)
}

func restartPods(ctx context.Context, cs kubernetes.Interface, names ...string) error {
	old := map[string]bool{}
	for _, n := range names {
		w, ok := KindWorkloads[n]
		if !ok {
			return fmt.Errorf("no pods known for %q", n)
		}
		pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.Selector})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pods of %s (%s in %s)", n, w.Selector, w.Namespace)
		}
		zero := int64(0)
		for _, p := range pods.Items {
			old[string(p.UID)] = true
			if err := cs.CoreV1().Pods(w.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				return err
			}
		}
	}
	for _, n := range names {
		w := KindWorkloads[n]
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.Selector})
			if err != nil {
				return false, nil
			}
			ready := 0
			for _, p := range pods.Items {
				if old[string(p.UID)] {
					return false, nil // an old pod is still there
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			return ready > 0, nil
		})
		if err != nil {
			return fmt.Errorf("%s did not come back ready: %w", n, err)
		}
	}
	return nil
}

var _ Restarter = (*kindCluster)(nil)
