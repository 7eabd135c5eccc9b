package mirror

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/images"
)

// PackageCharts are the charts of the release a checkout carries, and its packages artifact:
// the OCIRepository of the out-of-tree file (images.OutOfTreeFile, which `make release` points
// at the packages artifact it publishes) names the release's registry and version, and the
// charts are published beside that artifact, REGISTRY/charts/<component>:<version without v>,
// one per packages/system/<component>. The charts' references name tags (Save and Mirror resolve
// them); the packages artifact's names the digest the file pins, when it pins one.
func PackageCharts(root string) (map[string]string, error) {
	path := filepath.Join(root, images.OutOfTreeFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var url, tag, digest string
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var o struct {
			Kind string `json:"kind"`
			Spec struct {
				URL string `json:"url"`
				Ref struct {
					Tag    string `json:"tag"`
					Digest string `json:"digest"`
				} `json:"ref"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if o.Kind == "OCIRepository" {
			url, tag, digest = strings.TrimPrefix(o.Spec.URL, "oci://"), o.Spec.Ref.Tag, o.Spec.Ref.Digest
		}
	}
	reg, ok := strings.CutSuffix(url, "/"+images.PackagesArtifact)
	if !ok || tag == "" {
		return nil, fmt.Errorf("%s: no OCIRepository of .../%s with a tag", path, images.PackagesArtifact)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "packages", "system", "*", "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no packages under %s", filepath.Join(root, "packages", "system"))
	}
	out := map[string]string{images.PackagesArtifact: url + ":" + tag}
	if digest != "" {
		out[images.PackagesArtifact] += "@" + digest
	}
	for _, d := range dirs {
		c := filepath.Base(filepath.Dir(d))
		out[c] = reg + "/charts/" + c + ":" + strings.TrimPrefix(tag, "v")
	}
	return out, nil
}

// ReadChartList reads a chart list as `make release` writes it (charts.txt: one
// oci://repository:version[@sha256:...] a line; blank lines and # comments skipped), each named
// by its repository's last element.
func ReadChartList(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ref := strings.TrimPrefix(line, "oci://")
		repo, _, _ := strings.Cut(ref, "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		} else {
			return nil, fmt.Errorf("%s: %q names no version", file, line)
		}
		out[repo[strings.LastIndex(repo, "/")+1:]] = ref
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no charts", file)
	}
	return out, nil
}
