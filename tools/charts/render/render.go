// Package render renders Helm charts offline (as `helm template` does) with the Helm Go SDK. It
// imports nothing of the project, so that the local control plane (which renders MetalLB's chart)
// and package charts (which installs and tests the project's charts) can both use it.
package render

import (
	"fmt"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Load reads a chart directory.
func Load(dir string) (*chart.Chart, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	return c, nil
}

// Render renders the chart offline (client-only install, as `helm template` does) as a release
// named after the chart and returns the manifest. Values are validated against the chart's schema.
func Render(c *chart.Chart, namespace string, values map[string]any) (string, error) {
	return RenderRelease(c, c.Name(), namespace, values)
}

// ServedKinds are the group/version/Kind capabilities the charts test with
// .Capabilities.APIVersions.Has that Helm's offline defaults lack (they list group/versions
// only) and the project's kube-apiserver (v1.37.2) serves: offline renders see what an install
// on that apiserver sees. TestServedKindsAreServed checks them against a running apiserver.
var ServedKinds = []string{
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding",
}

// RenderRelease is Render with the release name given (a Cozystack PackageSource names the
// release of a wrapper chart).
func RenderRelease(c *chart.Chart, release, namespace string, values map[string]any) (string, error) {
	return RenderFor(c, release, namespace, values, ServedKinds)
}

// RenderFor is RenderRelease for a cluster serving, beyond Helm's defaults, the group/version/Kind
// capabilities in kinds (nil: none of ServedKinds, as an apiserver before 1.36).
func RenderFor(c *chart.Chart, release, namespace string, values map[string]any, kinds []string) (string, error) {
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
	install.APIVersions = kinds
	rel, err := install.Run(c, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}
