package mirror

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/mirror/mirrortest"
)

// realRegistry is the distribution registry on loopback (mirrortest.Start).
type realRegistry = mirrortest.Registry

const (
	regUser = mirrortest.User
	regPass = mirrortest.Password
)

func startRegistry(t *testing.T, hostname string, secure bool) realRegistry {
	return mirrortest.Start(t, hostname, secure)
}

// remoteFor returns registry options for checking a real registry from the test.
func remoteFor(t *testing.T, a Access, host string) []remote.Option {
	t.Helper()
	s, err := newSession(a)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := name.NewRegistry(host)
	return s.remote(context.Background(), reg)
}

func TestRealRegistryTLSAndBasicAuth(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "registry.test", true)
	resolve := map[string]string{reg.Host: reg.Addr}
	src := newRegistry(t, false)
	images := map[string]string{
		"address-controller": pushMultiArch(t, src, "address-controller"),
		"metallb-iad":        pushMultiArch(t, src, "metallb-iad"),
	}
	want := attach(t, images["metallb-iad"])
	dest := reg.Host + "/cozystack"
	creds := map[string]authn.AuthConfig{reg.Host: {Username: regUser, Password: regPass}}

	for _, tc := range []struct {
		name   string
		access Access
		want   string
	}{
		{"untrusted certificate", Access{Resolve: resolve, Creds: creds}, "registry " + reg.Host + ": its TLS certificate is not trusted: pass --ca-file"},
		{"no credentials", Access{Resolve: resolve, CAFile: reg.CAFile}, "registry " + reg.Host + " answered HTTP 401 Unauthorized: credentials missing or wrong"},
		{"wrong password", Access{Resolve: resolve, CAFile: reg.CAFile, Creds: map[string]authn.AuthConfig{reg.Host: {Username: regUser, Password: "nope"}}},
			"registry " + reg.Host + " answered HTTP 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Mirror(ctx, images, Options{Dest: dest, Access: tc.access})
			if err == nil || len(res) != 0 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%+v, %v; want an error saying %q", res, err, tc.want)
			}
		})
	}

	// --insecure skips verification (credentials still needed); with the CA and credentials it
	// copies, attachments included, and verifies.
	res, err := Mirror(ctx, map[string]string{"address-controller": images["address-controller"]},
		Options{Dest: dest, Access: Access{Resolve: resolve, Insecure: []string{reg.Host}, Creds: creds}})
	if err != nil || len(res) != 1 || !res[0].Copied {
		t.Fatalf("--insecure: %+v, %v", res, err)
	}
	good := Access{Resolve: resolve, CAFile: reg.CAFile, Creds: creds}
	res, err = Mirror(ctx, images, Options{Dest: dest, Access: good})
	if err != nil || len(res) != 2 || res[0].Copied || !res[1].Copied || len(res[1].Attachments) != 4 {
		t.Fatalf("with the CA and credentials: %+v, %v", res, err)
	}
	checkAttachments(t, res[1].Dest, want, remoteFor(t, good, reg.Host)...)

	// The same credentials from a Docker/Podman auth file.
	authFile := filepath.Join(t.TempDir(), "auth.json")
	_ = os.WriteFile(authFile, []byte(`{"auths":{"`+reg.Host+`":{"auth":"`+base64.StdEncoding.EncodeToString([]byte(regUser+":"+regPass))+`"}}}`), 0o600)
	res, err = Mirror(ctx, images, Options{Dest: dest, KeepPath: true, Access: Access{Resolve: resolve, CAFile: reg.CAFile, AuthFile: authFile}})
	if err != nil || len(res) != 2 || !strings.HasPrefix(res[0].Dest, dest+"/cozystack/address-controller:v1@") {
		t.Fatalf("--authfile and --keep-path: %+v, %v", res, err)
	}

	// 404 from the real registry names it; the other image is still copied.
	missing := reg.Host + "/cozystack/metallb-iad:v1@sha256:" + strings.Repeat("0", 64)
	res, err = Mirror(ctx, map[string]string{"metallb-iad": missing, "address-controller": images["address-controller"]},
		Options{Dest: reg.Host + "/other", Access: good})
	if err == nil || !strings.Contains(err.Error(), "registry "+reg.Host+" answered HTTP 404 Not Found") || len(res) != 1 {
		t.Fatalf("404: %+v, %v", res, err)
	}

	// Save from the real registry, load into it under another prefix: same digests, attachments too.
	archive := filepath.Join(t.TempDir(), "images.tar")
	mirrored := map[string]string{"metallb-iad": strings.Replace(images["metallb-iad"], src+"/cozystack", dest, 1)}
	if _, err := Save(ctx, mirrored, archive, Options{Access: good}); err != nil {
		t.Fatal(err)
	}
	res, err = Load(ctx, archive, Options{Dest: reg.Host + "/airgap", Access: good})
	if err != nil || len(res) != 1 || !res[0].Copied || digestOf(res[0].Dest) != digestOf(images["metallb-iad"]) {
		t.Fatalf("load: %+v, %v", res, err)
	}
	checkAttachments(t, res[0].Dest, want, remoteFor(t, good, reg.Host)...)
}

func TestRealRegistryPlainHTTP(t *testing.T) {
	ctx := context.Background()
	reg := startRegistry(t, "plain.test", false)
	resolve := map[string]string{reg.Host: reg.Addr}
	src := newRegistry(t, false)
	images := map[string]string{"metallb-iad": pushMultiArch(t, src, "metallb-iad")}
	want := attach(t, images["metallb-iad"])

	_, err := Mirror(ctx, images, Options{Dest: reg.Host + "/cozystack", Access: Access{Resolve: resolve}})
	if err == nil || !strings.Contains(err.Error(), "registry "+reg.Host+" speaks plain HTTP: pass --plain-http "+reg.Host) {
		t.Fatalf("without --plain-http: %v", err)
	}
	access := Access{Resolve: resolve, PlainHTTP: []string{reg.Host}}
	res, err := Mirror(ctx, images, Options{Dest: reg.Host + "/cozystack", Access: access})
	if err != nil || len(res) != 1 || !res[0].Copied || len(res[0].Attachments) != 4 {
		t.Fatalf("%+v, %v", res, err)
	}
	s, _ := newSession(access)
	d, err := s.parseDigest(res[0].Dest)
	if err != nil {
		t.Fatal(err)
	}
	checkAttachments(t, d.String(), want, remoteFor(t, access, reg.Host)...)

	// Save and load through the plain registry.
	archive := filepath.Join(t.TempDir(), "images.tar")
	if _, err := Save(ctx, map[string]string{"metallb-iad": res[0].Dest}, archive, Options{Access: access}); err != nil {
		t.Fatal(err)
	}
	res, err = Load(ctx, archive, Options{Dest: reg.Host + "/airgap", Access: access})
	if err != nil || len(res) != 1 || !res[0].Copied || len(res[0].Attachments) != 4 {
		t.Fatalf("load: %+v, %v", res, err)
	}
}
