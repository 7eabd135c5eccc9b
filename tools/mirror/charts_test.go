package mirror

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/images"
)

// publishCharts publishes both charts of the checkout, as `make release` does, and packages/ as
// the packages artifact, under reg/cozystack at version, and returns the charts' references
// (repo/name:version@sha256:...) by name, the packages artifact's included.
func publishCharts(t *testing.T, reg, version string) map[string]string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range []string{"address-controller", "metallb-iad"} {
		ref, err := charts.PublishChart(charts.Dir(root, n), reg+"/cozystack/charts", version, true)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = ref
	}
	pkgs, err := images.PushPackages(root, reg+"/cozystack", version, "0000000", true)
	if err != nil {
		t.Fatal(err)
	}
	out[images.PackagesArtifact] = pkgs
	return out
}

// TestChartsTravelInTheArchive: the archive carries both charts (and the packages artifact) with
// their signatures, next to the images, and load pushes them into a real registry, where Helm
// pulls them by the released version.
func TestChartsTravelInTheArchive(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	published := publishCharts(t, src, "v1.2.3")
	sigs := attach(t, strings.TrimPrefix(published["metallb-iad"], ""))
	// Save takes tag references and resolves them: that is what the checkout names.
	tagged := map[string]string{}
	for n, ref := range published {
		tagged[n] = "oci://" + ref[:strings.Index(ref, "@")]
	}
	imgs := map[string]string{"metallb-iad": pushMultiArch(t, src, "metallb-iad")}
	archive := filepath.Join(t.TempDir(), "reserved-ips.tar")
	res, err := Save(ctx, imgs, archive, Options{Charts: tagged})
	if err != nil || len(res) != 4 {
		t.Fatalf("save: %+v, %v", res, err)
	}

	// In the archive: each chart by its source reference, marked as a chart, with its digest.
	dir := t.TempDir()
	if err := VerifyArchive(archive, dir); err != nil {
		t.Fatal(err)
	}
	p, _ := layout.FromPath(dir)
	top, _ := p.ImageIndex()
	m, _ := top.IndexManifest()
	inArchive := map[string]v1.Descriptor{}
	for _, d := range m.Manifests {
		if d.Annotations[AnnotationKind] == "chart" {
			inArchive[d.Annotations[AnnotationComponent]] = d
		}
	}
	for n, ref := range published {
		d, ok := inArchive[n]
		if !ok || d.Annotations[refName] != ref || d.Digest.String() != digestOf(ref) {
			t.Errorf("the archive holds chart %s as %+v, want %s", n, d, ref)
		}
	}

	// Out, into a real registry: the charts under PREFIX/charts/<name>, same digests, the
	// signatures along; Helm pulls both at the released version, and they are the charts.
	reg := startRegistry(t, "127.0.0.1", false)
	access := Access{PlainHTTP: []string{reg.Addr}}
	res, err = Load(ctx, archive, Options{Dest: reg.Addr + "/airgap", Access: access})
	if err != nil || len(res) != 4 {
		t.Fatalf("load: %+v, %v", res, err)
	}
	for _, r := range res {
		if !r.Chart {
			continue
		}
		wantRepo := reg.Addr + "/airgap/charts/" + r.Component
		if r.Component == images.PackagesArtifact {
			wantRepo = reg.Addr + "/airgap/" + r.Component
		}
		if !r.Copied || !strings.HasPrefix(r.Dest, wantRepo+":1.2.3@") && !strings.HasPrefix(r.Dest, wantRepo+":v1.2.3@") ||
			digestOf(r.Dest) != digestOf(published[r.Component]) {
			t.Errorf("chart %s went to %s, want %s:<version>@%s", r.Component, r.Dest, wantRepo, digestOf(published[r.Component]))
		}
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, n := range []string{"address-controller", "metallb-iad"} {
		c, err := charts.PullChart("oci://"+reg.Addr+"/airgap/charts", n, "v1.2.3", true)
		if err != nil {
			t.Fatalf("helm pull from the mirror: %v", err)
		}
		want, err := charts.Load(charts.Dir(root, n))
		if err != nil {
			t.Fatal(err)
		}
		if c.Name() != n || c.Metadata.Version != "1.2.3" || len(c.Templates) != len(want.Templates) {
			t.Errorf("pulled %s %s with %d templates, want %s 1.2.3 with %d", c.Name(), c.Metadata.Version, len(c.Templates), n, len(want.Templates))
		}
	}
	d, _ := name.NewDigest(reg.Addr+"/airgap/charts/metallb-iad@"+digestOf(published["metallb-iad"]), name.Insecure)
	checkAttachments(t, d.String(), sigs, remote.WithContext(ctx))
	if _, err := remote.Head(d.Context().Registry.Repo("airgap", images.PackagesArtifact).Tag("v1.2.3"), remote.WithContext(ctx)); err != nil {
		t.Errorf("the packages artifact is not in the mirror: %v", err)
	}

	// The Package values name images only.
	if v, _ := PackageValues(res, PrefixOutOfTree); strings.Contains(v, "charts") || strings.Count(v, "kind: Package") != 1 {
		t.Errorf("the Package values should name the image alone:\n%s", v)
	}
}

// TestPackageChartsReadTheRelease: the checkout's charts are those of the release its
// out-of-tree file pins, one per package, and the packages artifact by its digest.
func TestPackageChartsReadTheRelease(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"address-controller", "metallb-iad"} {
		dir := filepath.Join(root, "packages", "system", n)
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("name: cozy-"+n+"\n"), 0o644)
	}
	_ = os.MkdirAll(filepath.Join(root, "deploy", "cozystack"), 0o755)
	digest := "sha256:" + strings.Repeat("a", 64)
	_ = os.WriteFile(filepath.Join(root, images.OutOfTreeFile), []byte(`kind: PackageSource
metadata:
  name: x
---
kind: OCIRepository
spec:
  url: oci://registry.example/cozystack/reserved-ips-packages
  ref:
    tag: v0.4.0
    digest: `+digest+"\n"), 0o644)
	got, err := PackageCharts(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"address-controller":    "registry.example/cozystack/charts/address-controller:0.4.0",
		"metallb-iad":           "registry.example/cozystack/charts/metallb-iad:0.4.0",
		images.PackagesArtifact: "registry.example/cozystack/reserved-ips-packages:v0.4.0@" + digest,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
	// The repository's own file reads too.
	if got, err := PackageCharts(filepath.Join("..", "..")); err != nil || len(got) != 3 {
		t.Errorf("the checkout's charts: %v, %v", got, err)
	}
}
