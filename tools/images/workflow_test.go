package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The release workflow runs build → push → update (make release) → sign → commit → tag →
// pull request, with a git identity and the permissions keyless signing and the pull request
// need; it is started by hand, not by a tag (the tag is its output).
func TestReleaseWorkflowOrder(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On          map[string]any    `json:"on"`
		Permissions map[string]string `json:"permissions"`
		Jobs        map[string]struct {
			Steps []struct {
				Name string `json:"name"`
				Run  string `json:"run"`
				Uses string `json:"uses"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	// YAML 1.1 reads a bare `on` key as true; quote it as GitHub (YAML 1.2) reads it.
	data = []byte(strings.Replace(string(data), "\non:\n", "\n\"on\":\n", 1))
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	if _, ok := wf.On["workflow_dispatch"]; !ok || wf.On["push"] != nil {
		t.Errorf("triggers %v: want workflow_dispatch only", wf.On)
	}
	for k, v := range map[string]string{"id-token": "write", "contents": "write", "packages": "write", "pull-requests": "write"} {
		if wf.Permissions[k] != v {
			t.Errorf("permissions.%s = %q, want %s", k, wf.Permissions[k], v)
		}
	}
	var script strings.Builder
	for _, s := range wf.Jobs["release"].Steps {
		script.WriteString(s.Uses + "\n" + s.Run + "\n")
	}
	all := script.String()
	last := -1
	for _, step := range []string{"sigstore/cosign-installer", `git config user.name`, "make release REGISTRY=", "cosign sign --yes",
		"cosign attest --yes --type spdxjson", "make release-commit", `git push origin "refs/tags/$VERSION"`, "gh pr create"} {
		i := strings.Index(all, step)
		if i < 0 {
			t.Fatalf("the release workflow lacks %q", step)
		}
		if i < last {
			t.Fatalf("%q runs out of order", step)
		}
		last = i
	}
}
