// Package charts installs, renders and lints the project's Helm charts with the Helm Go SDK, for
// the sandbox, the e2e suite and the charts' own tests.
package charts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Load reads a chart directory.
func Load(dir string) (*chart.Chart, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return c, nil
}

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
		return rel, nil
	} else if err != nil {
		return nil, err
	}
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = namespace
	rel, err := upgrade.RunWithContext(ctx, name, c, values)
	if err != nil {
		return nil, fmt.Errorf("upgrading %s: %w", name, err)
	}
	return rel, nil
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

// Render renders the chart offline (client-only install, as `helm template` does) as a release
// named after the chart and returns the manifest. Values are validated against the chart's schema.
func Render(c *chart.Chart, namespace string, values map[string]any) (string, error) {
	return RenderRelease(c, c.Name(), namespace, values)
}

// RenderRelease is Render with the release name given (a Cozystack PackageSource names the
// release of a wrapper chart).
func RenderRelease(c *chart.Chart, release, namespace string, values map[string]any) (string, error) {
	cfg := new(action.Configuration)
	install := action.NewInstall(cfg)
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = release, namespace
	install.IncludeCRDs = true
	v, err := chartutil.ParseKubeVersion("v1.37.2")
	if err != nil {
		return "", err
	}
	install.KubeVersion = v
	rel, err := install.Run(c, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

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
