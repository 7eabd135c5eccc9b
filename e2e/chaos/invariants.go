// Package chaos holds the invariants the seeded chaos test (e2e/chaos_test.go) checks after
// convergence: a pure function of a snapshot of the cluster, so it is tested on its own.
package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Snapshot is what the chaos test reads from the apiserver after convergence; the
// invariants are a pure function of it.
type Snapshot struct {
	// Namespace is the tenant namespace the test works in.
	Namespace string
	// Classes are the test's classes by name; Pools the current CIDRs of each class's pool.
	Classes map[string]*ipamv1.IPAddressClass
	Pools   map[string][]netip.Prefix
	// Ranges are every CIDR the test's pools ever had (an IP there is one of ours).
	Ranges   []netip.Prefix
	Claims   []ipamv1.IPAddressClaim
	Address  []ipamv1.IPAddress
	Services []corev1.Service // of the tenant namespace and of the driver's namespace
}

// Violation is one broken invariant with the objects involved.
type Violation struct {
	Invariant string
	Detail    string
	Objects   []string
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s\n      %s", v.Invariant, v.Detail, strings.Join(v.Objects, "\n      "))
}

// The invariants of issue 13, each as docs/design.md states it.
const (
	InvClaimBound       = "claim-bound"        // every live claim Bound, or Lost with a reason when its pool lost its IP
	InvOnePerFamily     = "one-per-family"     // one address per family, whose claimRef names the claim with its uid
	InvHeldOnce         = "held-exactly-once"  // every reserved IP held by exactly one placeholder or its attached Service
	InvNoOrphanHold     = "no-orphan-hold"     // no placeholder without its IPAddress (and no leftover provisioning one)
	InvReclaim          = "reclaim"            // no Delete address without its claim; Retain/releaseDelay 0 back to Available
	InvServiceShowsPin  = "service-addresses"  // a Service linked to a Bound claim shows exactly its addresses
	InvNoForeignAddress = "no-foreign-address" // a Service not linked to a Bound claim shows none of them
	InvNothingDeleting  = "nothing-stuck-deleting"
	InvErrorsStop       = "reconcile-errors-stop-growing"
)

func DescribeClaim(c *ipamv1.IPAddressClaim) string {
	var conds []string
	for _, cd := range c.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s %q", cd.Type, cd.Status, cd.Reason, cd.Message))
	}
	del := ""
	if c.DeletionTimestamp != nil {
		del = fmt.Sprintf(" deleting since %s finalizers=%v", c.DeletionTimestamp.Format("15:04:05"), c.Finalizers)
	}
	return fmt.Sprintf("claim %s/%s uid=%s class=%s family=%s phase=%s addresses=%v conditions=%v%s",
		c.Namespace, c.Name, c.UID, c.Spec.ClassName, c.Spec.Family, c.Status.Phase, claimIPs(c), conds, del)
}

func DescribeAddress(a *ipamv1.IPAddress) string {
	ref := "-"
	if r := a.Spec.ClaimRef; r != nil {
		ref = fmt.Sprintf("%s/%s(uid=%s)", r.Namespace, r.Name, r.UID)
	}
	att := "-"
	if r := a.Status.AttachedTo; r != nil {
		att = fmt.Sprintf("%s %s/%s(uid=%s)", r.Kind, r.Namespace, r.Name, r.UID)
	}
	var conds []string
	for _, cd := range a.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", cd.Type, cd.Status, cd.Reason))
	}
	del := ""
	if a.DeletionTimestamp != nil {
		del = fmt.Sprintf(" deleting since %s finalizers=%v", a.DeletionTimestamp.Format("15:04:05"), a.Finalizers)
	}
	return fmt.Sprintf("address %s ip=%s class=%s policy=%s claimRef=%s phase=%s attachedTo=%s conditions=%v%s",
		a.Name, a.Spec.Address, a.Spec.ClassName, a.Spec.ReclaimPolicy, ref, a.Status.Phase, att, conds, del)
}

func DescribeService(s *corev1.Service) string {
	var ann []string
	for _, k := range []string{claimAnnotation, pinAnnotation, pinnedMarker, poolAnnotation} {
		if v, ok := s.Annotations[k]; ok {
			ann = append(ann, k+"="+v)
		}
	}
	var labels []string
	for k, v := range s.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	del := ""
	if s.DeletionTimestamp != nil {
		del = fmt.Sprintf(" deleting since %s finalizers=%v", s.DeletionTimestamp.Format("15:04:05"), s.Finalizers)
	}
	return fmt.Sprintf("service %s/%s uid=%s families=%v ingress=%v annotations=%v labels=%v%s",
		s.Namespace, s.Name, s.UID, s.Spec.IPFamilies, ingressOf(s), ann, labels, del)
}

func inPrefixes(ip netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Check returns every violated invariant in snap.
func Check(snap Snapshot) []Violation {
	var out []Violation
	add := func(inv, detail string, objs ...string) {
		out = append(out, Violation{Invariant: inv, Detail: detail, Objects: objs})
	}

	ours := func(ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && inPrefixes(a.Unmap(), snap.Ranges)
	}
	// servable: MetalLB can serve ip for this class today (the pool still covers it).
	servable := func(class, ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && inPrefixes(a.Unmap(), snap.Pools[class])
	}

	claims := map[string]*ipamv1.IPAddressClaim{} // by name
	for i := range snap.Claims {
		claims[snap.Claims[i].Name] = &snap.Claims[i]
	}
	addrs := map[string]*ipamv1.IPAddress{}
	for i := range snap.Address {
		addrs[snap.Address[i].Name] = &snap.Address[i]
	}
	liveClaimOf := func(a *ipamv1.IPAddress) *ipamv1.IPAddressClaim {
		r := a.Spec.ClaimRef
		if r == nil || r.Namespace != snap.Namespace {
			return nil
		}
		c := claims[r.Name]
		if c == nil || c.DeletionTimestamp != nil || (r.UID != "" && r.UID != c.UID) {
			return nil
		}
		return c
	}
	services := map[types.UID]*corev1.Service{}
	served := map[string][]*corev1.Service{} // ip → Services serving it
	for i := range snap.Services {
		s := &snap.Services[i]
		services[s.UID] = s
		for _, ip := range ingressOf(s) {
			served[ip] = append(served[ip], s)
		}
	}

	// Claims: Bound (or Lost with a reason), one address per family with a matching claimRef.
	for i := range snap.Claims {
		c := &snap.Claims[i]
		if c.DeletionTimestamp != nil {
			add(InvNothingDeleting, "claim still being deleted after convergence", DescribeClaim(c))
			continue
		}
		lost := false
		for _, ca := range c.Status.Addresses {
			if !servable(c.Spec.ClassName, ca.Address) {
				lost = true
			}
		}
		switch {
		case lost && c.Status.Phase != ipamv1.ClaimLost:
			add(InvClaimBound, "the claim's pool no longer covers its address, but the claim is not Lost", DescribeClaim(c))
		case lost:
			ok := false
			for _, cd := range c.Status.Conditions {
				if cd.Reason != "" && cd.Message != "" && (cd.Type == ipamv1.ConditionLost || cd.Type == ipamv1.ConditionBound) {
					ok = true
				}
			}
			if !ok {
				add(InvClaimBound, "Lost claim gives no reason", DescribeClaim(c))
			}
		case c.Status.Phase != ipamv1.ClaimBound:
			add(InvClaimBound, "live claim is not Bound (its addresses are all servable)", DescribeClaim(c))
		}
		want := c.Spec.Family.Families()
		var have []ipamv1.IPFamily
		for _, ca := range c.Status.Addresses {
			have = append(have, ca.Family)
			a := addrs[ca.Name]
			switch {
			case a == nil:
				add(InvOnePerFamily, "the claim's status names an IPAddress that does not exist", DescribeClaim(c))
			case a.Spec.Address != ca.Address:
				add(InvOnePerFamily, "the claim's status and the IPAddress disagree on the IP", DescribeClaim(c), DescribeAddress(a))
			case a.Spec.ClaimRef == nil || a.Spec.ClaimRef.Name != c.Name || a.Spec.ClaimRef.Namespace != c.Namespace || a.Spec.ClaimRef.UID != c.UID:
				add(InvOnePerFamily, "the address's claimRef does not name the claim with its uid", DescribeClaim(c), DescribeAddress(a))
			}
		}
		slices.Sort(have)
		slices.Sort(want)
		if len(c.Status.Addresses) > 0 && !slices.Equal(have, want) {
			add(InvOnePerFamily, fmt.Sprintf("families %v, want %v", have, want), DescribeClaim(c))
		}
	}

	// Addresses: reclaim policy, bound ones listed by their claim, every one held exactly once.
	for i := range snap.Address {
		a := &snap.Address[i]
		c := liveClaimOf(a)
		if a.Spec.ClaimRef != nil && c == nil {
			if a.Spec.ReclaimPolicy == ipamv1.ReclaimDelete {
				add(InvReclaim, "a Delete-policy address outlived its claim", DescribeAddress(a))
			} else {
				add(InvReclaim, "a Retain address with releaseDelay 0 still names a claim that is gone (not Available again)", DescribeAddress(a))
			}
		}
		if a.DeletionTimestamp != nil && c == nil {
			add(InvNothingDeleting, "address still being deleted without a live claim protecting it", DescribeAddress(a))
			continue
		}
		if c != nil && !slices.ContainsFunc(c.Status.Addresses, func(ca ipamv1.ClaimedAddress) bool { return ca.Name == a.Name }) {
			add(InvOnePerFamily, "address bound to a claim whose status does not list it (two addresses for one family?)", DescribeAddress(a), DescribeClaim(c))
		}
		if !servable(a.Spec.ClassName, a.Spec.Address) {
			continue // the pool shrank past it: nobody can hold it
		}
		holders := served[a.Spec.Address]
		var descs []string
		for _, s := range holders {
			descs = append(descs, DescribeService(s))
		}
		if att := a.Status.AttachedTo; att != nil {
			// The attached Service shares the IP with the address's hold, which stays.
			holders = slices.DeleteFunc(slices.Clone(holders), func(s *corev1.Service) bool {
				return s.Namespace == driverNamespace && s.Labels[labelAddress] == a.Name && sharesWith(s, services[att.UID])
			})
		}
		if len(holders) != 1 {
			add(InvHeldOnce, fmt.Sprintf("reserved IP served by %d Services", len(holders)), append([]string{DescribeAddress(a)}, descs...)...)
			continue
		}
		s := holders[0]
		if att := a.Status.AttachedTo; att != nil {
			if s.UID != att.UID {
				add(InvHeldOnce, "attached address served by a Service other than the attached one", DescribeAddress(a), DescribeService(s))
			}
			continue
		}
		if s.Namespace != driverNamespace || s.Labels[labelAddress] != a.Name {
			add(InvHeldOnce, "unattached address not served by its hold placeholder", DescribeAddress(a), DescribeService(s))
		}
	}

	// Attachments point at a live Service linked to the address's claim.
	for i := range snap.Address {
		a := &snap.Address[i]
		att := a.Status.AttachedTo
		if att == nil {
			continue
		}
		s := services[att.UID]
		c := liveClaimOf(a)
		if s == nil || s.DeletionTimestamp != nil || c == nil || s.Annotations[claimAnnotation] != c.Name {
			add(InvServiceShowsPin, "attachedTo names a Service that does not (or no longer) use the address's claim", DescribeAddress(a))
		}
	}

	// Placeholders: each holds an existing, unattached address; no provisioning leftovers.
	holdsPer := map[string]int{}
	for i := range snap.Services {
		s := &snap.Services[i]
		if s.Namespace != driverNamespace {
			continue
		}
		if s.DeletionTimestamp != nil {
			add(InvNothingDeleting, "placeholder still being deleted", DescribeService(s))
			continue
		}
		name := s.Labels[labelAddress]
		a := addrs[name]
		switch {
		case name == "":
			add(InvNoOrphanHold, "provisioning placeholder left over although every claim settled", DescribeService(s))
		case a == nil:
			add(InvNoOrphanHold, "hold placeholder for an IPAddress that does not exist", DescribeService(s))
		case a.Status.AttachedTo != nil && !sharesWith(s, services[a.Status.AttachedTo.UID]):
			add(InvNoOrphanHold, "hold placeholder for an address attached to a Service it does not share the IP with", DescribeService(s), DescribeAddress(a))
		case a.DeletionTimestamp != nil && liveClaimOf(a) == nil:
			add(InvNoOrphanHold, "hold placeholder for an address being deleted", DescribeService(s), DescribeAddress(a))
		default:
			holdsPer[name]++
			if holdsPer[name] == 2 {
				add(InvNoOrphanHold, "two placeholders hold one address", DescribeService(s), DescribeAddress(a))
			}
		}
	}

	// Tenant Services: exactly their Bound claim's addresses, nothing of ours otherwise, no
	// IP served twice.
	for ip, svcs := range served {
		if len(svcs) > 1 && ours(ip) {
			var descs []string
			for _, s := range svcs {
				descs = append(descs, DescribeService(s))
			}
			if _, listed := addrs[ipamv1.AddressName(netip.MustParseAddr(ip))]; !listed {
				add(InvHeldOnce, "IP of a reserved pool served by several Services", descs...)
			}
		}
	}
	for i := range snap.Services {
		s := &snap.Services[i]
		if s.Namespace != snap.Namespace {
			continue
		}
		if s.DeletionTimestamp != nil {
			add(InvNothingDeleting, "tenant Service still being deleted", DescribeService(s))
			continue
		}
		c := claims[s.Annotations[claimAnnotation]]
		if c != nil && c.DeletionTimestamp == nil && (c.Status.Phase == ipamv1.ClaimLost ||
			slices.ContainsFunc(c.Status.Addresses, func(ca ipamv1.ClaimedAddress) bool { return !servable(c.Spec.ClassName, ca.Address) })) {
			continue // the pin stays while Lost (a claim that should be Lost is reported above)
		}
		if s.Annotations[claimAnnotation] != "" && c != nil && c.DeletionTimestamp == nil && c.Status.Phase == ipamv1.ClaimBound {
			if got, want := ingressOf(s), sorted(claimIPs(c)); !slices.Equal(got, want) {
				add(InvServiceShowsPin, fmt.Sprintf("Service linked to a Bound claim shows %v, want %v", got, want), DescribeService(s), DescribeClaim(c))
			}
			continue
		}
		for _, ip := range ingressOf(s) {
			if ours(ip) {
				add(InvNoForeignAddress, "Service not linked to a Bound claim shows a reserved-pool IP", DescribeService(s))
				break
			}
		}
		if s.Annotations[pinnedMarker] != "" {
			add(InvNoForeignAddress, "Service not linked to a Bound claim still carries the driver's pin", DescribeService(s))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Invariant < out[j].Invariant })
	return out
}

// Names the invariants read, as the driver and the core spell them.
const (
	DriverNamespace = "cozy-metallb-iad"
	claimAnnotation = ipamv1.AnnotationServiceClaim
	pinAnnotation   = "metallb.io/loadBalancerIPs"
	poolAnnotation  = "metallb.io/address-pool"
	pinnedMarker    = "metallb.drivers.local.sdn.cozystack.io/pinned"
	labelAddress    = "metallb.drivers.local.sdn.cozystack.io/address"
	allowSharedIP   = "metallb.io/allow-shared-ip"
	sharingPrefix   = "metallb.drivers.local.sdn.cozystack.io/"
	driverNamespace = DriverNamespace
)

func claimIPs(claim *ipamv1.IPAddressClaim) []string {
	var out []string
	for _, a := range claim.Status.Addresses {
		out = append(out, a.Address)
	}
	return out
}

func ingressOf(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// sharesWith: a hold and the attached Service carry the same sharing key of the driver's, under
// which they share the IP.
func sharesWith(hold, attached *corev1.Service) bool {
	if hold == nil || attached == nil {
		return false
	}
	k := hold.Annotations[allowSharedIP]
	return len(k) > len(sharingPrefix) && strings.HasPrefix(k, sharingPrefix) && attached.Annotations[allowSharedIP] == k
}
