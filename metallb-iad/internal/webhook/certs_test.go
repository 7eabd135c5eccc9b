package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func leafOf(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func bundleOf(t *testing.T, data map[string][]byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := data[KeyCACert]; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// verifies says whether the serving certificate of data is trusted by the bundle of trust for
// name at now, as the apiserver checks it.
func verifies(t *testing.T, data, trust map[string][]byte, name string, now time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range bundleOf(t, trust) {
		pool.AddCert(c)
	}
	_, err := leafOf(t, data).Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now})
	return err == nil
}

// The Secret's parts are made once and kept while valid; the serving certificate is renewed when
// its names change or its end is near, under the same authority; the authority is renewed near
// its own end, and the bundle then trusts the previous one too, so that a replica still serving a
// certificate of the previous authority stays trusted until that authority ends.
func TestRenewMakesOnceRenewsWhatIsDueAndKeepsTrust(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	names := []string{"metallb-iad-parking-webhook.cozy-metallb-iad.svc"}
	first, changed, err := renew(nil, names, nil, now)
	if err != nil || !changed {
		t.Fatalf("a first renew made nothing: %v", err)
	}
	for _, k := range []string{KeyCACert, KeyCAKey, corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(first[k]) == 0 {
			t.Fatalf("no %s", k)
		}
	}
	if !verifies(t, first, first, names[0], now) {
		t.Fatal("the serving certificate is not trusted by the bundle for its Service's name")
	}

	// Nothing due: nothing changes, whoever asks (another replica, an hour later).
	again, changed, err := renew(first, names, nil, now.Add(time.Hour))
	if err != nil || changed || !bytes.Equal(again[corev1.TLSCertKey], first[corev1.TLSCertKey]) {
		t.Fatalf("a renew with nothing due changed the Secret (%v)", err)
	}

	// Another address (the sandbox's loopback): a new serving certificate, the same authority.
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	withIP, changed, err := renew(first, names, ips, now)
	if err != nil || !changed || !bytes.Equal(withIP[KeyCACert], first[KeyCACert]) || bytes.Equal(withIP[corev1.TLSCertKey], first[corev1.TLSCertKey]) {
		t.Fatalf("new names: want a new serving certificate under the same authority (%v)", err)
	}
	if leaf := leafOf(t, withIP); len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(ips[0]) {
		t.Fatalf("the certificate is for %v, want %v", leaf.IPAddresses, ips)
	}

	// The serving certificate near its end: renewed, the authority kept.
	late := now.Add(CertLifetime - CertRenewAt + time.Hour)
	renewed, changed, err := renew(first, names, nil, late)
	if err != nil || !changed || !bytes.Equal(renewed[KeyCACert], first[KeyCACert]) || !leafOf(t, renewed).NotAfter.After(leafOf(t, first).NotAfter) {
		t.Fatalf("near its end the serving certificate was not renewed under the same authority (%v)", err)
	}

	// The authority near its end: a new one, the old one still trusted, a certificate of each
	// verifies against the new bundle.
	caLate := now.Add(CALifetime - CARenewBefore + time.Hour)
	rotated, changed, err := renew(first, names, nil, caLate)
	if err != nil || !changed {
		t.Fatalf("near its end the authority was not renewed (%v)", err)
	}
	bundle := bundleOf(t, rotated)
	if len(bundle) != 2 || !bundle[1].Equal(bundleOf(t, first)[0]) || bundle[0].Equal(bundle[1]) {
		t.Fatalf("after the authority's renewal the bundle holds %d authorities, want the new one then the previous", len(bundle))
	}
	if !verifies(t, rotated, rotated, names[0], caLate) {
		t.Fatal("the new serving certificate is not trusted by the new bundle")
	}
	// A replica that still serves the previous certificate (re-issued close to the rotation, so
	// that it is still valid) stays trusted.
	prev, _, err := renew(first, names, nil, caLate.Add(-CertRenewAt))
	if err != nil {
		t.Fatal(err)
	}
	if !verifies(t, prev, rotated, names[0], caLate) {
		t.Fatal("a certificate of the previous authority is no longer trusted after the rotation")
	}
	// Once the previous authority has ended it is dropped from the bundle at the next renewal.
	end := bundleOf(t, first)[0].NotAfter.Add(time.Hour)
	later, _, err := renew(rotated, names, nil, end)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range bundleOf(t, later) {
		if c.Equal(bundleOf(t, first)[0]) {
			t.Fatal("an authority that has ended is still trusted")
		}
	}

	// Damaged parts are made again.
	broken := map[string][]byte{KeyCACert: []byte("junk"), KeyCAKey: first[KeyCAKey], corev1.TLSCertKey: first[corev1.TLSCertKey]}
	fixed, changed, err := renew(broken, names, nil, now)
	if err != nil || !changed || !verifies(t, fixed, fixed, names[0], now) {
		t.Fatalf("a damaged Secret was not made whole (%v)", err)
	}
}
