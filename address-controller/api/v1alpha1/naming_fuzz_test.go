package v1alpha1

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// addressFromName inverts AddressName: it is how the test proves the naming injective.
func addressFromName(t *testing.T, name string) netip.Addr {
	t.Helper()
	rest, ok := strings.CutPrefix(name, "ip-")
	if !ok {
		t.Fatalf("%q lacks the ip- prefix", name)
	}
	parts := strings.Split(rest, "-")
	var s string
	switch len(parts) {
	case 4:
		s = strings.Join(parts, ".")
	case 8:
		for _, p := range parts {
			if len(p) != 4 {
				t.Fatalf("%q: IPv6 group %q is not fully expanded", name, p)
			}
		}
		s = strings.Join(parts, ":")
	default:
		t.Fatalf("%q has %d groups", name, len(parts))
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("%q does not decode to an IP: %v", name, err)
	}
	return ip
}

// Any string: when it parses as an IP, its IPAddress name is a valid DNS subdomain that decodes
// back to the same address (so two IPs never share a name); ParseCanonical accepts exactly the
// canonical spelling (no zone, no IPv4-mapped form, lower case, no leading zeros) and names it
// the same as any other spelling of the address.
func FuzzParseAndName(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "198.18.0.0", "2001:db8::7", "2001:DB8::7", "2001:0db8::7",
		"::ffff:203.0.113.7", "::ffff:cb00:7107", "fe80::1%eth0", "192.168.001.1", "::", "0.0.0.0", "::1",
		"2001:db8:0:0:0:0:0:7", "1.2.3.4%zone", "ff02::1%1", "2001:db8::", "255.255.255.255"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			if _, err := ParseCanonical(s); err == nil {
				t.Fatalf("ParseCanonical accepted %q, which is not an IP", s)
			}
			return
		}
		name := AddressName(ip)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Fatalf("AddressName(%q) = %q is not a valid object name: %v", s, name, errs)
		}
		if back, want := addressFromName(t, name), ip.Unmap().WithZone(""); back != want {
			t.Fatalf("AddressName(%q) = %q decodes to %s, want %s", s, name, back, want)
		}
		if FamilyOf(ip) == IPv4 != ip.Unmap().Is4() {
			t.Fatalf("FamilyOf(%q) = %s", s, FamilyOf(ip))
		}

		canonical := ip.Unmap().WithZone("").String()
		parsed, err := ParseCanonical(s)
		if (err == nil) != (s == canonical) {
			t.Fatalf("ParseCanonical(%q) error %v, but canonical form is %q", s, err, canonical)
		}
		if err == nil {
			if s != strings.ToLower(s) || parsed.Zone() != "" || parsed.Is4In6() {
				t.Fatalf("ParseCanonical accepted a non-canonical %q", s)
			}
			if AddressName(parsed) != name {
				t.Fatalf("two spellings of %s have two names", parsed)
			}
		} else if !strings.Contains(err.Error(), "canonical") && !strings.Contains(err.Error(), "not an IP") {
			t.Fatalf("ParseCanonical(%q) error does not say what is wrong: %v", s, err)
		}
		// Every other spelling of the same address maps to the same name.
		if AddressName(netip.MustParseAddr(canonical)) != name {
			t.Fatalf("%q and its canonical form %q have different names", s, canonical)
		}
	})
}
