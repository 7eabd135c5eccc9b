package mirror

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Access says how to reach registries as they are in the field. Hosts are "host[:port]" as in
// image references.
type Access struct {
	// Insecure hosts are reached over TLS without verifying their certificate.
	Insecure []string
	// PlainHTTP hosts are reached over plain HTTP.
	PlainHTTP []string
	// CAFile is a PEM bundle trusted in addition to the system's roots.
	CAFile string
	// AuthFile is a Docker or Podman auth file ({"auths": {host: {"auth": base64(user:pass)}}}).
	AuthFile string
	// Creds are credentials per host; they win over AuthFile, which wins over the Docker config.
	Creds map[string]authn.AuthConfig
	// Retries is how often a request that failed with a temporary error or a 408, 429 or 5xx
	// is tried again, with exponential backoff from RetryDelay (1s when zero).
	Retries    int
	RetryDelay time.Duration
	// Resolve dials "host:port" at another address (like curl --resolve); tests use it to give
	// a loopback registry a name.
	Resolve map[string]string
}

// session holds one transport per registry host.
type session struct {
	access     Access
	roots      *x509.CertPool
	auths      map[string]authn.AuthConfig
	mu         sync.Mutex
	transports map[string]http.RoundTripper
}

func newSession(a Access) (*session, error) {
	s := &session{access: a, transports: map[string]http.RoundTripper{}, auths: map[string]authn.AuthConfig{}}
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --ca-file: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil || roots == nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", a.CAFile)
		}
		s.roots = roots
	}
	if a.AuthFile != "" {
		auths, err := readAuthFile(a.AuthFile)
		if err != nil {
			return nil, err
		}
		s.auths = auths
	}
	return s, nil
}

// readAuthFile reads a Docker config.json or a Podman/containers auth.json.
func readAuthFile(path string) (map[string]authn.AuthConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --authfile: %w", err)
	}
	var f struct {
		Auths map[string]struct {
			Auth          string `json:"auth"`
			Username      string `json:"username"`
			Password      string `json:"password"`
			IdentityToken string `json:"identitytoken"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("--authfile %s: %w", path, err)
	}
	out := map[string]authn.AuthConfig{}
	for host, e := range f.Auths {
		c := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("--authfile %s: the auth of %s is not base64: %w", path, host, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("--authfile %s: the auth of %s is not user:password", path, host)
			}
			c.Username, c.Password = user, pass
		}
		// Docker writes "https://index.docker.io/v1/" and sometimes a scheme on other hosts.
		host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://"), "/")
		out[host] = c
	}
	return out, nil
}

func (s *session) hostIn(list []string, host string) bool {
	for _, h := range list {
		if h == host {
			return true
		}
	}
	return false
}

// Resolve implements authn.Keychain: Creds, then AuthFile, then the Docker config.
func (s *session) Resolve(r authn.Resource) (authn.Authenticator, error) {
	host := r.RegistryStr()
	if c, ok := s.access.Creds[host]; ok {
		return authn.FromConfig(c), nil
	}
	if c, ok := s.auths[host]; ok {
		return authn.FromConfig(c), nil
	}
	return authn.DefaultKeychain.Resolve(r)
}

func (s *session) transport(host string) http.RoundTripper {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.transports[host]; ok {
		return t
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.roots}
	if s.hostIn(s.access.Insecure, host) {
		tc.InsecureSkipVerify = true //nolint:gosec // the admin asked for it for this one registry
	}
	t.TLSClientConfig = tc
	if len(s.access.Resolve) > 0 {
		dialer := &net.Dialer{Timeout: 30 * time.Second}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if to, ok := s.access.Resolve[addr]; ok {
				addr = to
			}
			return dialer.DialContext(ctx, network, addr)
		}
	}
	s.transports[host] = t
	return t
}

// remote returns the options for talking to the registry of ref.
func (s *session) remote(ctx context.Context, reg name.Registry) []remote.Option {
	delay := s.access.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(s),
		remote.WithTransport(s.transport(reg.RegistryStr())),
		remote.WithRetryBackoff(remote.Backoff{Duration: delay, Factor: 2, Jitter: 0.1, Steps: s.access.Retries + 1}),
		remote.WithRetryStatusCodes(http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout),
	}
}

// nameOptions are the reference parsing options for host: plain HTTP when asked for.
func (s *session) nameOptions(host string) []name.Option {
	if s.hostIn(s.access.PlainHTTP, host) {
		return []name.Option{name.Insecure}
	}
	return nil
}

// parseDigest parses a digest reference with the access options of its registry.
func (s *session) parseDigest(ref string) (name.Digest, error) {
	d, err := name.NewDigest(ref)
	if err != nil {
		return name.Digest{}, err
	}
	return name.NewDigest(ref, s.nameOptions(d.RegistryStr())...)
}

// parseTag parses a tag reference with the access options of its registry.
func (s *session) parseTag(ref string) (name.Tag, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, err
	}
	return name.NewTag(ref, s.nameOptions(t.RegistryStr())...)
}

func (s *session) parseRepo(repo string) (name.Repository, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return name.Repository{}, err
	}
	return name.NewRepository(repo, s.nameOptions(r.RegistryStr())...)
}

// scheme is the scheme references to host use: https unless --plain-http or a local address.
func (s *session) scheme(host string) string {
	r, err := name.NewRegistry(host, s.nameOptions(host)...)
	if err != nil {
		return "https"
	}
	return r.Scheme()
}

// explain turns a registry error into one that names the registry and the HTTP status, with
// what to do about it.
func (s *session) explain(host string, err error) error {
	if err == nil {
		return nil
	}
	var te *transport.Error
	if errors.As(err, &te) {
		if te.Request != nil && te.Request.URL != nil {
			host = te.Request.URL.Host
		}
		hint := ""
		switch {
		case te.StatusCode == http.StatusUnauthorized:
			hint = "credentials missing or wrong: give credentials in MIRROR_CREDS or with --creds-stdin, or --authfile, or log in with docker/podman"
		case te.StatusCode == http.StatusForbidden:
			hint = "the credentials are not allowed this: check their scope on the registry"
		case te.StatusCode == http.StatusNotFound:
			hint = "not found: check the repository and digest"
		case te.StatusCode >= 500:
			hint = fmt.Sprintf("server error (tried %d times; --retries raises that)", s.access.Retries+1)
		}
		msg := fmt.Sprintf("registry %s answered HTTP %d %s", host, te.StatusCode, http.StatusText(te.StatusCode))
		if hint != "" {
			msg += ": " + hint
		}
		return fmt.Errorf("%s (%w)", msg, err)
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &hostname), strings.Contains(err.Error(), "x509:"):
		return fmt.Errorf("registry %s: its TLS certificate is not trusted: pass --ca-file with its CA, or --insecure %s to skip verification (%w)", host, host, err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") && s.scheme(host) == "https":
		return fmt.Errorf("registry %s speaks plain HTTP: pass --plain-http %s (%w)", host, host, err)
	case strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host"):
		return fmt.Errorf("registry %s cannot be reached (%w)", host, err)
	}
	return fmt.Errorf("registry %s: %w", host, err)
}
