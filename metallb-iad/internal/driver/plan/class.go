package plan

import (
	"fmt"
	"slices"
	"strings"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Reasons of a refused class.
const (
	ReasonAccepted           = driverkit.ReasonAccepted
	ReasonClassDeleting      = driverkit.ReasonClassDeleting
	ReasonPoolNotSet         = "PoolNotSet"
	ReasonPoolNotFound       = "PoolNotFound"
	ReasonPoolAutoAssigns    = "PoolAutoAssigns"
	ReasonPoolClaimedByClass = "PoolClaimedByOtherClass"
	// ReasonPoolFamiliesUnserved: none of the pool's addresses is of a family the cluster's
	// Service CIDRs have (an IPv6 pool on an IPv4-only cluster), so no placeholder could ever be
	// served.
	ReasonPoolFamiliesUnserved = "PoolFamiliesUnserved"
)

// familiesList names families for a message ("IPv4 only", "IPv4 and IPv6"; "unknown" for nil).
func familiesList(fs []ipamv1.IPFamily) string {
	switch len(fs) {
	case 0:
		return "none known"
	case 1:
		return string(fs[0]) + " only"
	}
	var out []string
	for _, f := range fs {
		out = append(out, string(f))
	}
	return strings.Join(out, " and ")
}

// ClassVerdict decides whether the driver accepts a class: its pool must exist in the MetalLB
// namespace, set autoAssign: false (MetalLB would otherwise hand its addresses to any Service),
// have addresses of a family the cluster's Services can have (clusterFamilies; nil: unknown),
// and not be named by an older class of this driver (the oldest keeps it; ties: lowest name).
func ClassVerdict(class *ipamv1.IPAddressClass, pool *metallb.IPAddressPool, rivals []ipamv1.IPAddressClass, namespace string,
	clusterFamilies []ipamv1.IPFamily) (reason, message string) {
	name := ParseClassParams(class).Pool
	switch {
	case class.DeletionTimestamp != nil:
		return ReasonClassDeleting, "the class is being deleted: it gets no new addresses; existing ones stay held until deleted"
	case name == "":
		return ReasonPoolNotSet, "parameters.pool must name a MetalLB IPAddressPool in " + namespace
	case pool == nil:
		return ReasonPoolNotFound, fmt.Sprintf("IPAddressPool %s/%s does not exist; create it with autoAssign: false", namespace, name)
	case pool.Spec.AutoAssign == nil || *pool.Spec.AutoAssign:
		return ReasonPoolAutoAssigns, fmt.Sprintf("IPAddressPool %s/%s hands its addresses to any Service; set autoAssign: false", namespace, name)
	case len(ServedFamilies(pool, clusterFamilies)) == 0:
		return ReasonPoolFamiliesUnserved, fmt.Sprintf("IPAddressPool %s/%s has no address of a family this cluster's Services can have (%s); add a range of such a family to the pool",
			namespace, name, familiesList(clusterFamilies))
	}
	for _, r := range rivals {
		if r.Name == class.Name || r.DeletionTimestamp != nil || ParseClassParams(&r).Pool != name {
			continue
		}
		if olderClass(&r, class) {
			return ReasonPoolClaimedByClass, fmt.Sprintf("IPAddressPool %s/%s is already used by class %s; give each class a pool of its own", namespace, name, r.Name)
		}
	}
	return ReasonAccepted, fmt.Sprintf("addresses come from IPAddressPool %s/%s", namespace, name)
}

func olderClass(a, b *ipamv1.IPAddressClass) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	return strings.Compare(a.Name, b.Name) < 0
}

// ClassReport is what the driver reports of a class beside Accepted (driverkit.Verdict): the
// families it can serve and the namespaces its pool serves, which the core enforces on the
// class's claims (NamespaceNotAllowed, FamilyNotServed).
func ClassReport(pool *metallb.IPAddressPool, clusterFamilies []ipamv1.IPFamily) (families []ipamv1.IPFamily, served *ipamv1.NamespaceSet) {
	if pool == nil {
		return nil, nil
	}
	return ServedFamilies(pool, clusterFamilies), ServedNamespaces(pool)
}

// ServedFamilies are the families of the pool's addresses that a Service of this cluster can have
// (clusterFamilies, those of its Service CIDRs; nil when unknown, which rules out nothing): a
// placeholder of any other family is either refused by the apiserver or never served by MetalLB.
// None (nil) when the pool's addresses cannot be parsed or none of them can be served: the class
// is refused then (ClassVerdict), and the core reads an empty list as "not reported".
func ServedFamilies(pool *metallb.IPAddressPool, clusterFamilies []ipamv1.IPFamily) []ipamv1.IPFamily {
	ranges, err := parsePoolAddresses(pool.Spec.Addresses)
	if err != nil {
		return nil
	}
	var out []ipamv1.IPFamily
	for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		if clusterFamilies != nil && !slices.Contains(clusterFamilies, fam) {
			continue
		}
		if slices.ContainsFunc(ranges, func(r ipRange) bool { return ipamv1.FamilyOf(r.first) == fam }) {
			out = append(out, fam)
		}
	}
	return out
}

// ServedNamespaces are the namespaces the pool's spec.serviceAllocation lets MetalLB serve, as
// the allocation lists and selects them; nil when it restricts no namespace. (MetalLB serves
// every namespace when the selectors match none and nothing is listed; the report is stricter and
// serves none then: the admin asked for some namespaces only.)
func ServedNamespaces(pool *metallb.IPAddressPool) *ipamv1.NamespaceSet {
	alloc := pool.Spec.ServiceAllocation
	if alloc == nil || len(alloc.Namespaces) == 0 && len(alloc.NamespaceSelectors) == 0 {
		return nil
	}
	set := &ipamv1.NamespaceSet{}
	for _, n := range alloc.Namespaces {
		if n != "" && len(n) <= 63 && !slices.Contains(set.Names, n) {
			set.Names = append(set.Names, n)
		}
	}
	set.Selectors = slices.Clone(alloc.NamespaceSelectors)
	return set
}
