package charts

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
)

// ChartVersion is the SemVer chart version of a release VERSION: v0.1.0 gives 0.1.0.
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// OCIRepo is a registry path without its oci:// scheme or a trailing slash.
func OCIRepo(repo string) string { return strings.TrimSuffix(strings.TrimPrefix(repo, "oci://"), "/") }

func registryClient(plainHTTP bool) (*registry.Client, error) {
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	// Credentials: Helm's registry config, then the Docker config (as the image pushes use).
	return registry.NewClient(opts...)
}

// PackageChart packages the chart in dir at the release version (its version and appVersion)
// into outDir, as `helm package` does, and returns the archive's path (<name>-<version>.tgz).
func PackageChart(dir, version, outDir string) (string, error) {
	c, err := Load(dir)
	if err != nil {
		return "", err
	}
	v := ChartVersion(version)
	c.Metadata.Version, c.Metadata.AppVersion = v, v
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("chart %s at %s: %w", c.Name(), v, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	return chartutil.Save(c, outDir)
}

// PublishChart packages the chart in dir at the release version and pushes it with the Helm SDK
// to <repo>/<name>:<version>, as `helm push` does; it returns the pushed reference with its
// digest (repo/name:version@sha256:...).
func PublishChart(dir, repo, version string, plainHTTP bool) (string, error) {
	tmp, err := os.MkdirTemp("", "chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	path, err := PackageChart(dir, version, tmp)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	meta, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	client, err := registryClient(plainHTTP)
	if err != nil {
		return "", err
	}
	ref := OCIRepo(repo) + "/" + meta.Name() + ":" + meta.Metadata.Version
	res, err := client.Push(data, ref, registry.PushOptStrictMode(true))
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return ref + "@" + res.Manifest.Digest, nil
}

// PullChart pulls <repo>/<name>:<version> with the Helm SDK, as `helm pull oci://...` does.
func PullChart(repo, name, version string, plainHTTP bool) (*Chart, error) {
	client, err := registryClient(plainHTTP)
	if err != nil {
		return nil, err
	}
	ref := OCIRepo(repo) + "/" + name + ":" + ChartVersion(version)
	res, err := client.Pull(ref, registry.PullOptWithChart(true))
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", ref, err)
	}
	return loader.LoadArchive(bytes.NewReader(res.Chart.Data))
}
