package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cozystack/reserved-ips/tools/mirror/mirrortest"
)

// capture runs f with stdout and stderr redirected, and returns what each received.
func capture(t *testing.T, f func() int) (int, string, string) {
	t.Helper()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outW, errW
	outC, errC := make(chan string), make(chan string)
	go func() { b, _ := io.ReadAll(outR); outC <- string(b) }()
	go func() { b, _ := io.ReadAll(errR); errC <- string(b) }()
	code := f()
	os.Stdout, os.Stderr = stdout, stderr
	outW.Close()
	errW.Close()
	return code, <-outC, <-errC
}

func registryHost(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Partial failure: the image that could be copied is reported and its Package values printed,
// the failure is listed with its registry and status, and the exit status is 1.
func TestCopyPartialFailure(t *testing.T) {
	src, dst := registryHost(t), registryHost(t)
	img, _ := random.Image(256, 1)
	tag, _ := name.NewTag(src + "/cozystack/address-controller:v1")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	good := tag.String() + "@" + d.String()
	missing := src + "/cozystack/metallb-iad:v1@sha256:" + strings.Repeat("0", 64)
	code, stdout, stderr := capture(t, func() int {
		return run("copy", []string{"-to", dst + "/mirror", "-retries", "0", "address-controller=" + good, "metallb-iad=" + missing})
	})
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "name: cozystack.address-controller") || !strings.Contains(stdout, "image: "+dst+"/mirror/address-controller:v1@"+d.String()) ||
		strings.Contains(stdout, "cozystack.metallb-iad") {
		t.Fatalf("stdout should hold the values of the copied image only:\n%s", stdout)
	}
	if !strings.Contains(stderr, "not copied:") || !strings.Contains(stderr, "metallb-iad") || !strings.Contains(stderr, "answered HTTP 404") {
		t.Fatalf("stderr should list the failure with the registry and status:\n%s", stderr)
	}
}

// -creds as the command line gives it, against the real registry with TLS and basic auth: with
// and without HOST=, a password holding '=' (base64 tokens end so), credentials for another
// host, a wrong password, and malformed values.
func TestCredsFlag(t *testing.T) {
	reg := mirrortest.Start(t, "127.0.0.1", true)
	src := registryHost(t)
	img, _ := random.Image(256, 1)
	tag, _ := name.NewTag(src + "/cozystack/address-controller:v1")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	ref := "address-controller=" + tag.String() + "@" + d.String()
	to := reg.Addr + "/cozystack"
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		wants string
	}{
		{"USER:PASSWORD for the -to registry", []string{"copy", "-to", to, "-creds", mirrortest.User + ":" + mirrortest.Password}, 0, ""},
		{"HOST=USER:PASSWORD", []string{"copy", "-to", to, "-creds", reg.Addr + "=" + mirrortest.User + ":" + mirrortest.Password}, 0, ""},
		{"password with '=', no HOST=", []string{"copy", "-to", to, "-creds", mirrortest.TokenUser + ":" + mirrortest.TokenPassword}, 0, ""},
		{"password with '=', HOST=", []string{"copy", "-to", to, "-creds", reg.Addr + "=" + mirrortest.TokenUser + ":" + mirrortest.TokenPassword}, 0, ""},
		{"credentials for another host", []string{"copy", "-to", to, "-creds", "other.example:5000=" + mirrortest.User + ":" + mirrortest.Password}, 1,
			"registry " + reg.Addr + " answered HTTP 401 Unauthorized"},
		{"wrong password", []string{"copy", "-to", to, "-creds", mirrortest.User + ":nope"}, 1, "registry " + reg.Addr + " answered HTTP 401 Unauthorized"},
		{"no password", []string{"copy", "-to", to, "-creds", reg.Addr + "=" + mirrortest.User}, 1, "a -creds value is not USER:PASSWORD"},
		{"no HOST= and no -to", []string{"save", "-archive", filepath.Join(t.TempDir(), "a.tar"), "-creds", mirrortest.User + ":" + mirrortest.Password}, 1,
			"-creds USER:PASSWORD without HOST= needs -to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.args[1:]...), "-ca-file", reg.CAFile, "-retries", "0", ref)
			code, _, stderr := capture(t, func() int { return run(tc.args[0], args) })
			if code != tc.code || !strings.Contains(stderr, tc.wants) {
				t.Fatalf("exit status %d, want %d; stderr should say %q:\n%s", code, tc.code, tc.wants, stderr)
			}
		})
	}
}

func TestCutHost(t *testing.T) {
	for _, tc := range []struct{ in, host, userpass string }{
		{"mirror.example:5000=u:p", "mirror.example:5000", "u:p"},
		{"mirror.example=u:p=x", "mirror.example", "u:p=x"},
		{"u:p", "", "u:p"},
		{"u:dG9rZW4==", "", "u:dG9rZW4=="},
		{"u:a=b", "", "u:a=b"},
		{"=u:p", "", "=u:p"},
		{"u:1234=x", "u:1234", "x"}, // reads as HOST:PORT=...: such a password needs HOST=
		{"[::1]=u:p", "[::1]", "u:p"},
		{"[::1]:5000=u:p", "[::1]:5000", "u:p"},
		{"[::1]x=u:p", "", "[::1]x=u:p"},
		{"[::1]:=u:p", "", "[::1]:=u:p"},
	} {
		host, userpass, _ := cutHost(tc.in)
		if host != tc.host || userpass != tc.userpass {
			t.Errorf("cutHost(%q) = %q, %q; want %q, %q", tc.in, host, userpass, tc.host, tc.userpass)
		}
	}
}
