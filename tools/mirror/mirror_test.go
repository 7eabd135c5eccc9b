package mirror

import (
	"bytes"
	"context"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/images"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// newRegistry starts an in-memory registry on loopback; alter, when set, rewrites blob
// responses (a registry that tampers with content).
func newRegistry(t *testing.T, alter bool) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if alter {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
				inner.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			inner.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if len(body) > 0 {
				body[len(body)/2] ^= 0xff
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushMultiArch pushes a two-platform index to host/cozystack/<repo>:v1 and returns its digest ref.
func pushMultiArch(t *testing.T, host, repo string) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := random.Image(1024, 2)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := img.ConfigFile()
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = "linux", arch
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	tag, _ := name.NewTag(host + "/cozystack/" + repo + ":v1")
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	return tag.String() + "@" + d.String()
}

func digestOf(ref string) string { return ref[strings.Index(ref, "@")+1:] }

func TestMirror(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	images := map[string]string{
		"address-controller": pushMultiArch(t, src, "address-controller"),
		"metallb-iad":        pushMultiArch(t, src, "metallb-iad"),
	}
	var log bytes.Buffer
	dst := newRegistry(t, false)
	res, err := Mirror(ctx, images, Options{Dest: dst + "/mirror", Progress: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(res) != 2 || !res[0].Copied || !res[1].Copied {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if digestOf(r.Dest) != digestOf(images[r.Component]) {
			t.Fatalf("%s: digest changed: %s → %s", r.Component, images[r.Component], r.Dest)
		}
		ref, _ := name.NewDigest(dst + "/mirror/" + r.Component + "@" + digestOf(r.Dest))
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := idx.IndexManifest()
		if len(m.Manifests) != 2 || m.Manifests[0].Platform.Architecture != "amd64" || m.Manifests[1].Platform.Architecture != "arm64" {
			t.Fatalf("%s: the mirrored index lost platforms: %+v", r.Component, m.Manifests)
		}
	}

	// A second run copies nothing.
	res, err = Mirror(ctx, images, Options{Dest: dst + "/mirror"})
	if err != nil || res[0].Copied || res[1].Copied {
		t.Fatalf("second run: %+v, %v", res, err)
	}

	// A dry run writes nothing.
	fresh := newRegistry(t, false)
	if _, err := Mirror(ctx, images, Options{Dest: fresh + "/mirror", DryRun: true}); err != nil {
		t.Fatal(err)
	}
	probe, _ := name.NewDigest(fresh + "/mirror/address-controller@" + digestOf(images["address-controller"]))
	if _, err := remote.Head(probe); err == nil {
		t.Fatal("a dry run wrote to the mirror")
	}

	// The printed values are Package values the chart accepts, for either install.
	for _, prefix := range PackagePrefixes {
		out, err := PackageValues(res, prefix)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kubeapply.Decode([]byte(out))
		if err != nil || len(objs) != 2 {
			t.Fatalf("values do not parse (%v):\n%s", err, out)
		}
		for _, o := range objs {
			component := strings.TrimPrefix(o.GetName(), prefix+".")
			values := o.Object["spec"].(map[string]any)["components"].(map[string]any)[component].(map[string]any)["values"].(map[string]any)[component].(map[string]any)
			c, err := charts.Load(charts.Dir(filepath.Join("..", ".."), component))
			if err != nil {
				t.Fatal(err)
			}
			manifest, err := charts.Render(c, "ns", values)
			if err != nil || !strings.Contains(manifest, values["image"].(string)) {
				t.Fatalf("%s: the chart rejects the printed image value: %v", o.GetName(), err)
			}
		}
	}
}

// TestPackageValuesAreTheInstallsPackages: the printed Packages are the install's own. By
// default they are the Packages of deploy/cozystack/reserved-ips.yaml, named and set as there
// with the image added, so that applying the printed file over that install (as
// docs/air-gap.md says) changes the image alone: kubectl apply would delete a value the file
// set and the printed one left out. With PrefixInTree they name the PackageSources of
// packages/core/platform/sources, Cozystack's own packages, and set the image alone.
func TestPackageValuesAreTheInstallsPackages(t *testing.T) {
	root := filepath.Join("..", "..")
	res := []Result{
		{Component: "address-controller", Dest: "mirror.example/x/address-controller:v1@sha256:" + strings.Repeat("a", 64)},
		{Component: "metallb-iad", Dest: "mirror.example/x/metallb-iad:v1@sha256:" + strings.Repeat("b", 64)},
		{Component: images.PackagesArtifact, Dest: "mirror.example/x/" + images.PackagesArtifact + ":v1", Chart: true},
	}
	objects := func(path string, kind string) map[string]*unstructured.Unstructured {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kubeapply.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			if o.GetKind() == kind {
				out[o.GetName()] = o
			}
		}
		return out
	}
	printed := func(prefix string) []*unstructured.Unstructured {
		t.Helper()
		out, err := PackageValues(res, prefix)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kubeapply.Decode([]byte(out))
		if err != nil || len(objs) != 2 {
			t.Fatalf("%s: want two Packages (%v):\n%s", prefix, err, out)
		}
		return objs
	}

	installed := objects(filepath.Join(root, images.OutOfTreeFile), "Package")
	for _, o := range printed(PrefixOutOfTree) {
		in, ok := installed[o.GetName()]
		if !ok {
			t.Errorf("printed Package %s, which %s does not install (its Packages: %v)", o.GetName(), images.OutOfTreeFile, slices.Sorted(maps.Keys(installed)))
			continue
		}
		want := in.DeepCopy()
		component := strings.TrimPrefix(o.GetName(), PrefixOutOfTree+".")
		for _, r := range res {
			if r.Component == component {
				if err := unstructured.SetNestedField(want.Object, r.Dest, "spec", "components", component, "values", component, "image"); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !reflect.DeepEqual(o.Object["spec"], want.Object["spec"]) || o.GetAPIVersion() != in.GetAPIVersion() {
			t.Errorf("printed Package %s is not the installed one with the image set:\nprinted %v\nwant    %v", o.GetName(), o.Object, want.Object)
		}
	}

	sources := map[string]*unstructured.Unstructured{}
	for _, f := range []string{"address-controller", "metallb-iad"} {
		maps.Copy(sources, objects(filepath.Join(root, "packages", "core", "platform", "sources", f+".yaml"), "PackageSource"))
	}
	for _, o := range printed(PrefixInTree) {
		component := strings.TrimPrefix(o.GetName(), PrefixInTree+".")
		values, _, _ := unstructured.NestedMap(o.Object, "spec", "components", component, "values", component)
		if sources[o.GetName()] == nil || len(values) != 1 || values["image"] == nil {
			t.Errorf("printed Package %s: want one of Cozystack's PackageSources (%v) with the image value alone, got %v", o.GetName(), slices.Sorted(maps.Keys(sources)), values)
		}
	}

	if _, err := PackageValues(res, "cozystack."); err == nil {
		t.Error("PackageValues took an unknown prefix")
	}
}

func TestMirrorFailuresNameTheImage(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	good := pushMultiArch(t, src, "address-controller")

	// A registry that alters content: caught on read-back, nothing claimed.
	evil := newRegistry(t, true)
	res, err := Mirror(ctx, map[string]string{"address-controller": good}, Options{Dest: evil + "/mirror"})
	if err == nil || len(res) != 0 || !strings.Contains(err.Error(), "address-controller") {
		t.Fatalf("tampering not caught: %+v, %v", res, err)
	}

	// A digest the source does not have.
	missing := src + "/cozystack/metallb-iad:v1@sha256:" + strings.Repeat("0", 64)
	res, err = Mirror(ctx, map[string]string{"metallb-iad": missing, "address-controller": good},
		Options{Dest: newRegistry(t, false) + "/mirror"})
	if err == nil || !strings.Contains(err.Error(), "metallb-iad") || len(res) != 1 || res[0].Component != "address-controller" {
		t.Fatalf("missing digest: %+v, %v", res, err)
	}

	// An unreachable registry, and a reference without a digest.
	for _, tc := range []struct{ ref, dest string }{
		{good, "127.0.0.1:1/mirror"},
		{src + "/cozystack/address-controller:v1", newRegistry(t, false)},
	} {
		res, err := Mirror(ctx, map[string]string{"address-controller": tc.ref}, Options{Dest: tc.dest})
		if err == nil || len(res) != 0 || !strings.Contains(err.Error(), "address-controller") {
			t.Fatalf("%s → %s: %+v, %v", tc.ref, tc.dest, res, err)
		}
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	images := map[string]string{"address-controller": pushMultiArch(t, src, "address-controller"),
		"metallb-iad": pushMultiArch(t, src, "metallb-iad")}
	archive := filepath.Join(t.TempDir(), "images.tar")
	if _, err := Save(ctx, images, archive, Options{}); err != nil {
		t.Fatal(err)
	}
	dst := newRegistry(t, false)
	res, err := Load(ctx, archive, Options{Dest: dst + "/airgap"})
	if err != nil || len(res) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, r := range res {
		if digestOf(r.Dest) != digestOf(images[r.Component]) || !r.Copied {
			t.Fatalf("%+v", r)
		}
	}
}

func TestPackageImagesReadsTheShippedReferences(t *testing.T) {
	got, err := PackageImages(filepath.Join("..", "..", "packages"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := images.ReadShipped(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for n, ref := range shipped {
		if got[n] != ref {
			t.Errorf("%s: the packages ship %s, images.yaml says %s", n, got[n], ref)
		}
	}
}
