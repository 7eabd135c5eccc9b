package v1alpha1

import (
	"fmt"
	"net/netip"
	"strings"
)

// AddressName returns the IPAddress object name for an IP: "ip-" followed by the IPv4 octets,
// or by the eight fully expanded IPv6 groups, joined with dashes. It is injective, so the name
// is the lock that keeps one IP from having two IPAddress objects.
func AddressName(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		return "ip-" + strings.ReplaceAll(ip.String(), ".", "-")
	}
	return "ip-" + strings.ReplaceAll(ip.WithZone("").StringExpanded(), ":", "-")
}

// ParseCanonical parses s and insists on its canonical form (the one CRD validation accepts).
func ParseCanonical(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if ip.Zone() != "" || ip.Is4In6() || ip.String() != s {
		return netip.Addr{}, fmt.Errorf("%q is not in canonical form (want %s)", s, ip.Unmap().WithZone("").String())
	}
	return ip, nil
}

// FamilyOf returns IPv4 or IPv6.
func FamilyOf(ip netip.Addr) IPFamily {
	if ip.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Families expands a claim family into the single families it requests, IPv4 first.
func (f IPFamily) Families() []IPFamily {
	switch f {
	case Dual:
		return []IPFamily{IPv4, IPv6}
	case IPv6:
		return []IPFamily{IPv6}
	default:
		return []IPFamily{IPv4}
	}
}
