package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
