package mirror

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/images"
)

// attach gives the image at ref what a signed release carries: an SBOM referrer on the index, one
// on a platform manifest (for an index), and cosign-scheme signature and attestation tags. It
// returns the digests of the four attachments.
func attach(t *testing.T, ref string, opts ...remote.Option) []v1.Hash {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []v1.Descriptor{desc.Descriptor}
	if desc.MediaType.IsIndex() {
		idx, _ := desc.ImageIndex()
		m, _ := idx.IndexManifest()
		subjects = append(subjects, m.Manifests[0])
	}
	var out []v1.Hash
	for i, s := range subjects {
		art, err := images.NewSBOMArtifact([]byte(`{"spdxVersion":"SPDX-2.3","n":`+string(rune('0'+i))+`}`), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		ad, _ := art.Digest()
		if err := remote.Write(d.Context().Digest(ad.String()), art, opts...); err != nil {
			t.Fatal(err)
		}
		out = append(out, ad)
	}
	for _, suffix := range []string{"sig", "att"} {
		sig, _ := random.Image(256, 1)
		sd, _ := sig.Digest()
		tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + "." + suffix)
		if err := remote.Write(tag, sig, opts...); err != nil {
			t.Fatal(err)
		}
		out = append(out, sd)
	}
	return out
}

// checkAttachments proves the mirror holds each attachment of the image at dst, listed where a
// verifier looks: the referrers of its subject, or cosign's tag.
func checkAttachments(t *testing.T, dst string, want []v1.Hash, opts ...remote.Option) {
	t.Helper()
	// Insecure only lets the client fall back to plain HTTP (the plain-HTTP registry test).
	d, err := name.NewDigest(dst, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := remote.Referrers(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := refs.IndexManifest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want[0] || m.Manifests[0].ArtifactType != images.SBOMArtifactType {
		t.Fatalf("referrers of %s in the mirror: %+v, want %s", dst, m.Manifests, want[0])
	}
	for i, suffix := range []string{"sig", "att"} {
		tag := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + "." + suffix)
		desc, err := remote.Head(tag, opts...)
		if err != nil || desc.Digest != want[len(want)-2+i] {
			t.Fatalf("%s in the mirror: %v, %v", tag, desc, err)
		}
	}
	for _, h := range want {
		if _, err := remote.Head(d.Context().Digest(h.String()), opts...); err != nil {
			t.Fatalf("attachment %s missing in the mirror: %v", h, err)
		}
	}
}

func TestMirrorCopiesSignaturesAttestationsAndSBOMs(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	ref := pushMultiArch(t, src, "metallb-iad")
	want := attach(t, ref)
	dst := newRegistry(t, false)
	res, err := Mirror(ctx, map[string]string{"metallb-iad": ref}, Options{Dest: dst + "/mirror"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Attachments) != 4 {
		t.Fatalf("results %+v, want four attachments", res)
	}
	checkAttachments(t, res[0].Dest, want)

	// Again: nothing new, all verified.
	if res, err = Mirror(ctx, map[string]string{"metallb-iad": ref}, Options{Dest: dst + "/mirror"}); err != nil || res[0].Copied || len(res[0].Attachments) != 4 {
		t.Fatalf("second run %+v, %v", res, err)
	}

	// --no-referrers copies the image alone.
	bare := newRegistry(t, false)
	res, err = Mirror(ctx, map[string]string{"metallb-iad": ref}, Options{Dest: bare + "/mirror", NoReferrers: true})
	if err != nil || len(res) != 1 || len(res[0].Attachments) != 0 {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, h := range want {
		if _, err := remote.Head(mustRef(t, bare+"/mirror/metallb-iad@"+h.String())); err == nil {
			t.Fatalf("--no-referrers copied %s", h)
		}
	}
}

func TestDestinationNames(t *testing.T) {
	s, _ := newSession(Access{})
	dig := "@sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		ref      string
		keepPath bool
		want     string
	}{
		{"ghcr.io/cozystack/address-controller:v1.2.0" + dig, false, "mirror.example.org/m/address-controller:v1.2.0"},
		{"ghcr.io/cozystack/address-controller:latest" + dig, false, "mirror.example.org/m/address-controller:latest"},
		{"ghcr.io/cozystack/address-controller:release-latest" + dig, false, "mirror.example.org/m/address-controller:release-latest"},
		{"ghcr.io/cozystack/address-controller" + dig, false, "mirror.example.org/m/address-controller:" + DefaultTag},
		{"registry.local:5000/cozystack/address-controller" + dig, false, "mirror.example.org/m/address-controller:" + DefaultTag},
		{"ghcr.io/cozystack/address-controller:v1" + dig, true, "mirror.example.org/m/cozystack/address-controller:v1"},
	} {
		d, tag, err := parse(s, tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		got, gotDigest, err := destination(s, "mirror.example.org/m", d, tag, tc.keepPath, false)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != tc.want || gotDigest.DigestStr() != d.DigestStr() {
			t.Errorf("%s (keep path %v) → %s@%s, want %s", tc.ref, tc.keepPath, got, gotDigest.DigestStr(), tc.want)
		}
	}
}

func TestArchiveHoldsIndexesSingleImagesAndAttachments(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	multi := pushMultiArch(t, src, "address-controller")
	singleRef := pushSingle(t, src)
	wantMulti, wantSingle := attach(t, multi), attach(t, singleRef)

	dir := t.TempDir()
	archive := filepath.Join(dir, "images.tar")
	res, err := Save(ctx, map[string]string{"address-controller": multi, "metallb-iad": singleRef}, archive, Options{})
	if err != nil || len(res) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("want the archive and its checksum file only, got %v", entries)
	}
	dst := newRegistry(t, false)
	res, err = Load(ctx, archive, Options{Dest: dst + "/airgap"})
	if err != nil || len(res) != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	checkAttachments(t, res[0].Dest, wantMulti)
	checkAttachments(t, res[1].Dest, wantSingle)
	if digestOf(res[1].Dest) != digestOf(singleRef) {
		t.Fatalf("the single image changed digest: %s", res[1].Dest)
	}
}

func TestLoadRefusesDamagedArchives(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	ref := pushMultiArch(t, src, "address-controller")
	archive := filepath.Join(t.TempDir(), "images.tar")
	if _, err := Save(ctx, map[string]string{"address-controller": ref}, archive, Options{}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(archive)
	sum, _ := os.ReadFile(ChecksumFile(archive))
	rewrite := func(data []byte, resum bool) {
		_ = os.WriteFile(archive, data, 0o644)
		if resum {
			h, _, _ := v1.SHA256(strings.NewReader(string(data)))
			_ = os.WriteFile(ChecksumFile(archive), []byte(h.Hex+"  images.tar\n"), 0o644)
		} else {
			_ = os.WriteFile(ChecksumFile(archive), sum, 0o644)
		}
	}
	// Alter one byte inside a blob's content (found with archive/tar, so that it is never a tar
	// header), and, separately, one byte of a tar header.
	dataAt, headerAt := blobOffsets(t, good)
	flip := append([]byte(nil), good...)
	flip[dataAt] ^= 0xff
	badHeader := append([]byte(nil), good...)
	badHeader[headerAt] ^= 0xff
	for _, tc := range []struct {
		name    string
		prepare func()
		want    string
	}{
		{"truncated", func() { rewrite(good[:len(good)/2], false) }, "truncated or altered"},
		{"tampered", func() { rewrite(flip, false) }, "truncated or altered"},
		{"no checksum file", func() { rewrite(good, false); os.Remove(ChecksumFile(archive)) }, "no checksum file"},
		{"truncated mid-file, checksum recomputed", func() { rewrite(good[:len(good)/2], true) }, "truncated"},
		{"last files cut off, checksum recomputed", func() { rewrite(good[:len(good)-2048], true) }, "truncated"},
		{"tampered blob, checksum recomputed", func() { rewrite(flip, true) }, "holds content hashing to"},
		{"tampered tar header", func() { rewrite(badHeader, false) }, "truncated or altered"},
		{"tampered tar header, checksum recomputed", func() { rewrite(badHeader, true) }, "is damaged or not a tar: archive/tar: invalid tar header"},
		{"cut inside a blob, checksum recomputed", func() { rewrite(good[:dataAt+1], true) }, "is truncated: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			dst := newRegistry(t, false)
			res, err := Load(ctx, archive, Options{Dest: dst + "/airgap"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || len(res) != 0 {
				t.Fatalf("Load: %+v, %v; want an error saying %q", res, err, tc.want)
			}
			if _, err := remote.Head(mustRef(t, dst+"/airgap/address-controller@"+digestOf(ref))); err == nil {
				t.Fatal("a refused archive was pushed")
			}
		})
	}
}

// blobOffsets returns the offset of the middle byte of the first non-empty blob's content in the
// tar data, and the offset of a byte inside that blob's own header block (its name).
func blobOffsets(t *testing.T, data []byte) (dataAt, headerAt int) {
	t.Helper()
	r := &countingReader{r: bytes.NewReader(data)}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no blob in the archive: %v", err)
		}
		// tar.Reader stops reading at the start of an entry's content.
		start := r.n
		if strings.HasPrefix(hdr.Name, "blobs/sha256/") && hdr.Size > 1 {
			// The last 512-byte block before the content is the entry's own ustar header.
			return start + int(hdr.Size/2), start - 512 + 10
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			t.Fatal(err)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// Partial failure: what can be saved is saved and loaded, the failure is named.
func TestSaveKeepsWhatItCanAndNamesTheRest(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	good := pushMultiArch(t, src, "address-controller")
	missing := src + "/cozystack/metallb-iad:v1@sha256:" + strings.Repeat("0", 64)
	archive := filepath.Join(t.TempDir(), "images.tar")
	res, err := Save(ctx, map[string]string{"address-controller": good, "metallb-iad": missing}, archive, Options{})
	if err == nil || !strings.Contains(err.Error(), "metallb-iad") || !strings.Contains(err.Error(), "HTTP 404") || len(res) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	loaded, err := Load(ctx, archive, Options{Dest: newRegistry(t, false) + "/airgap"})
	if err != nil || len(loaded) != 1 || loaded[0].Component != "address-controller" {
		t.Fatalf("%+v, %v", loaded, err)
	}
}

// flaky answers 503 to the first n requests for manifests, then serves normally.
func flaky(t *testing.T, n int32) (string, *atomic.Int32) {
	var failures atomic.Int32
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") && failures.Load() < n {
			failures.Add(1)
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &failures
}

func TestRetriesAndErrorsNameRegistryAndStatus(t *testing.T) {
	ctx := context.Background()
	src := newRegistry(t, false)
	ref := pushMultiArch(t, src, "address-controller")
	images := map[string]string{"address-controller": ref}

	// Two 503s: --retries 0 fails naming the registry and the status; --retries 3 gets through.
	host, _ := flaky(t, 1000)
	_, err := Mirror(ctx, images, Options{Dest: host + "/m", NoReferrers: true, Access: Access{Retries: 0}})
	if err == nil || !strings.Contains(err.Error(), "registry "+host+" answered HTTP 503") {
		t.Fatalf("want the registry and HTTP 503 named: %v", err)
	}
	host, failures := flaky(t, 2)
	if _, err := Mirror(ctx, images, Options{Dest: host + "/m", NoReferrers: true, Access: Access{Retries: 3, RetryDelay: 10e6}}); err != nil {
		t.Fatalf("with retries: %v", err)
	}
	if failures.Load() != 2 {
		t.Fatalf("%d failures served", failures.Load())
	}

	// 401 and 403 from a registry that wants credentials.
	for _, tc := range []struct {
		status int
		want   string
	}{{http.StatusUnauthorized, "HTTP 401 Unauthorized: credentials missing or wrong"}, {http.StatusForbidden, "HTTP 403 Forbidden"}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			}
			w.WriteHeader(tc.status)
		}))
		defer srv.Close()
		h := strings.TrimPrefix(srv.URL, "http://")
		_, err := Mirror(ctx, images, Options{Dest: h + "/m", Access: Access{Creds: nil}})
		var none *os.PathError
		if err == nil || !strings.Contains(err.Error(), "registry "+h) || !strings.Contains(err.Error(), tc.want) || errors.As(err, &none) {
			t.Fatalf("status %d: %v", tc.status, err)
		}
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pushSingle pushes a single-platform image (no index) as cozystack/metallb-iad:v1 to the
// registry at src and returns its reference by tag and digest.
func pushSingle(t *testing.T, src string) string {
	t.Helper()
	single, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(src + "/cozystack/metallb-iad:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, single); err != nil {
		t.Fatal(err)
	}
	sd, err := single.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return tag.String() + "@" + sd.String()
}
