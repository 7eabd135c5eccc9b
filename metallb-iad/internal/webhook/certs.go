package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Lifetimes of the webhook's authority and serving certificate, and how long before its end each
// is renewed. A renewed authority is trusted beside the previous one until that one ends, so that
// a replica still serving a certificate of the previous one keeps being trusted.
const (
	CALifetime    = 10 * 365 * 24 * time.Hour
	CARenewBefore = 365 * 24 * time.Hour
	CertLifetime  = 365 * 24 * time.Hour
	CertRenewAt   = 90 * 24 * time.Hour
)

// DefaultRecheck is how often the certificate keeper looks at the Secret and the configuration:
// two reads, and no write while both are as they should be.
const DefaultRecheck = 15 * time.Second

// MaxTrusted bounds how many authorities the configuration trusts at once (the current one and
// earlier ones a replica may still serve a certificate of, until they end).
const MaxTrusted = 4

// Keys of the Secret that holds the authority and the serving certificate (a kubernetes.io/tls
// Secret with the authority beside): ca.crt is every authority the webhook configuration trusts,
// the current one first.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
)

// Certs keeps the webhook's serving certificate: at start and every Recheck after, it reads the
// Secret (creating it, or renewing what is due, with an optimistic-concurrency precondition so
// that replicas never overwrite each other's), serves the certificate it holds, and makes every
// webhook of the configuration trust its authorities. A replica that loses a race reads the
// winner's Secret and serves that. Until it holds a certificate, the TLS handshake fails and the
// readiness check says why.
type Certs struct {
	// Client writes the Secret and the configuration; Reader reads them uncached.
	Client client.Client
	Reader client.Reader
	// Namespace and Secret name the Secret.
	Namespace, Secret string
	// Configuration is the MutatingWebhookConfiguration whose webhooks' caBundle this keeps.
	Configuration string
	// DNSNames and IPs are the names the serving certificate is for.
	DNSNames []string
	IPs      []net.IP
	// Recheck is how often the Secret and the configuration are looked at again (DefaultRecheck
	// when zero): a configuration made again without the caBundle, or a Secret deleted, is
	// repaired within it; a failed attempt is retried with backoff.
	Recheck time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	current  atomic.Pointer[tls.Certificate]
	injected atomic.Bool
}

// NeedLeaderElection is false: every replica serves the webhook.
func (c *Certs) NeedLeaderElection() bool { return false }

// GetCertificate is the TLS server's source of the serving certificate.
func (c *Certs) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := c.current.Load(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("the parking webhook has no serving certificate yet")
}

// Ready is the readiness check: ready once a certificate is served and the configuration trusts
// its authority, so that the apiserver's calls can succeed.
func (c *Certs) Ready() error {
	if c.current.Load() == nil {
		return fmt.Errorf("the parking webhook has no serving certificate yet (Secret %s/%s)", c.Namespace, c.Secret)
	}
	if !c.injected.Load() {
		return fmt.Errorf("MutatingWebhookConfiguration %s does not trust the parking webhook's authority yet", c.Configuration)
	}
	return nil
}

// Start keeps the certificate until ctx ends.
func (c *Certs) Start(ctx context.Context) error {
	recheck := c.Recheck
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 7, Cap: time.Minute}
	for {
		next := recheck
		if err := c.Ensure(ctx); err != nil {
			c.injected.Store(false)
			log.FromContext(ctx).Error(err, "keeping the parking webhook's certificate")
			if backoff.Steps <= 1 {
				backoff.Steps = 2 // stay at the cap
			}
			next = backoff.Step()
		} else {
			backoff.Duration, backoff.Steps = time.Second, 7
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}

// Ensure brings the Secret and the configuration to a valid certificate once.
func (c *Certs) Ensure(ctx context.Context) error {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	// The configuration owns the Secret: removing the chart (which deletes the configuration)
	// removes the Secret too, through the garbage collector.
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Reader.Get(ctx, client.ObjectKey{Name: c.Configuration}, &cfg); err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", c.Configuration, err)
	}
	owner := metav1.OwnerReference{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration",
		Name: cfg.Name, UID: cfg.UID}
	var secret corev1.Secret
	for attempt := 0; ; attempt++ {
		secret = corev1.Secret{} // a decode into a used object would merge its maps
		err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Secret}, &secret)
		switch {
		case apierrors.IsNotFound(err):
			secret = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Secret,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "metallb-iad"}}, Type: corev1.SecretTypeTLS}
		case err != nil:
			return fmt.Errorf("reading Secret %s/%s: %w", c.Namespace, c.Secret, err)
		}
		data, changed, err := renew(secret.Data, c.DNSNames, c.IPs, now())
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(secret.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) {
			secret.OwnerReferences = []metav1.OwnerReference{owner}
			changed = true
		}
		if changed {
			secret.Data = data
			if secret.ResourceVersion == "" {
				err = c.Client.Create(ctx, &secret)
			} else {
				err = c.Client.Update(ctx, &secret) // the resourceVersion read is the precondition
			}
			if (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)) && attempt < 5 {
				continue // another replica wrote it first: serve what it wrote
			}
			if err != nil {
				return fmt.Errorf("writing Secret %s/%s: %w", c.Namespace, c.Secret, err)
			}
		}
		break
	}
	cert, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("the certificate of Secret %s/%s: %w", c.Namespace, c.Secret, err)
	}
	// The configuration trusts the Secret's authorities before this replica serves a certificate
	// of them: a certificate the apiserver does not trust would refuse every call to it.
	if err := c.injectCABundle(ctx, &cfg, secret.Data[KeyCACert], now()); err != nil {
		return err
	}
	c.current.Store(&cert)
	c.injected.Store(true)
	return nil
}

// injectCABundle makes every webhook of the configuration (as read at the start of the pass)
// trust the authorities of bundle, and keep trusting those it trusts already that have not ended
// (another replica may still serve a certificate of one, until its next pass reads the Secret),
// at most MaxTrusted, newest first. It writes only a webhook that lacks one of bundle's, with a
// JSON patch that tests the configuration's resourceVersion: a configuration changed since is
// read again on the next pass.
func (c *Certs) injectCABundle(ctx context.Context, cfg *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte, now time.Time) error {
	want := parseBundle(bundle)
	var ops []map[string]any
	for i, w := range cfg.Webhooks {
		have := parseBundle(w.ClientConfig.CABundle)
		if containsAll(have, want) {
			continue
		}
		merged := slices.Clone(want)
		for _, h := range have {
			if now.Before(h.NotAfter) && !slices.ContainsFunc(merged, h.Equal) {
				merged = append(merged, h)
			}
		}
		merged = merged[:min(len(merged), MaxTrusted)]
		var pemBundle []byte
		for _, m := range merged {
			pemBundle = append(pemBundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Raw})...)
		}
		ops = append(ops,
			map[string]any{"op": "test", "path": fmt.Sprintf("/webhooks/%d/name", i), "value": w.Name},
			map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": pemBundle})
	}
	if len(ops) == 0 {
		return nil
	}
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.ResourceVersion}}, ops...)
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := c.Client.Patch(ctx, cfg, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("putting the parking webhook's authority into MutatingWebhookConfiguration %s: %w", c.Configuration, err)
	}
	log.FromContext(ctx).Info("the parking webhook's authority is in its configuration", "configuration", c.Configuration)
	return nil
}

// parseBundle reads the certificates of a PEM bundle.
func parseBundle(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// containsAll: every certificate of want is in have.
func containsAll(have, want []*x509.Certificate) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, w.Equal) {
			return false
		}
	}
	return true
}

// renew returns the Secret's data with every part that is missing, invalid or due renewed: the
// authority (its key, and ca.crt: the current authority first, then every earlier one that has
// not ended) and the serving certificate for dnsNames and ips. changed is false when nothing was
// due.
func renew(data map[string][]byte, dnsNames []string, ips []net.IP, now time.Time) (map[string][]byte, bool, error) {
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	ca, caKey, trusted := parseCA(out[KeyCACert], out[KeyCAKey], now)
	rotated := false
	if ca == nil || now.Add(CARenewBefore).After(ca.NotAfter) {
		var err error
		var keyPEM []byte
		if ca, caKey, keyPEM, err = newCA(now); err != nil {
			return nil, false, err
		}
		out[KeyCAKey] = keyPEM
		rotated = true
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	for _, c := range trusted {
		if !c.Equal(ca) {
			bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	changed := rotated || !bytes.Equal(bundle, out[KeyCACert])
	out[KeyCACert] = bundle
	if rotated || !servingValid(out[corev1.TLSCertKey], out[corev1.TLSPrivateKeyKey], ca, dnsNames, ips, now) {
		certPEM, keyPEM, err := newServing(ca, caKey, dnsNames, ips, now)
		if err != nil {
			return nil, false, err
		}
		out[corev1.TLSCertKey], out[corev1.TLSPrivateKeyKey] = certPEM, keyPEM
		changed = true
	}
	return out, changed, nil
}

// parseCA reads the current authority (the first certificate of ca.crt, usable with the key
// beside it: nil otherwise) and every authority of ca.crt that has not ended, the current one
// included.
func parseCA(certPEM, keyPEM []byte, now time.Time) (ca *x509.Certificate, key *ecdsa.PrivateKey, trusted []*x509.Certificate) {
	var certs []*x509.Certificate
	for _, c := range parseBundle(certPEM) {
		if c.IsCA {
			certs = append(certs, c)
		}
	}
	for _, c := range certs {
		if now.Before(c.NotAfter) {
			trusted = append(trusted, c)
		}
	}
	if len(certs) == 0 || !now.Before(certs[0].NotAfter) {
		return nil, nil, trusted
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, nil, trusted
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil || !k.PublicKey.Equal(certs[0].PublicKey) {
		return nil, nil, trusted
	}
	return certs[0], k, trusted
}

// servingValid: the pair parses, was signed by ca, is for exactly these names and is not due.
func servingValid(certPEM, keyPEM []byte, ca *x509.Certificate, dnsNames []string, ips []net.IP, now time.Time) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || leaf.CheckSignatureFrom(ca) != nil || now.Add(CertRenewAt).After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return false
	}
	if !slices.Equal(sortedStrings(leaf.DNSNames), sortedStrings(dnsNames)) {
		return false
	}
	var have, want []string
	for _, ip := range leaf.IPAddresses {
		have = append(have, ip.String())
	}
	for _, ip := range ips {
		want = append(want, ip.String())
	}
	return slices.Equal(sortedStrings(have), sortedStrings(want))
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func newCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "metallb-iad parking webhook authority"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return ca, key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, dnsNames []string, ips []net.IP, now time.Time) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	cn := "metallb-iad parking webhook"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
