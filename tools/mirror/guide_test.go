package mirror

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cozystack/reserved-ips/tools/charts"
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
	skipped := 0
	for _, m := range regexp.MustCompile("(?s)```(sh[^\n]*)\n(.*?)```").FindAllStringSubmatch(string(guide), -1) {
		switch {
		case m[1] != "sh":
			skipped++
		case strings.HasPrefix(m[2], "# site settings"):
			// The test provides these.
		default:
			script = append(script, m[2])
		}
	}
	if skipped != 2 || len(script) != 2 {
		t.Fatalf("the guide has %d runnable and %d unrun blocks; the test expects 2 and 2 (cosign, kubectl)", len(script), skipped)
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
	cmd.Env = append(os.Environ(), "MIRROR="+mirror, "MIRROR_CA="+reg.CAFile, "AUTHFILE="+authFile, "GOFLAGS=-buildvcs=false", "GOWORK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands failed: %v\n%s", err, out)
	}
	for _, f := range []string{"reserved-ips-images.tar", "reserved-ips-images.tar.sha256", "mirror"} {
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
		component := strings.TrimPrefix(o.GetName(), "cozystack.")
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
}

func mustHash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
