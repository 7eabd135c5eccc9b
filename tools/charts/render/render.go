// Package render renders Helm charts offline (as `helm template` does) with the Helm Go SDK. It
// imports nothing of the project, so that the local control plane (which renders MetalLB's chart)
// and package charts (which installs and tests the project's charts) can both use it.
package render

import (
	"fmt"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// Chart is a loaded Helm chart (API v2, the charts' apiVersion).
type Chart = chart.Chart

// KubeVersion is the Kubernetes version offline renders report (.Capabilities.KubeVersion): the
// project's default, whose kube-apiserver serves ServedKinds.
const KubeVersion = "v1.37.2"

// Load reads a chart directory or archive.
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
// only) and the project's kube-apiserver (KubeVersion) serves: offline renders see what an install
// on that apiserver sees. TestServedKindsAreServed checks them against a running apiserver.
var ServedKinds = []string{
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
	"admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding",
}

// RenderRelease is Render with the release name given (a Cozystack PackageSource names the
// release of a wrapper chart).
func RenderRelease(c *chart.Chart, releaseName, namespace string, values map[string]any) (string, error) {
	return RenderFor(c, releaseName, namespace, values, ServedKinds)
}

// RenderFor is RenderRelease for a cluster serving, beyond Helm's defaults, the group/version/Kind
// capabilities in kinds (nil: none of ServedKinds, as an apiserver before 1.36).
func RenderFor(c *chart.Chart, releaseName, namespace string, values map[string]any, kinds []string) (string, error) {
	return RenderAt(c, releaseName, namespace, values, KubeVersion, kinds)
}

// RenderAt is RenderFor as a cluster of Kubernetes version kubeVersion sees it (the chart's
// kubeVersion constraint is checked against it).
func RenderAt(c *chart.Chart, releaseName, namespace string, values map[string]any, kubeVersion string, kinds []string) (string, error) {
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy, install.Replace = action.DryRunClient, true
	install.ReleaseName, install.Namespace = releaseName, namespace
	install.IncludeCRDs = true
	v, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", err
	}
	install.KubeVersion = v
	install.APIVersions = kinds
	r, err := install.Run(c, values)
	if err != nil {
		return "", err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return "", fmt.Errorf("rendering %s: a release of type %T", c.Name(), r)
	}
	return rel.Manifest, nil
}
