// Package mirrortest runs the CNCF distribution registry from the binary cache on loopback, and
// a fault-injecting proxy in front of it, for the mirror tool's tests.
package mirrortest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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

	"golang.org/x/crypto/bcrypt"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

// Registry is the CNCF distribution registry (built into the binary cache) running on
// loopback, reached under a name (Resolve) so that nothing treats it as a local registry.
type Registry struct {
	Host   string // name:port
	Addr   string // 127.0.0.1:port
	CAFile string
}

// The accounts of a registry with auth: User with Password, and TokenUser with TokenPassword,
// a password that holds '=' as base64 tokens do.
const (
	User          = "mirror"
	Password      = "s3cret-pass"
	TokenUser     = "robot"
	TokenPassword = "dG9rZW4=="
)

// Start runs the registry on loopback: with TLS and htpasswd basic auth when secure,
// else plain HTTP without auth. It is stopped when the test ends.
func Start(t testing.TB, hostname string, secure bool) Registry {
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
	r := Registry{Host: hostname + ":" + port, Addr: addr}
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
		var lines strings.Builder
		for _, u := range [][2]string{{User, Password}, {TokenUser, TokenPassword}} {
			hash, err := bcrypt.GenerateFromPassword([]byte(u[1]), bcrypt.MinCost)
			if err != nil {
				t.Fatal(err)
			}
			lines.WriteString(u[0] + ":" + string(hash) + "\n")
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(lines.String()), 0o600); err != nil {
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
func writeTLS(t testing.TB, dir, hostname, caFile string) (certFile, keyFile string) {
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

func tlsSkip() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // readiness probe only
