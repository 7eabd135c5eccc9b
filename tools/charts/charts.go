// Package charts installs, renders and lints the project's Helm charts with the Helm Go SDK, for
// the sandbox, the e2e suite and the charts' own tests.
package charts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"

	helmrender "github.com/cozystack/reserved-ips/tools/charts/render"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// Dir is the directory of one of the project's charts in the checkout at root.
func Dir(root, name string) string { return filepath.Join(root, "charts", name) }

// Apply installs the chart as release name in namespace, or upgrades it when it exists, like
// `helm upgrade --install --wait=false`.
func Apply(ctx context.Context, kubeconfig, namespace, name string, c *chart.Chart, values map[string]any) (*release.Release, error) {
	cfg := new(action.Configuration)
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, err
	}
	if _, err := action.NewHistory(cfg).Run(name); errors.Is(err, driver.ErrReleaseNotFound) {
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace = name, namespace
		rel, err := install.RunWithContext(ctx, c, values)
		if err != nil {
			return nil, fmt.Errorf("installing %s: %w", name, err)
		}
		return rel, waitForCRDs(ctx, kubeconfig, rel)
	} else if err != nil {
		return nil, err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = namespace
	rel, err := upgrade.RunWithContext(ctx, name, c, values)
	if err != nil {
		return nil, fmt.Errorf("upgrading %s: %w", name, err)
	}
	return rel, waitForCRDs(ctx, kubeconfig, rel)
}

// waitForCRDs waits until every CRD the release manifest holds is Established, as Helm does for
// a chart's crds/ directory: the core's chart ships its CRDs as templates (so that upgrades
// update them), and whatever comes next (a controller's informers, objects of those kinds) needs
// them served.
func waitForCRDs(ctx context.Context, kubeconfig string, rel *release.Release) error {
	objs, err := kubeapply.Decode([]byte(rel.Manifest))
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			names = append(names, o.GetName())
		}
	}
	if len(names) == 0 {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, name := range names {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s of release %s is not established: %w", name, rel.Name, err)
		}
	}
	return nil
}

// Uninstall removes a release, like `helm uninstall`.
func Uninstall(kubeconfig, namespace, name string) error {
	cfg := new(action.Configuration)
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		return err
	}
	_, err := action.NewUninstall(cfg).Run(name)
	return err
}

// Offline rendering lives in package render, which the control plane imports too (it renders
// MetalLB's chart for its RBAC); these are its names for the charts' callers.
var (
	Load          = helmrender.Load
	Render        = helmrender.Render
	RenderRelease = helmrender.RenderRelease
	RenderFor     = helmrender.RenderFor
	ServedKinds   = helmrender.ServedKinds
)

// Lint runs Helm's linter (strict) over a chart directory with the given values.
func Lint(dir string, values map[string]any) []error {
	l := action.NewLint()
	l.Strict = true
	res := l.Run([]string{dir}, values)
	var out []error
	out = append(out, res.Errors...)
	for _, m := range res.Messages {
		if m.Severity > 1 { // warnings and errors, not INFO
			out = append(out, m.Err)
		}
	}
	return out
}
