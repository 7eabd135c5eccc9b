package main

import (
	"context"
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

// mirrorRun runs the command line args with the given standard input and environment, and
// returns the exit status and what went to stdout and stderr.
func mirrorRun(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, streams{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
		getenv: func(k string) string { return env[k] }})
	return code, stdout.String(), stderr.String()
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
	code, stdout, stderr := mirrorRun(t, "", nil, "copy", "--to", dst+"/mirror", "--retries", "0", "address-controller="+good, "metallb-iad="+missing)
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "name: reserved-ips.address-controller") || !strings.Contains(stdout, "image: "+dst+"/mirror/address-controller:v1@"+d.String()) ||
		strings.Contains(stdout, "metallb-iad") {
		t.Fatalf("stdout should hold the values of the copied image only:\n%s", stdout)
	}
	if !strings.Contains(stderr, "not copied:") || !strings.Contains(stderr, "metallb-iad") || !strings.Contains(stderr, "answered HTTP 404") {
		t.Fatalf("stderr should list the failure with the registry and status:\n%s", stderr)
	}
	// For Cozystack's own packages, the same values under their names.
	code, stdout, stderr = mirrorRun(t, "", nil, "copy", "address-controller="+good, "--to", dst+"/mirror", "--package-prefix", "cozystack")
	if code != 0 || !strings.Contains(stdout, "name: cozystack.address-controller") || strings.Contains(stdout, "reserved-ips.") {
		t.Fatalf("--package-prefix cozystack: exit status %d, want 0 and Package cozystack.address-controller:\n%s%s", code, stdout, stderr)
	}
}

// Credentials from MIRROR_CREDS and from standard input (--creds-stdin), against the real
// registry with TLS and basic auth: with and without HOST=, a password holding '=' (base64
// tokens end so), credentials for another host, a wrong password, malformed values, and
// several credentials a line each.
func TestCredentials(t *testing.T) {
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
		creds string
		args  []string
		code  int
		wants string
	}{
		{"USER:PASSWORD for the --to registry", mirrortest.User + ":" + mirrortest.Password, []string{"copy", "--to", to}, 0, ""},
		{"HOST=USER:PASSWORD", reg.Addr + "=" + mirrortest.User + ":" + mirrortest.Password, []string{"copy", "--to", to}, 0, ""},
		{"password with '=', no HOST=", mirrortest.TokenUser + ":" + mirrortest.TokenPassword, []string{"copy", "--to", to}, 0, ""},
		{"password with '=', HOST=", reg.Addr + "=" + mirrortest.TokenUser + ":" + mirrortest.TokenPassword, []string{"copy", "--to", to}, 0, ""},
		{"one a line", "other.example:5000=a:b\n\n" + reg.Addr + "=" + mirrortest.User + ":" + mirrortest.Password + "\n", []string{"copy", "--to", to}, 0, ""},
		{"credentials for another host", "other.example:5000=" + mirrortest.User + ":" + mirrortest.Password, []string{"copy", "--to", to}, 1,
			"registry " + reg.Addr + " answered HTTP 401 Unauthorized"},
		{"wrong password", mirrortest.User + ":nope", []string{"copy", "--to", to}, 1, "registry " + reg.Addr + " answered HTTP 401 Unauthorized"},
		{"no password", reg.Addr + "=" + mirrortest.User, []string{"copy", "--to", to}, 1, "a credential is not [HOST=]USER:PASSWORD"},
		{"no HOST= and no --to", mirrortest.User + ":" + mirrortest.Password, []string{"save", "--archive", filepath.Join(t.TempDir(), "a.tar")}, 1,
			"credentials USER:PASSWORD without HOST= are for the --to registry"},
	} {
		args := append(append([]string{}, tc.args...), "--ca-file", reg.CAFile, "--retries", "0", ref)
		t.Run(tc.name+", "+CredsEnv, func(t *testing.T) {
			code, _, stderr := mirrorRun(t, "", map[string]string{CredsEnv: tc.creds}, args...)
			if code != tc.code || !strings.Contains(stderr, tc.wants) {
				t.Fatalf("exit status %d, want %d; stderr should say %q:\n%s", code, tc.code, tc.wants, stderr)
			}
		})
		t.Run(tc.name+", --creds-stdin", func(t *testing.T) {
			code, _, stderr := mirrorRun(t, tc.creds+"\n", nil, append(args, "--creds-stdin")...)
			if code != tc.code || !strings.Contains(stderr, tc.wants) {
				t.Fatalf("exit status %d, want %d; stderr should say %q:\n%s", code, tc.code, tc.wants, stderr)
			}
		})
	}
	// Without --creds-stdin, standard input is not read: the registry refuses the copy.
	if code, _, stderr := mirrorRun(t, mirrortest.User+":"+mirrortest.Password+"\n", nil, "copy", "--to", to, "--ca-file", reg.CAFile, "--retries", "0", ref); code != 1 ||
		!strings.Contains(stderr, "401 Unauthorized") {
		t.Fatalf("credentials on stdin were read without --creds-stdin: exit status %d\n%s", code, stderr)
	}
}

// The password is never taken on the command line: -creds and --creds are refused with the way
// to pass it now, and the command does nothing.
func TestCredsFlagIsRefusedWithItsMigration(t *testing.T) {
	dst := registryHost(t)
	for _, args := range [][]string{
		{"copy", "--to", dst + "/m", "-creds", "u:p", "a=" + dst + "/x@sha256:" + strings.Repeat("0", 64)},
		{"copy", "--to", dst + "/m", "--creds", "u:p"},
		{"load", "--archive", "a.tar", "--to", dst + "/m", "--creds=u:p"},
		{"platforms", "--creds", "u:p", dst + "/x@sha256:" + strings.Repeat("0", 64)},
	} {
		code, stdout, stderr := mirrorRun(t, "", nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "the -creds flag is gone") || !strings.Contains(stderr, CredsEnv) ||
			!strings.Contains(stderr, "--creds-stdin") {
			t.Errorf("%q: exit status %d, want 2 with the migration:\n%s%s", args, code, stdout, stderr)
		}
	}
}

// Flags go before or after the arguments: a copy with every flag after its image reference
// copies to the --to registry with the asked options, as the same copy with the flags first.
func TestFlagsAfterArguments(t *testing.T) {
	src, dst := registryHost(t), registryHost(t)
	img, _ := random.Image(256, 1)
	tag, _ := name.NewTag(src + "/cozystack/address-controller:v1")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	ref := "address-controller=" + tag.String() + "@" + d.String()
	code, stdout, stderr := mirrorRun(t, "", nil, "copy", ref, "--to", dst+"/after", "--keep-path", "--retries", "0")
	if code != 0 {
		t.Fatalf("exit status %d\n%s", code, stderr)
	}
	want := "image: " + dst + "/after/cozystack/address-controller:v1@" + d.String()
	if !strings.Contains(stdout, want) {
		t.Fatalf("flags after the argument were not applied: stdout lacks %q:\n%s", want, stdout)
	}
	if _, err := remote.Head(mustDigest(t, dst+"/after/cozystack/address-controller@"+d.String())); err != nil {
		t.Fatalf("the copy is not where --to and --keep-path say: %v", err)
	}
	// --dry-run after the argument copies nothing.
	code, stdout, stderr = mirrorRun(t, "", nil, "copy", ref, "--to", dst+"/dry", "--dry-run")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "would copy (dry run)") {
		t.Fatalf("--dry-run after the argument: exit status %d\n%s%s", code, stdout, stderr)
	}
	if _, err := remote.Head(mustDigest(t, dst+"/dry/address-controller@"+d.String())); err == nil {
		t.Fatal("--dry-run after the argument copied the image")
	}
}

// Each command takes its own flags only: a flag of another command is refused with a usage
// error (exit status 2) before anything runs, as are a missing required flag, an unknown
// command, and a single-dash long flag (with the two-dash spelling to use).
func TestEachCommandTakesItsOwnFlags(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "a.tar")
	for _, tc := range []struct {
		args  []string
		wants string
	}{
		{[]string{"save", "--archive", archive, "--to", "mirror.example/x"}, "unknown flag: --to"},
		{[]string{"save", "--archive", archive, "--keep-path"}, "unknown flag: --keep-path"},
		{[]string{"copy", "--to", "mirror.example/x", "--archive", archive}, "unknown flag: --archive"},
		{[]string{"load", "--archive", archive, "--to", "mirror.example/x", "--no-charts"}, "unknown flag: --no-charts"},
		{[]string{"platforms", "--to", "mirror.example/x", "r@sha256:" + strings.Repeat("0", 64)}, "unknown flag: --to"},
		{[]string{"load", "--archive", archive, "--to", "mirror.example/x", "extra"}, `unknown command "extra"`},
		{[]string{"copy", "a=b"}, "copy needs --to"},
		{[]string{"load", "--archive", archive}, "load needs --archive and --to"},
		{[]string{"copy", "--to", "mirror.example/x", "--package-prefix", "cozystack.", "a=b"}, `--package-prefix: package prefix "cozystack.": want reserved-ips or cozystack`},
		{[]string{"save", "--archive", archive, "--package-prefix", "cozystack"}, "unknown flag: --package-prefix"},
		{[]string{"platforms"}, "requires at least 1 arg"},
		{[]string{"push"}, `unknown command "push"`},
		{[]string{"copy", "-to", "mirror.example/x", "a=b"}, "long flags take two dashes: --to"},
		{[]string{"copy", "-to=mirror.example/x", "a=b"}, "long flags take two dashes: --to"},
		{[]string{"save", "-archive", archive}, "long flags take two dashes: --archive"},
		{[]string{"-help"}, "long flags take two dashes: --help"},
		{[]string{"copy", "-help"}, "long flags take two dashes: --help"},
		{[]string{"load", "-keep-path"}, "long flags take two dashes: --keep-path"},
	} {
		code, stdout, stderr := mirrorRun(t, "", nil, tc.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.wants) {
			t.Errorf("%q: exit status %d, want 2 saying %q:\n%s%s", tc.args, code, tc.wants, stdout, stderr)
		}
	}
	if _, err := os.Stat(archive); err == nil {
		t.Error("a refused save wrote its archive")
	}
}

func mustDigest(t *testing.T, ref string) name.Digest {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	return d
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
