package plan

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
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

// PoolSizes counts a pool's addresses per family (big: IPv6 pools are huge); a family the pool
// has no address of is absent, and a pool whose addresses cannot be parsed has none.
func PoolSizes(pool *metallb.IPAddressPool) map[ipamv1.IPFamily]*big.Int {
	ranges, err := parsePoolAddresses(pool.Spec.Addresses)
	if err != nil {
		return nil
	}
	out := map[ipamv1.IPFamily]*big.Int{}
	for _, r := range ranges {
		fam := ipamv1.FamilyOf(r.first)
		if out[fam] == nil {
			out[fam] = new(big.Int)
		}
		out[fam].Add(out[fam], r.size())
	}
	return out
}

// PoolCapacity is a class's status.capacity: per family, in family order, the pool's size
// (saturated at the largest int64), the class's addresses of that family (reserved) and the
// difference, never below 0. A family appears when the pool has addresses of it or the class
// has addresses of it (an admin's, outside the pool). Addresses of the pool that MetalLB gave to
// Services outside any reservation are not subtracted: the driver does not read them.
func PoolCapacity(pool *metallb.IPAddressPool, reserved map[ipamv1.IPFamily]int64) []ipamv1.FamilyCapacity {
	sizes := PoolSizes(pool)
	var out []ipamv1.FamilyCapacity
	for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		size, ok := sizes[fam]
		if !ok && reserved[fam] == 0 {
			continue
		}
		n := int64(math.MaxInt64)
		if size == nil {
			n = 0
		} else if size.IsInt64() {
			n = size.Int64()
		}
		out = append(out, ipamv1.FamilyCapacity{Family: fam, Size: n, Reserved: reserved[fam], Free: max(n-reserved[fam], 0)})
	}
	return out
}

// PoolState is what MetalLB says of a class's pool for one family (its status's counts), which a
// provisioning placeholder's nudge decides from.
type PoolState struct {
	// Stamp names the pool's state, forward only: it never comes back to an earlier value, so a
	// placeholder refused under one state is asked again in any later one. It is the pool's
	// resourceVersion (which moves with every write of the pool, MetalLB's counts included)
	// after the generation and the family's free count, for people reading it; "" when MetalLB
	// reports no count for the family. A placeholder records the stamp it was created or last
	// nudged under (AnnotationPoolState): MetalLB does not retry an allocation it refused, and
	// asking again at once is worth a write only once the pool has changed. (The counts alone
	// repeat: an address taken and given back leaves them as they were.)
	Stamp string
	// Count names MetalLB's count alone (generation and free addresses), which the window's
	// accounting of placeholders served since follows.
	Count string
	// Full: MetalLB counts no free address of the family in the pool.
	Full bool
	// Free is MetalLB's count of the family's free addresses; -1 when it reports none.
	Free int64
}

// PoolStateOf reads a pool's state for a family from its status. MetalLB writes the counts as
// soon as it loads the pool and after every assignment and release; a family with neither
// assigned nor available addresses is one it has not counted (or the pool has none of).
func PoolStateOf(pool *metallb.IPAddressPool, fam ipamv1.IPFamily) PoolState {
	if pool == nil {
		return PoolState{Free: -1}
	}
	assigned, available := pool.Status.AssignedIPv4, pool.Status.AvailableIPv4
	if fam == ipamv1.IPv6 {
		assigned, available = pool.Status.AssignedIPv6, pool.Status.AvailableIPv6
	}
	if assigned == 0 && available == 0 {
		return PoolState{Free: -1}
	}
	count := fmt.Sprintf("%d/%d", pool.Generation, available)
	return PoolState{Stamp: count + "/" + pool.ResourceVersion, Count: count, Full: available <= 0, Free: max(available, 0)}
}

// PoolMovedOn: the pool has room and is in another state than the one the unserved provisioning
// placeholder s was created or last nudged in (both counted by MetalLB).
func PoolMovedOn(s *corev1.Service, st PoolState) bool {
	recorded := s.Annotations[AnnotationPoolState]
	return !st.Full && st.Stamp != "" && recorded != "" && recorded != st.Stamp && len(IngressIPs(s)) == 0
}

// DefaultProvisioningWindow is how many provisioning placeholders of one pool and family may wait
// for MetalLB at a time, by default.
const DefaultProvisioningWindow = 32

// ProvisioningSlots is how many provisioning placeholders of a pool and family may wait for
// MetalLB at once: the window, and no more than MetalLB counts free addresses, but always one, so
// that MetalLB is asked once the pool has room (it does not retry on its own, and a count that
// lags must not stop provisioning). Claims beyond it wait for their turn without a placeholder:
// a waiting claim costs no Service, no cluster IP and no write.
func ProvisioningSlots(st PoolState, window int) int {
	n := window
	if st.Free >= 0 && st.Free < int64(n) {
		n = int(st.Free)
	}
	return max(n, 1)
}
