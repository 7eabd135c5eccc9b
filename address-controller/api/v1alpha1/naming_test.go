package v1alpha1

import (
	"net/netip"
	"testing"
)

func TestAddressName(t *testing.T) {
	for ip, want := range map[string]string{
		"203.0.113.7":        "ip-203-0-113-7",
		"2001:db8::7":        "ip-2001-0db8-0000-0000-0000-0000-0000-0007",
		"2001:db8::":         "ip-2001-0db8-0000-0000-0000-0000-0000-0000",
		"::ffff:203.0.113.7": "ip-203-0-113-7",
	} {
		if got := AddressName(netip.MustParseAddr(ip)); got != want {
			t.Errorf("AddressName(%s) = %s, want %s", ip, got, want)
		}
	}
}

func TestParseCanonical(t *testing.T) {
	for s, ok := range map[string]bool{
		"203.0.113.7": true, "2001:db8::7": true,
		"2001:0db8::7": false, "192.168.001.1": false, "300.1.1.1": false, "fe80::1%eth0": false,
		"::ffff:203.0.113.7": false, "": false,
	} {
		if _, err := ParseCanonical(s); (err == nil) != ok {
			t.Errorf("ParseCanonical(%q) error=%v, want ok=%v", s, err, ok)
		}
	}
}

func FuzzAddressNameInjective(f *testing.F) {
	f.Add([]byte{203, 0, 113, 7}, []byte{32, 1, 13, 184, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ia, ok1 := netip.AddrFromSlice(a)
		ib, ok2 := netip.AddrFromSlice(b)
		if !ok1 || !ok2 {
			return
		}
		ia, ib = ia.Unmap(), ib.Unmap()
		if (AddressName(ia) == AddressName(ib)) != (ia == ib) {
			t.Fatalf("AddressName is not injective: %s and %s both give %s", ia, ib, AddressName(ia))
		}
	})
}
