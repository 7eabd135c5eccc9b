package mirror

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/mirror/mirrortest"
)

// The real registry behind a proxy that injects 403 and 503 answers: copy, save and load name
// the registry and the status, retry 5xx as asked, and a single-platform image and --no-referrers
// behave against a real registry as they do against the in-process one.
func TestRealRegistryThroughFaultyProxy(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "127.0.0.1", false)
	proxy := mirrortest.StartProxy(t, "http://"+reg.Addr)
	host := proxy.Host
	src := newRegistry(t, false)
	multi := pushMultiArch(t, src, "address-controller")
	wantMulti := attach(t, multi)
	singleRef := pushSingle(t, src)
	wantSingle := attach(t, singleRef)
	fast := func(retries int) Options {
		return Options{Access: Access{Retries: retries, RetryDelay: 10 * time.Millisecond}}
	}
	with := func(o Options, dest string) Options { o.Dest = dest; return o }

	t.Run("403 names the registry and the status", func(t *testing.T) {
		defer proxy.Reset()
		proxy.Fail("", "/v2/denied/", http.StatusForbidden, -1)
		res, err := Mirror(ctx, map[string]string{"address-controller": multi}, with(fast(3), host+"/denied"))
		want := "registry " + host + " answered HTTP 403 Forbidden: the credentials are not allowed this"
		if err == nil || !strings.Contains(err.Error(), want) || len(res) != 0 {
			t.Fatalf("%+v, %v; want an error saying %q", res, err, want)
		}
		if proxy.Injected() == 0 {
			t.Fatal("the proxy injected nothing; the test proves nothing")
		}
	})

	t.Run("503 twice, then served: --retries 3 gets through", func(t *testing.T) {
		defer proxy.Reset()
		proxy.Fail("", "/v2/retried/address-controller/manifests/", http.StatusServiceUnavailable, 2)
		res, err := Mirror(ctx, map[string]string{"address-controller": multi}, with(fast(3), host+"/retried"))
		if err != nil || len(res) != 1 || !res[0].Copied {
			t.Fatalf("%+v, %v", res, err)
		}
		if proxy.Injected() != 2 {
			t.Fatalf("the proxy answered 503 %d times, want 2", proxy.Injected())
		}
		checkAttachments(t, res[0].Dest, wantMulti)
	})

	t.Run("503 with --retries 0 fails naming the registry and the status", func(t *testing.T) {
		defer proxy.Reset()
		proxy.Fail("", "/v2/unretried/", http.StatusServiceUnavailable, -1)
		_, err := Mirror(ctx, map[string]string{"address-controller": multi}, with(fast(0), host+"/unretried"))
		want := "registry " + host + " answered HTTP 503 Service Unavailable: server error (tried 1 times"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v; want an error saying %q", err, want)
		}
		if proxy.Injected() != 1 {
			t.Fatalf("the proxy answered 503 %d times, want 1 (no retry)", proxy.Injected())
		}
	})

	t.Run("--no-referrers copies no attachment", func(t *testing.T) {
		o := with(fast(0), host+"/bare")
		o.NoReferrers = true
		res, err := Mirror(ctx, map[string]string{"address-controller": multi}, o)
		if err != nil || len(res) != 1 || len(res[0].Attachments) != 0 {
			t.Fatalf("%+v, %v", res, err)
		}
		d, _ := name.NewDigest(res[0].Dest)
		if _, err := remote.Head(d); err != nil {
			t.Fatalf("the image is not in the registry: %v", err)
		}
		for _, h := range wantMulti {
			if _, err := remote.Head(d.Context().Digest(h.String())); err == nil {
				t.Errorf("--no-referrers copied attachment %s", h)
			}
		}
		for _, suffix := range []string{"sig", "att"} {
			if _, err := remote.Head(d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + "." + suffix)); err == nil {
				t.Errorf("--no-referrers copied the .%s tag", suffix)
			}
		}
		refs, err := remote.Referrers(d)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := refs.IndexManifest(); len(m.Manifests) != 0 {
			t.Errorf("--no-referrers copied referrers: %+v", m.Manifests)
		}
	})

	t.Run("a single-platform image copies and round-trips through save and load", func(t *testing.T) {
		defer proxy.Reset()
		res, err := Mirror(ctx, map[string]string{"metallb-iad": singleRef}, with(fast(3), host+"/single"))
		if err != nil || len(res) != 1 || digestOf(res[0].Dest) != digestOf(singleRef) || len(res[0].Attachments) != len(wantSingle) {
			t.Fatalf("copy: %+v, %v", res, err)
		}
		checkAttachments(t, res[0].Dest, wantSingle)
		// Save reads the real registry through the proxy, which fails twice on the way.
		proxy.Fail(http.MethodGet, "/v2/single/metallb-iad/", http.StatusServiceUnavailable, 2)
		archive := filepath.Join(t.TempDir(), "images.tar")
		if _, err := Save(ctx, map[string]string{"metallb-iad": res[0].Dest}, archive, fast(3)); err != nil {
			t.Fatal(err)
		}
		if proxy.Injected() != 2 {
			t.Fatalf("the proxy answered 503 %d times, want 2", proxy.Injected())
		}
		proxy.Reset()
		loaded, err := Load(ctx, archive, with(fast(3), host+"/airgap"))
		if err != nil || len(loaded) != 1 || !loaded[0].Copied || digestOf(loaded[0].Dest) != digestOf(singleRef) {
			t.Fatalf("load: %+v, %v", loaded, err)
		}
		checkAttachments(t, loaded[0].Dest, wantSingle)

		// Load into a prefix the registry refuses: the registry and the status are named and
		// nothing is reported loaded.
		proxy.Fail("", "/v2/refused/", http.StatusForbidden, -1)
		loaded, err = Load(ctx, archive, with(fast(3), host+"/refused"))
		if err == nil || !strings.Contains(err.Error(), "registry "+host+" answered HTTP 403 Forbidden") || len(loaded) != 0 {
			t.Fatalf("load into a refusing registry: %+v, %v", loaded, err)
		}
		// Save from a registry that refuses: the same.
		proxy.Fail("", "/v2/single/", http.StatusForbidden, -1)
		saved, err := Save(ctx, map[string]string{"metallb-iad": res[0].Dest}, filepath.Join(t.TempDir(), "x.tar"), fast(3))
		if err == nil || !strings.Contains(err.Error(), "registry "+host+" answered HTTP 403 Forbidden") || len(saved) != 0 {
			t.Fatalf("save from a refusing registry: %+v, %v", saved, err)
		}
	})
}
