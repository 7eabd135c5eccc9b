package mirror

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// TestAirGapGuide runs the shell blocks of docs/air-gap.md, in order, as an admin would: save on
// the "connected" side from a source registry, check and load into a real registry with TLS and
// basic auth, and checks the Package values it ends with. Blocks tagged `sh cosign` and
// `sh kubectl` are the only ones not run; the guide says why.
func TestAirGapGuide(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "air-gap.md"))
	if err != nil {
		t.Fatal(err)
	}
	var script []string
	var cosignBlock string
	skipped := 0
	for _, m := range regexp.MustCompile("(?s)```(sh[^\n]*)\n(.*?)```").FindAllStringSubmatch(string(guide), -1) {
		switch {
		case m[1] == "sh cosign":
			cosignBlock += m[2]
		case m[1] != "sh":
			skipped++
		case strings.HasPrefix(m[2], "# site settings"):
			// The test provides these.
		default:
			script = append(script, m[2])
		}
	}
	if skipped != 2 || len(script) != 2 || cosignBlock == "" {
		t.Fatalf("the guide has %d runnable blocks, %d unrun and cosign commands %v; the test expects 2, 2 (kubectl) and true", len(script), skipped, cosignBlock != "")
	}

	// The source: the two images with signatures and SBOMs, named by a packages/ directory.
	src := newRegistry(t, false)
	site := t.TempDir()
	refs := map[string]string{}
	atts := map[string][]string{}
	for _, n := range []string{"address-controller", "metallb-iad"} {
		refs[n] = pushMultiArch(t, src, n)
		for _, h := range attach(t, refs[n]) {
			atts[n] = append(atts[n], h.String())
		}
		dir := filepath.Join(site, "packages", "system", n)
		_ = os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(n+":\n  image: "+refs[n]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The release's charts and packages artifact, published where the checkout's out-of-tree file
	// says (make release writes the registry and version there).
	published := publishCharts(t, src, "v1.2.3")
	for _, n := range []string{"address-controller", "metallb-iad"} {
		_ = os.WriteFile(filepath.Join(site, "packages", "system", n, "Chart.yaml"), []byte("name: cozy-"+n+"\n"), 0o644)
	}
	_ = os.MkdirAll(filepath.Join(site, "deploy", "cozystack"), 0o755)
	if err := os.WriteFile(filepath.Join(site, images.OutOfTreeFile), []byte("kind: OCIRepository\nspec:\n  url: oci://"+src+
		"/cozystack/"+images.PackagesArtifact+"\n  ref:\n    tag: v1.2.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A checkout-shaped directory: go.work, the tools module, those packages.
	if err := os.WriteFile(filepath.Join(site, "go.work"), []byte("go 1.26.0\n\nuse ./tools\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "tools"), filepath.Join(site, "tools")); err != nil {
		t.Fatal(err)
	}
	// The mirror: a real registry with TLS and basic auth, credentials in a Podman auth file.
	reg := startRegistry(t, "127.0.0.1", true)
	host := reg.Addr
	authFile := filepath.Join(site, "auth.json")
	_ = os.WriteFile(authFile, []byte(`{"auths":{"`+host+`":{"auth":"`+base64.StdEncoding.EncodeToString([]byte(regUser+":"+regPass))+`"}}}`), 0o600)
	mirror := host + "/cozystack"

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir = site
	cmd.Env = append(os.Environ(), "MIRROR="+mirror, "MIRROR_CA="+reg.CAFile, "AUTHFILE="+authFile, "GOFLAGS=-buildvcs=false -trimpath", "GOWORK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands failed: %v\n%s", err, out)
	}
	for _, f := range []string{"reserved-ips.tar", "reserved-ips.tar.sha256", "mirror"} {
		if _, err := os.Stat(filepath.Join(site, f)); err != nil {
			t.Errorf("the guide should leave %s: %v", f, err)
		}
	}

	// The values name the mirror's copies, by the source digests, and both charts take them.
	values, err := os.ReadFile(filepath.Join(site, "reserved-ips-packages.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeapply.Decode(values)
	if err != nil || len(objs) != 2 {
		t.Fatalf("want two Packages (%v):\n%s", err, values)
	}
	good := Access{CAFile: reg.CAFile, Creds: map[string]authn.AuthConfig{host: {Username: regUser, Password: regPass}}}
	for _, o := range objs {
		component := strings.TrimPrefix(o.GetName(), PrefixOutOfTree+".")
		if o.GetKind() != "Package" || refs[component] == "" {
			t.Fatalf("unexpected object %s %s", o.GetKind(), o.GetName())
		}
		v := o.Object["spec"].(map[string]any)["components"].(map[string]any)[component].(map[string]any)["values"].(map[string]any)[component].(map[string]any)
		img, _ := v["image"].(string)
		if !strings.HasPrefix(img, mirror+"/"+component+":v1@") || digestOf(img) != digestOf(refs[component]) {
			t.Fatalf("%s: image value %s, want %s/%s:v1@%s", component, img, mirror, component, digestOf(refs[component]))
		}
		c, err := charts.Load(charts.Dir(root, component))
		if err != nil {
			t.Fatal(err)
		}
		if manifest, err := charts.Render(c, "ns", v); err != nil || !strings.Contains(manifest, img) {
			t.Fatalf("%s: the chart does not take the value: %v", component, err)
		}
		// The signatures and SBOMs came along, where cosign and oras look for them.
		var want []v1.Hash
		for _, a := range atts[component] {
			want = append(want, mustHash(t, a))
		}
		checkAttachments(t, img, want, remoteFor(t, good, host)...)
	}

	// The charts and the packages artifact reached the mirror, by their released digests, where
	// the guide says: $MIRROR/charts/<name>:<chart version>, $MIRROR/reserved-ips-packages:<version>.
	for n, ref := range published {
		where := mirror + "/charts/" + n + ":1.2.3"
		if n == images.PackagesArtifact {
			where = mirror + "/" + n + ":v1.2.3"
		}
		desc, err := remote.Head(mustRef(t, where), remoteFor(t, good, host)...)
		if err != nil || desc.Digest.String() != digestOf(ref) {
			t.Errorf("%s in the mirror: %v, %v; want %s", where, desc, err, digestOf(ref))
		}
	}

	// The signatures: what the guide verifies is what the release workflow signs and attests.
	// Both scripts run with a stand-in cosign that records its arguments (real keyless signing
	// needs GitHub's OIDC token and Sigstore's services); the release workflow's step runs on
	// the source images, the guide's on the mirror's copies, which keep the digests.
	signed, attested := workflowSubjects(t, root, refs)
	calls := runWithCosign(t, site, cosignBlock, "MIRROR_CA="+reg.CAFile, "AUTHFILE="+authFile)
	// Fails closed: when the mirror cannot be read (here, a CA that does not sign it), the check
	// fails instead of verifying less and succeeding.
	{
		bin := t.TempDir()
		if err := os.WriteFile(filepath.Join(bin, "cosign"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", cosignBlock)
		cmd.Dir = site
		cmd.Env = append(os.Environ(), "MIRROR_CA="+filepath.Join(bin, "cosign"), "AUTHFILE="+authFile,
			"PATH="+bin+":"+os.Getenv("PATH"), "GOFLAGS=-buildvcs=false -trimpath", "GOWORK=")
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("the guide's signature check succeeded although the mirror could not be read:\n%s", out)
		}
	}
	verified, verifiedAtt := map[string]bool{}, map[string]bool{}
	for _, c := range calls {
		if c.identity != releaseIdentity || c.issuer != "https://token.actions.githubusercontent.com" {
			t.Errorf("the guide runs %q: want --certificate-identity %s and the GitHub Actions issuer (the release workflow only runs on main)", c.line, releaseIdentity)
		}
		if !strings.HasPrefix(c.subject, mirror+"/") {
			t.Errorf("the guide verifies %s, not a copy in the mirror", c.subject)
		}
		d := digestOf(c.subject)
		switch {
		case c.verb == "verify":
			if !signed[d] {
				t.Errorf("the guide verifies a signature on %s, which the release workflow does not sign (it signs %v)", c.subject, keys(signed))
			}
			verified[d] = true
		case c.verb == "verify-attestation" && c.typ == "spdxjson":
			if !attested[d] {
				t.Errorf("the guide verifies an SBOM attestation on %s, which the release workflow does not attest (it attests %v)", c.subject, keys(attested))
			}
			verifiedAtt[d] = true
		default:
			t.Errorf("unexpected cosign command in the guide: %s", c.line)
		}
	}
	for _, ref := range refs {
		if !verified[digestOf(ref)] {
			t.Errorf("the guide does not verify the signature of the image the Package names, %s", digestOf(ref))
		}
	}
	for d := range attested {
		if !verifiedAtt[d] {
			t.Errorf("the release attests an SBOM to %s; the guide does not verify it", d)
		}
	}
}

// releaseIdentity is the certificate identity of the release workflow's keyless signatures: the
// workflow file on the main branch (TestReleaseWorkflowOrder checks it refuses other refs).
const releaseIdentity = "https://github.com/cozystack/reserved-ips/.github/workflows/release.yml@refs/heads/main"

type cosignCall struct {
	line, verb, subject, typ, identity, issuer string
	recursive                                  bool
}

// runWithCosign runs script in dir with a stand-in cosign on PATH and returns its calls.
func runWithCosign(t *testing.T, dir, script string, env ...string) []cosignCall {
	t.Helper()
	bin := t.TempDir()
	logFile := filepath.Join(bin, "calls")
	if err := os.WriteFile(filepath.Join(bin, "cosign"), []byte("#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$COSIGN_LOG\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "PATH="+bin+":"+os.Getenv("PATH"), "COSIGN_LOG="+logFile, "GOFLAGS=-buildvcs=false -trimpath", "GOWORK=")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s\n%s", err, script, out)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("cosign was never called by\n%s", script)
	}
	var calls []cosignCall
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		c := cosignCall{line: line, verb: f[0], subject: f[len(f)-1]}
		for i := 1; i < len(f)-1; i++ {
			switch f[i] {
			case "--recursive":
				c.recursive = true
			case "--type":
				c.typ = f[i+1]
			case "--certificate-identity":
				c.identity = f[i+1]
			case "--certificate-oidc-issuer":
				c.issuer = f[i+1]
			}
		}
		calls = append(calls, c)
	}
	return calls
}

// workflowSubjects runs the signing step of .github/workflows/release.yml on the images (as
// `make release` leaves them: images.yaml, and one SBOM file per platform image in SBOM_DIR
// named <image>_<platform digest hex>.spdx.json, as tools/cmd/images writes them) and returns
// the digests it signs (with the platform images of an index signed --recursive) and those it
// attests an SPDX SBOM to.
func workflowSubjects(t *testing.T, root string, refs map[string]string) (signed, attested map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct{ Run string } `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	var step string
	for _, s := range wf.Jobs["release"].Steps {
		if strings.Contains(s.Run, "cosign sign") {
			step = s.Run
		}
	}
	if step == "" {
		t.Fatal("the release workflow has no signing step")
	}
	dir, sboms := t.TempDir(), t.TempDir()
	var shipped strings.Builder
	for n, ref := range refs {
		shipped.WriteString(n + ": " + ref + "\n")
		ps, err := Platforms(context.Background(), ref, Access{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if err := os.WriteFile(filepath.Join(sboms, n+"_"+strings.TrimPrefix(digestOf(p.Ref), "sha256:")+".spdx.json"), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "images.yaml"), []byte(shipped.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// make release also lists the charts and the packages artifact it published, to be signed.
	chartDigest := "sha256:" + strings.Repeat("c", 64)
	if err := os.MkdirAll(filepath.Join(dir, "bin", "release"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "release", "charts.txt"),
		[]byte("oci://ghcr.io/cozystack/charts/metallb-iad:0.1.0@"+chartDigest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	signed, attested = map[string]bool{}, map[string]bool{}
	defer func() {
		if !signed[chartDigest] {
			t.Errorf("the release workflow does not sign the charts make release lists (signs %v)", keys(signed))
		}
		delete(signed, chartDigest)
	}()
	for _, c := range runWithCosign(t, dir, step, "SBOM_DIR="+sboms) {
		switch {
		case c.verb == "sign":
			signed[digestOf(c.subject)] = true
			if c.recursive {
				ps, err := Platforms(context.Background(), c.subject, Access{})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					signed[digestOf(p.Ref)] = true
				}
			}
		case c.verb == "attest" && c.typ == "spdxjson":
			attested[digestOf(c.subject)] = true
		}
	}
	return signed, attested
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mustHash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
