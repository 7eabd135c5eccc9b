package images

import (
	"os"
	"path/filepath"
	"regexp"
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
				Name string         `json:"name"`
				Run  string         `json:"run"`
				Uses string         `json:"uses"`
				With map[string]any `json:"with"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	// YAML 1.1 reads a bare `on` key as true; quote it as GitHub (YAML 1.2) reads it.
	data = []byte(strings.Replace(string(data), "\non:\n", "\n\"on\":\n", 1))
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	// A release compiles from nothing another workflow's run could have written: setup-go's
	// cache (on by default) restores what any branch's run saved.
	for _, s := range wf.Jobs["release"].Steps {
		if strings.HasPrefix(s.Uses, "actions/setup-go@") && s.With["cache"] != false {
			t.Errorf("the release's setup-go step has cache %v, want false", s.With["cache"])
		}
		if strings.HasPrefix(s.Uses, "actions/cache@") || strings.HasPrefix(s.Uses, "actions/cache/") {
			t.Errorf("the release restores a cache (%s)", s.Uses)
		}
	}
	if _, ok := wf.On["workflow_dispatch"]; !ok || wf.On["push"] != nil {
		t.Errorf("triggers %v: want workflow_dispatch only", wf.On)
	}
	for k, v := range map[string]string{"id-token": "write", "contents": "write", "packages": "write", "pull-requests": "write", "actions": "write"} {
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
	// The keyless certificates name the ref the workflow ran from; the air-gap guide requires
	// refs/heads/main (releaseIdentity in tools/mirror/guide_test.go), so the workflow refuses
	// any other ref before it builds or pushes anything. make test builds the images for one
	// platform, so the release tests them for all before it builds what it pushes.
	for _, step := range []string{"sigstore/cosign-installer", `[[ "$GITHUB_REF" == refs/heads/main ]] || {`, `git config user.name`, "make test-images-all-platforms", "make release REGISTRY=", "cosign sign --yes",
		"cosign attest --yes --type spdxjson", "make release-commit", `git push origin "refs/tags/$VERSION"`, "gh pr create", `gh release create "$VERSION" --draft --verify-tag`} {
		i := strings.Index(all, step)
		if i < 0 {
			t.Fatalf("the release workflow lacks %q", step)
		}
		if i < last {
			t.Fatalf("%q runs out of order", step)
		}
		last = i
	}

	// The files make release writes beside the pushed artifacts reach the draft release; the
	// runner's bin/release is gone after the run.
	for _, f := range []string{"bin/release/release-notes.md", "bin/release/images.txt", "bin/release/charts.txt", "bin/release/hauler.yaml", "bin/release/*.tgz"} {
		if !strings.Contains(all[strings.Index(all, "gh release create"):], f) {
			t.Errorf("the draft release does not carry %s", f)
		}
	}

	// The pull request gets checks: opened with RELEASE_TOKEN when the secret exists (GitHub
	// starts no workflow for github.token's events), else the test workflows are dispatched on
	// the release branch, which they must accept.
	for _, want := range []string{"${{ secrets.RELEASE_TOKEN }}", `GH_TOKEN="$RELEASE_TOKEN" gh pr create`,
		`gh workflow run "$wf" --ref "release/$VERSION"`, "for wf in test.yml e2e-kind.yml; do"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the release workflow lacks %q", want)
		}
	}
	for _, f := range []string{"test.yml", "e2e-kind.yml"} {
		other, err := os.ReadFile(filepath.Join(repoRoot, ".github", "workflows", f))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^  workflow_dispatch:`).Match(other) {
			t.Errorf("%s cannot be dispatched on the release branch: it has no workflow_dispatch trigger", f)
		}
	}
}

// Every action a workflow uses from another repository is pinned by a full commit SHA, with
// the tag it was on in a comment (a tag can be moved; a commit cannot).
func TestWorkflowActionsArePinned(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, ".github", "workflows", "*.yml"))
	if len(files) == 0 {
		t.Fatal("no workflows")
	}
	uses := regexp.MustCompile(`(?m)^\s*(?:- )?uses:\s*(\S+)(.*)$`)
	pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$`)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range uses.FindAllStringSubmatch(string(data), -1) {
			n++
			if strings.HasPrefix(m[1], "./") {
				continue // an action of this repository
			}
			if !pinned.MatchString(m[1]) || !regexp.MustCompile(`^\s*# v\d+\.\d+\.\d+$`).MatchString(m[2]) {
				t.Errorf("%s: uses %s%s: want OWNER/REPO@<40-hex commit> # vX.Y.Z", filepath.Base(f), m[1], m[2])
			}
		}
	}
	if n == 0 {
		t.Fatal("found no uses: lines; the pattern is wrong")
	}
}

// The kind workflow's suite step fails when the cluster cannot come up: it runs the suite through
// make test-e2e-kind, whose E2E_REQUIRE=1 turns the suite's skip (no usable provider) into a
// failure; a plain test-e2e E2E_PROVIDER=kind would pass green with every test skipped. Its root
// build hands the module cache back too, or a later go command cannot add a module beside one
// root downloaded.
func TestKindWorkflowFailsWhenKindCannotStart(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".github", "workflows", "e2e-kind.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Run             string `json:"run"`
				If              any    `json:"if"`
				ContinueOnError any    `json:"continue-on-error"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	e2e := regexp.MustCompile(`\btest-e2e\b|\bgo test\b.*\be2e\b`)
	var suite, chown bool
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			for _, line := range strings.Split(s.Run, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, "#") {
					continue
				}
				if e2e.MatchString(line) || strings.Contains(line, "test-e2e-kind") {
					if line != "make test-e2e-kind" {
						t.Errorf("the kind workflow runs %q: want make test-e2e-kind (fails, not skips, when kind cannot start)", line)
					}
					if s.If != nil || s.ContinueOnError != nil {
						t.Errorf("the kind workflow's suite step has if: %v, continue-on-error: %v: its failure must fail the job", s.If, s.ContinueOnError)
					}
					suite = true
				}
				if chown && strings.Contains(line, "make kind-node-image") {
					t.Error("the kind workflow hands the module cache back before its root build, not after it")
				}
				if strings.HasPrefix(line, "sudo chown -R ") && strings.Contains(line, `"$(go env GOMODCACHE)"`) {
					chown = true
				}
			}
		}
	}
	if !suite {
		t.Error("the kind workflow runs no e2e suite")
	}
	if !chown {
		t.Error("the kind workflow does not hand the module cache back after its root build")
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?m)^test-e2e-kind:.*\n\t(.*)$`).FindSubmatch(mk)
	if recipe == nil || !strings.Contains(string(recipe[1]), "E2E_PROVIDER=kind E2E_REQUIRE=1") ||
		strings.HasPrefix(string(recipe[1]), "-") || strings.Contains(string(recipe[1]), "||") {
		t.Errorf("make test-e2e-kind's recipe is %q: want the suite run with E2E_PROVIDER=kind E2E_REQUIRE=1, its failure not ignored", recipe)
	}
}
