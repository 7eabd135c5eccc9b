package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// A chart published with the Helm SDK comes back from the registry as the same chart at the
// release version, and renders as the one in charts/ does.
func TestPublishChartRoundTrip(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/cozystack/charts"
	for _, n := range packaged {
		ref, err := PublishChart(Dir(root, n), "oci://"+repo, "v1.2.3", true)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ref, repo+"/"+n+":1.2.3@sha256:") {
			t.Errorf("pushed %s", ref)
		}
		got, err := PullChart(repo, n, "v1.2.3", true)
		if err != nil {
			t.Fatal(err)
		}
		local, err := Load(Dir(root, n))
		if err != nil {
			t.Fatal(err)
		}
		if got.Metadata.Version != "1.2.3" || got.Metadata.AppVersion != "1.2.3" || !reflect.DeepEqual(got.Values, local.Values) {
			t.Errorf("%s: pulled %s/%s, values equal: %v", n, got.Metadata.Version, got.Metadata.AppVersion, reflect.DeepEqual(got.Values, local.Values))
		}
		a, err := RenderRelease(got, n, "cozy-"+n, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RenderRelease(local, n, "cozy-"+n, nil)
		if strings.ReplaceAll(a, "1.2.3", "0.1.0") != b {
			t.Errorf("%s: the published chart renders differently from charts/%s", n, n)
		}
	}
}

// The packages artifact is a Flux OCI artifact of packages/: Flux's config and content media
// types, one gzipped tar whose paths are those the PackageSources' components name.
func TestPushPackagesIsAFluxArtifact(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/cozystack"
	ref, err := images.PushPackages(root, reg, "v1.2.3", "abc", true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := name.NewDigest(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	if m.Config.MediaType != images.FluxConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != images.FluxContentMediaType {
		t.Fatalf("manifest %+v", m)
	}
	layer, _ := img.Layers()
	rc, _ := layer[0].Compressed()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	seen := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name], _ = io.ReadAll(tr)
	}
	for _, n := range packaged {
		for _, f := range []string{"Chart.yaml", "values.yaml", "charts/" + n + "/Chart.yaml"} {
			want, _ := os.ReadFile(filepath.Join(root, "packages", "system", n, f))
			if !bytes.Equal(seen["system/"+n+"/"+f], want) {
				t.Errorf("artifact lacks system/%s/%s", n, f)
			}
		}
	}
	again, err := images.PushPackages(root, reg, "v1.2.3", "abc", true)
	if err != nil || again != ref {
		t.Errorf("the artifact is not reproducible: %s, then %s (%v)", ref, again, err)
	}
}

// The out-of-tree file holds the in-tree PackageSources under reserved-ips.* names (the driver's
// dependency on the core renamed with it), reading our own artifact, and a Package for each.
func TestOutOfTreeMatchesTheSources(t *testing.T) {
	objs, err := kubeapply.Decode([]byte(readText(t, filepath.Join(root, images.OutOfTreeFile))))
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]map[string]map[string]any{}
	for _, o := range objs {
		if byKind[o.GetKind()] == nil {
			byKind[o.GetKind()] = map[string]map[string]any{}
		}
		byKind[o.GetKind()][o.GetName()] = o.Object
	}
	repo := byKind["OCIRepository"]["reserved-ips-packages"]
	if dig(repo, "metadata", "namespace") != "cozy-system" || !strings.HasPrefix(dig(repo, "spec", "url").(string), "oci://ghcr.io/cozystack/reserved-ips-packages") ||
		dig(repo, "spec", "layerSelector", "mediaType") != string(images.FluxContentMediaType) {
		t.Errorf("OCIRepository %v", repo)
	}
	for _, n := range packaged {
		var in map[string]any
		if err := yaml.Unmarshal([]byte(readText(t, filepath.Join(root, "packages", "core", "platform", "sources", n+".yaml"))), &in); err != nil {
			t.Fatal(err)
		}
		out := byKind["PackageSource"]["reserved-ips."+n]
		if out == nil {
			t.Fatalf("no PackageSource reserved-ips.%s", n)
		}
		if dig(out, "spec", "sourceRef", "name") != "reserved-ips-packages" || dig(out, "spec", "sourceRef", "namespace") != "cozy-system" {
			t.Errorf("reserved-ips.%s reads %v", n, dig(out, "spec", "sourceRef"))
		}
		wantVariants, _ := yaml.Marshal(dig(in, "spec", "variants"))
		gotVariants, _ := yaml.Marshal(dig(out, "spec", "variants"))
		want := strings.ReplaceAll(string(wantVariants), "cozystack.address-controller", "reserved-ips.address-controller")
		if string(gotVariants) != want {
			t.Errorf("reserved-ips.%s variants differ from sources/%s.yaml:\n%s\nwant\n%s", n, n, gotVariants, want)
		}
		if dig(byKind["Package"]["reserved-ips."+n], "spec", "variant") != "default" {
			t.Errorf("no Package reserved-ips.%s", n)
		}
		for name := range byKind["PackageSource"] {
			if strings.HasPrefix(name, "cozystack.") {
				t.Errorf("%s uses Cozystack's prefix", name)
			}
		}
	}
}
