package images

import (
	"archive/tar"
	"context"
	"debug/elf"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func buildOpts() Options {
	return Options{Root: filepath.Join("..", ".."), Version: "v0.0.0-test", Revision: "0123456789abcdef",
		Source: "https://github.com/cozystack/reserved-ips"}
}

// testPlatforms are the platforms the tests build the shipped images for: this machine's alone,
// unless IMAGES_TEST_ALL_PLATFORMS=1 (make test-images-all-platforms) asks for every platform a
// release ships. TestBuildIsMultiArch proves the multi-arch build on a stand-in either way.
func testPlatforms() []v1.Platform {
	if os.Getenv("IMAGES_TEST_ALL_PLATFORMS") == "1" {
		return DefaultPlatforms
	}
	return []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}
}

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.OS+"/"+p.Architecture)
	}
	return strings.Join(s, ",")
}

func TestBuildIsReproducibleAndRuns(t *testing.T) {
	ctx := context.Background()
	img := Images[0]
	opts := buildOpts()
	opts.Platforms = testPlatforms()
	platforms := len(opts.Platforms)
	first, err := Build(ctx, img, opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(ctx, img, opts)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Index.Digest()
	d2, _ := second.Index.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of one commit gave %s and %s", d1, d2)
	}
	// The SBOMs are reproducible too, and there is one per platform naming its image.
	if len(first.SBOMs) != platforms || len(second.SBOMs) != platforms {
		t.Fatalf("want an SBOM per platform, got %d and %d", len(first.SBOMs), len(second.SBOMs))
	}
	for i := range first.SBOMs {
		a, _ := first.SBOMs[i].Digest()
		b, _ := second.SBOMs[i].Digest()
		if a != b {
			t.Fatalf("SBOM %d: two builds gave %s and %s", i, a, b)
		}
	}
	im, err := first.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	subjects, _ := first.Subjects()
	for i, d := range im.Manifests {
		if subjects[i] != d.Digest {
			t.Fatalf("SBOM %d names %s, want the platform image %s", i, subjects[i], d.Digest)
		}
	}
	if im.Annotations["org.opencontainers.image.revision"] != "0123456789abcdef" || im.Annotations["org.opencontainers.image.version"] != "v0.0.0-test" ||
		!strings.HasPrefix(im.Annotations[AnnotationGoVersion], "go1.") || im.Annotations["org.opencontainers.image.source"] == "" {
		t.Fatalf("index annotations %v", im.Annotations)
	}

	// Push to a registry on loopback and read it back.
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := Push(host+"/cozystack/"+img.Name+":test", first)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ref, "@"+d1.String()) {
		t.Fatalf("Push returned %s, want the digest %s", ref, d1)
	}
	parsed, err := name.ParseReference(host + "/cozystack/" + img.Name + "@" + d1.String())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(parsed)
	if err != nil {
		t.Fatal(err)
	}
	// Each platform image lists its SBOM as a referrer, and the SBOM is SPDX of the module graph.
	for i, subject := range subjects {
		refs, err := remote.Referrers(parsed.Context().Digest(subject.String()))
		if err != nil {
			t.Fatal(err)
		}
		rm, _ := refs.IndexManifest()
		if len(rm.Manifests) != 1 || rm.Manifests[0].ArtifactType != SBOMArtifactType {
			t.Fatalf("referrers of %s: %+v", subject, rm.Manifests)
		}
		art, err := remote.Image(parsed.Context().Digest(rm.Manifests[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := SBOMOf(art)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := SBOMOf(first.SBOMs[i])
		if string(doc) != string(want) {
			t.Fatal("the registry's SBOM differs from the built one")
		}
		for _, s := range []string{`"spdxVersion": "SPDX-2.3"`, "sigs.k8s.io/controller-runtime", "pkg:golang/stdlib@", `"name": "github.com/cozystack/reserved-ips/address-controller"`,
			"0123456789abcdef", "-trimpath=true", "CGO_ENABLED=0"} {
			if !strings.Contains(string(doc), s) {
				t.Errorf("the SBOM lacks %s", s)
			}
		}
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	var native v1.Hash
	for _, d := range m.Manifests {
		arches = append(arches, d.Platform.Architecture)
		if d.Platform.Architecture == runtime.GOARCH {
			native = d.Digest
		}
	}
	if want := platformList(opts.Platforms); "linux/"+strings.Join(arches, ",linux/") != want {
		t.Fatalf("platforms %v, want %s", arches, want)
	}
	image, err := idx.Image(native)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || cfg.Config.Labels["org.opencontainers.image.revision"] != "0123456789abcdef" ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "v0.0.0-test" || cfg.Config.Labels["org.opencontainers.image.source"] == "" {
		t.Fatalf("config %+v", cfg.Config)
	}
	// Extract the binary and run it.
	bin := extractBinary(t, image, img.Name)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "v0.0.0-test" {
		t.Fatalf("the extracted binary printed %q (%v)", out, err)
	}

	// And the OCI layout output holds the same index.
	dir := t.TempDir()
	if err := WriteLayout(dir, "test", first); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	lm, _ := ii.IndexManifest()
	if len(lm.Manifests) != 1+platforms || lm.Manifests[0].Digest != d1 || lm.Manifests[1].ArtifactType != SBOMArtifactType {
		t.Fatalf("layout holds %+v, want %s and %d SBOMs", lm.Manifests, d1, platforms)
	}

	// Writing the same build into the same layout again (make images twice) lists it once;
	// another ref is added beside it.
	if err := WriteLayout(dir, "test", first); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, "other", first); err != nil {
		t.Fatal(err)
	}
	if ii, err = p.ImageIndex(); err != nil {
		t.Fatal(err)
	}
	lm, _ = ii.IndexManifest()
	refs := map[string]int{}
	for _, m := range lm.Manifests {
		refs[m.Annotations["org.opencontainers.image.ref.name"]]++
	}
	if len(lm.Manifests) != 2+platforms || refs["test"] != 1 || refs["other"] != 1 || refs[""] != platforms {
		t.Fatalf("after writing test twice and other once the layout holds %+v, want test, other and %d SBOMs", lm.Manifests, platforms)
	}
}

// The multi-arch build, on a stand-in command (testdata/standin) that compiles for a second
// architecture in seconds: an index with a platform image per default platform, each holding a
// binary for its architecture, each with an SBOM referrer naming it; the native one runs.
func TestBuildIsMultiArch(t *testing.T) {
	img := Image{Name: "standin", Package: "./tools/images/testdata/standin"}
	built, err := Build(context.Background(), img, buildOpts())
	if err != nil {
		t.Fatal(err)
	}
	im, err := built.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	subjects, err := built.Subjects()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(DefaultPlatforms) || len(built.SBOMs) != len(DefaultPlatforms) {
		t.Fatalf("%d platform images and %d SBOMs, want %d each", len(im.Manifests), len(built.SBOMs), len(DefaultPlatforms))
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for i, d := range im.Manifests {
		want := DefaultPlatforms[i]
		if d.Platform == nil || d.Platform.OS != want.OS || d.Platform.Architecture != want.Architecture {
			t.Fatalf("manifest %d is for %+v, want %s/%s", i, d.Platform, want.OS, want.Architecture)
		}
		if subjects[i] != d.Digest {
			t.Fatalf("SBOM %d names %s, want the %s image %s", i, subjects[i], want.Architecture, d.Digest)
		}
		image, err := built.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != want.Architecture || cfg.OS != want.OS {
			t.Fatalf("the %s image's config says %s/%s", want.Architecture, cfg.OS, cfg.Architecture)
		}
		bin := extractBinary(t, image, img.Name)
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("the %s image's binary: %v", want.Architecture, err)
		}
		machine := f.Machine
		f.Close()
		if m, ok := machines[want.Architecture]; !ok || machine != m {
			t.Fatalf("the %s image holds a binary for %s", want.Architecture, machine)
		}
		if want.Architecture == runtime.GOARCH {
			if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "v0.0.0-test" {
				t.Fatalf("the native stand-in printed %q (%v)", out, err)
			}
		}
	}
}

// extractBinary writes the command name from the image's one layer into a temporary file.
func extractBinary(t *testing.T, image v1.Image, name string) string {
	t.Helper()
	layers, err := image.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer on an empty base, got %d (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s is not in the layer", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "usr/local/bin/"+name {
			continue
		}
		bin := filepath.Join(t.TempDir(), name)
		f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return bin
	}
}

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms("linux/amd64, linux/arm64")
	if err != nil || platformList(got) != "linux/amd64,linux/arm64" {
		t.Fatalf("got %v (%v)", got, err)
	}
	for _, bad := range []string{"", "amd64", "linux/", "/arm64", "linux/arm64/v8", "linux/amd64,"} {
		if _, err := ParsePlatforms(bad); err == nil || !strings.Contains(err.Error(), "OS/ARCH") {
			t.Errorf("%q: error %v, want one saying OS/ARCH", bad, err)
		}
	}
}
