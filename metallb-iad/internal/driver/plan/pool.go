package plan

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// ipRange is an inclusive range of addresses of one family.
type ipRange struct{ first, Last netip.Addr }

func (r ipRange) contains(ip netip.Addr) bool {
	return ip.BitLen() == r.first.BitLen() && r.first.Compare(ip) <= 0 && ip.Compare(r.Last) <= 0
}

// size is the number of addresses in the range (big for IPv6).
func (r ipRange) size() *big.Int {
	a, b := new(big.Int).SetBytes(r.first.AsSlice()), new(big.Int).SetBytes(r.Last.AsSlice())
	return b.Sub(b, a).Add(b, big.NewInt(1))
}

// parsePoolAddresses reads a MetalLB pool's spec.addresses: CIDRs ("203.0.113.0/26") and
// ranges ("203.0.113.10-203.0.113.20"), of either family.
func parsePoolAddresses(entries []string) ([]ipRange, error) {
	var out []ipRange
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if from, to, ok := strings.Cut(e, "-"); ok {
			a, err1 := netip.ParseAddr(strings.TrimSpace(from))
			b, err2 := netip.ParseAddr(strings.TrimSpace(to))
			if err1 != nil || err2 != nil || a.BitLen() != b.BitLen() || b.Less(a) {
				return nil, fmt.Errorf("invalid range %q", e)
			}
			out = append(out, ipRange{a.Unmap(), b.Unmap()})
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("invalid CIDR %q", e)
		}
		p = p.Masked()
		out = append(out, ipRange{p.Addr(), lastOf(p)})
	}
	return out, nil
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// poolContains reports whether a pool's addresses include ip; a pool whose addresses cannot be
// parsed contains nothing (MetalLB rejects such a pool too).
func poolContains(pool *metallb.IPAddressPool, ip netip.Addr) bool {
	ranges, err := parsePoolAddresses(pool.Spec.Addresses)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if r.contains(ip) {
			return true
		}
	}
	return false
}

// PoolSize is the number of addresses in a pool, as a float (IPv6 pools are huge).
func PoolSize(pool *metallb.IPAddressPool) float64 {
	ranges, err := parsePoolAddresses(pool.Spec.Addresses)
	if err != nil {
		return 0
	}
	total := new(big.Int)
	for _, r := range ranges {
		total.Add(total, r.size())
	}
	f, _ := new(big.Float).SetInt(total).Float64()
	return f
}
