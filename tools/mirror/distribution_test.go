package mirror

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// realRegistry is the CNCF distribution registry (built into the binary cache) running on
// loopback, reached under a name (Resolve) so that nothing treats it as a local registry.
type realRegistry struct {
	Host   string // name:port
	Addr   string // 127.0.0.1:port
	CAFile string
}

const (
	regUser = "mirror"
	regPass = "s3cret-pass"
)

// startRegistry runs the registry on loopback: with TLS and htpasswd basic auth when secure,
// else plain HTTP without auth. It is stopped when the test ends.
func startRegistry(t *testing.T, hostname string, secure bool) realRegistry {
	t.Helper()
	bin, err := binaries.Distribution.Path("registry")
	if err != nil {
		t.Fatalf("the distribution registry is not built: run `make binaries` (or `go run ./tools/cmd/binaries build distribution`): %v", err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	r := realRegistry{Host: hostname + ":" + port, Addr: addr}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "data"), addr)
	if secure {
		r.CAFile = filepath.Join(dir, "ca.pem")
		cert, key := writeTLS(t, dir, hostname, r.CAFile)
		hash, err := bcrypt.GenerateFromPassword([]byte(regPass), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(regUser+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\nauth:\n  htpasswd:\n    realm: mirror-test\n    path: %s\n", cert, key, htpasswd)
	}
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		logFile.Close()
	})
	// Ready when it answers /v2/ (401 with auth, 200 without).
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsSkip()}}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("the registry exited:\n%s", log)
		default:
		}
		resp, err := client.Get(scheme + "://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry did not answer on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeTLS writes a CA and a server certificate for hostname (and 127.0.0.1) signed by it.
func writeTLS(t *testing.T, dir, hostname, caFile string) (certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mirror test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hostname},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{hostname},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
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
		{"untrusted certificate", Access{Resolve: resolve, Creds: creds}, "registry " + reg.Host + ": its TLS certificate is not trusted: pass -ca-file"},
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

	// -insecure skips verification (credentials still needed); with the CA and credentials it
	// copies, attachments included, and verifies.
	res, err := Mirror(ctx, map[string]string{"address-controller": images["address-controller"]},
		Options{Dest: dest, Access: Access{Resolve: resolve, Insecure: []string{reg.Host}, Creds: creds}})
	if err != nil || len(res) != 1 || !res[0].Copied {
		t.Fatalf("-insecure: %+v, %v", res, err)
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
		t.Fatalf("-authfile and -keep-path: %+v, %v", res, err)
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
	if err == nil || !strings.Contains(err.Error(), "registry "+reg.Host+" speaks plain HTTP: pass -plain-http "+reg.Host) {
		t.Fatalf("without -plain-http: %v", err)
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

func tlsSkip() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // readiness probe only
