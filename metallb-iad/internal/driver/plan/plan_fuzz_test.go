package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The planners' fuzz targets: fuzz bytes are decoded into a random but valid snapshot (the kind of
// view the reconcilers build from the cache, including a cache that lags behind this driver's own
// writes), the planner runs, and the plan must keep the invariants of
// docs/design.md#the-driver-contract and docs/design.md#decide-then-write. Each target then applies
// the plan's writes to the snapshot and plans again: a settled snapshot needs no further writes
// (the plans are idempotent).

// choices decodes fuzz bytes into decisions; past the end every choice is 0 (the first option).
type choices struct {
	b []byte
	i int
}

func (c *choices) byte() byte {
	if c.i >= len(c.b) {
		return 0
	}
	c.i++
	return c.b[c.i-1]
}

// n picks one of k options.
func (c *choices) n(k int) int { return int(c.byte()) % k }

// yes is true one time in k.
func (c *choices) yes(k int) bool { return c.n(k) == 0 }

// The small world the snapshots are drawn from: one claim t/c, a few IPs of each family.
var (
	fuzzIPs = map[ipamv1.IPFamily][]netip.Addr{
		ipamv1.IPv4: {netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("203.0.113.3")},
		ipamv1.IPv6: {netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8::3")},
	}
	fuzzFamilies = []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}
	fuzzNow      = t0.Add(10 * time.Minute)
)

func (c *choices) family() ipamv1.IPFamily { return fuzzFamilies[c.n(2)] }

func (c *choices) claimFamily() ipamv1.IPFamily {
	return []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6, ipamv1.Dual}[c.n(3)]
}

func (c *choices) IP(fam ipamv1.IPFamily) netip.Addr { return fuzzIPs[fam][c.n(len(fuzzIPs[fam]))] }

// age is a creation time up to ten minutes before fuzzNow, often in the same second as another.
func (c *choices) age() metav1.Time {
	return metav1.NewTime(fuzzNow.Add(-time.Duration(c.n(8)) * []time.Duration{time.Second, 10 * time.Second, time.Minute, 80 * time.Second}[c.n(4)]))
}

func (c *choices) deleted() *metav1.Time {
	if c.yes(6) {
		t := metav1.NewTime(fuzzNow.Add(-time.Second))
		return &t
	}
	return nil
}

// claimRef is this claim's (with or without its uid), an earlier claim's of the same name, another
// claim's, or none.
func (c *choices) claimRef() *ipamv1.ClaimReference {
	switch c.n(6) {
	case 0, 1:
		return &ipamv1.ClaimReference{Namespace: "t", Name: "c", UID: "claim-uid"}
	case 2:
		return &ipamv1.ClaimReference{Namespace: "t", Name: "c"}
	case 3:
		return &ipamv1.ClaimReference{Namespace: "t", Name: "c", UID: "old-uid"}
	case 4:
		return &ipamv1.ClaimReference{Namespace: "t", Name: "other", UID: "other-uid"}
	}
	return nil
}

// fuzzAddress is an IPAddress of class k for ip, with finalizers, deletion and the driver's
// conditions drawn at random.
func (c *choices) Address(ip netip.Addr) *ipamv1.IPAddress {
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(ip), CreationTimestamp: c.age(), Generation: 1},
		Spec:       ipamv1.IPAddressSpec{Address: ip.String(), ClassName: "k", ClaimRef: c.claimRef()},
	}
	if a.Spec.ClaimRef != nil {
		a.Status.Phase = ipamv1.AddressBound
	} else {
		a.Status.Phase = ipamv1.AddressAvailable
	}
	if !c.yes(5) {
		a.Finalizers = append(a.Finalizers, Finalizer)
	}
	if a.Spec.ClaimRef != nil && !c.yes(4) {
		a.Finalizers = append(a.Finalizers, ipamv1.FinalizerAddress)
	}
	if a.DeletionTimestamp = c.deleted(); a.DeletionTimestamp != nil && len(a.Finalizers) == 0 {
		a.Finalizers = []string{Finalizer} // the apiserver keeps no deleted object without finalizers
	}
	for _, typ := range []string{ipamv1.ConditionHeld, ipamv1.ConditionLost, ipamv1.ConditionConflict} {
		if c.yes(3) {
			meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionStatus([]string{"True", "False"}[c.n(2)]),
				Reason: "Earlier", Message: "an earlier pass", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(t0)})
		}
	}
	return a
}

func fuzzClass(c *choices) *ipamv1.IPAddressClass {
	if c.yes(10) {
		return nil
	}
	k := acceptedClass()
	if c.yes(8) {
		k.Status.Conditions = nil
	}
	if c.yes(10) {
		k.Spec.Provisioner = "someone-else"
	}
	return k
}

func names(ss []*corev1.Service) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// --- PlanProvision ---

// fuzzProvisionView builds a claim reconciler's view: the claim (or none), its class, the
// provisioning placeholders of its key (of this claim's uid or an earlier one's), the addresses
// of the IPs MetalLB gave them and the holds those have.
func fuzzProvisionView(data []byte) ProvisionView {
	c := &choices{b: data}
	v := ProvisionView{ClaimKey: "t/c", Have: map[ipamv1.IPFamily]bool{}, PlaceholderExpected: map[ipamv1.IPFamily]bool{},
		Addresses: map[string]*ipamv1.IPAddress{}, HoldOf: map[string]string{}, NextName: map[ipamv1.IPFamily]string{},
		Namespace: testDriverNS, Now: fuzzNow, NudgeAfter: 3 * time.Second}
	if !c.yes(8) {
		claim := stampedClaim(c.claimFamily())
		claim.CreationTimestamp = c.age()
		claim.Status.Phase = []ipamv1.ClaimPhase{ipamv1.ClaimPending, ipamv1.ClaimPending, "", ipamv1.ClaimBound, ipamv1.ClaimLost}[c.n(5)]
		if c.yes(8) {
			claim.Annotations = nil // not stamped yet
		}
		if c.yes(8) {
			// The core has not written the status yet (it leaves a claim that only waits for
			// its driver quiet): the class is the one it stamped, if any.
			claim.Status.ClassName = ""
			if c.yes(2) {
				metav1.SetMetaDataAnnotation(&claim.ObjectMeta, ipamv1.AnnotationResolvedClass, "k")
			}
		}
		claim.DeletionTimestamp = c.deleted()
		v.Claim = claim
		v.Class = fuzzClass(c)
	}
	used, served := map[string]bool{}, map[netip.Addr]bool{}
	for range c.n(5) {
		uid := "claim-uid"
		if c.yes(4) {
			uid = "old-uid"
		}
		fam := c.family()
		name := ProvisioningName(uid, fam, c.n(3))
		if used[name] {
			continue
		}
		used[name] = true
		s := svc(testDriverNS, name, "uid-"+name)
		s.CreationTimestamp = c.age()
		s.Labels = map[string]string{LabelRole: RoleProvisioning, LabelClaimUID: uid, LabelFamily: string(fam)}
		s.Annotations[AnnotationClaim] = "t/c"
		// Made for this class's pool, or for another class the claim resolved to before.
		s.Annotations[metallb.AnnotationAddressPool] = "p"
		if c.yes(8) {
			s.Annotations[metallb.AnnotationAddressPool] = "elsewhere"
		}
		if c.yes(3) {
			s.Annotations[AnnotationNudge] = fuzzNow.Add(-time.Duration(c.n(120)) * time.Second).Format(time.RFC3339Nano)
		}
		// MetalLB gives an IP to one Service at a time (placeholders share no key).
		if ip := c.IP(fam); !c.yes(3) && !served[ip] {
			served[ip] = true
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
			name := ipamv1.AddressName(ip)
			if _, seen := v.Addresses[name]; !seen && !c.yes(3) {
				v.Addresses[name] = c.Address(ip)
				switch c.n(4) {
				case 0:
					v.HoldOf[name] = s.Name // relabelled a moment ago; the cache shows it still provisioning
				case 1:
					v.HoldOf[name] = HoldName(name)
				}
			}
		}
		v.Placeholders = append(v.Placeholders, s)
	}
	if v.Claim != nil {
		for _, fam := range fuzzFamilies {
			v.PlaceholderExpected[fam] = c.yes(6)
			v.Have[fam] = c.yes(6) // an address bound to it that no placeholder shows
		}
	}
	// Choices added later come last, each with its old meaning as the first option, so that the
	// committed seeds decode to the views they were found with.
	if v.Class != nil {
		// The families the driver reported for the class: none, IPv4 only, or both.
		v.Class.Status.Families = [][]ipamv1.IPFamily{nil, {ipamv1.IPv4}, {ipamv1.IPv4, ipamv1.IPv6}}[c.n(3)]
		// The namespaces its pool serves: any, or another one than the claim's.
		if c.n(2) == 1 {
			v.Class.Status.ServedNamespaces = &ipamv1.NamespaceSet{Names: []string{"another-tenant"}}
		}
	}
	// The pool's window (a slot for a new placeholder, or none: the claim waits its turn) and
	// MetalLB's count of the pool (not reported, room, full), per family; and the pool state
	// each placeholder recorded (none, or the current one).
	v.MayCreate, v.Pool = map[ipamv1.IPFamily]bool{}, map[ipamv1.IPFamily]PoolState{}
	for _, fam := range fuzzFamilies {
		v.MayCreate[fam] = c.n(2) == 0
		v.Pool[fam] = []PoolState{{Free: -1}, {Stamp: "1/5/9", Count: "1/5", Free: 5}, {Stamp: "1/0/9", Count: "1/0", Full: true}}[c.n(3)]
	}
	for _, s := range v.Placeholders {
		if st := v.Pool[ipamv1.IPFamily(s.Labels[LabelFamily])].Stamp; st != "" && c.n(2) == 1 {
			s.Annotations[AnnotationPoolState] = st
		}
		// MetalLB's latest refusal: none, or after its last touch (some seconds ago).
		if c.n(2) == 1 {
			if v.FailedAt == nil {
				v.FailedAt = map[types.UID]time.Time{}
			}
			v.FailedAt[s.UID] = LastTouch(s).Add(time.Duration(c.n(30)) * time.Second)
		}
	}
	// (Drawn last, so that the committed seeds decode as before.) A placeholder that recorded a
	// pool state may have recorded an earlier one, with the very counts the pool shows now.
	for _, s := range v.Placeholders {
		if st := s.Annotations[AnnotationPoolState]; st != "" && c.n(2) == 1 {
			s.Annotations[AnnotationPoolState] = strings.TrimSuffix(st, "/9") + "/3"
		}
	}
	refreshProvisionView(&v)
	return v
}

// refreshProvisionView derives what the reconciler derives from the objects: the families the
// claim has an address for, and the next free placeholder names.
func refreshProvisionView(v *ProvisionView) {
	if v.Claim == nil {
		return
	}
	for _, a := range v.Addresses {
		if a.DeletionTimestamp == nil && driverkit.BoundTo(a, v.Claim) {
			v.Have[ipamv1.FamilyOf(netip.MustParseAddr(a.Spec.Address))] = true
		}
	}
	taken := map[string]bool{}
	for _, s := range v.Placeholders {
		taken[s.Name] = true
	}
	for _, h := range v.HoldOf {
		taken[h] = true
	}
	for _, fam := range fuzzFamilies {
		for n := 0; ; n++ {
			if name := ProvisioningName(string(v.Claim.UID), fam, n); !taken[name] {
				v.NextName[fam] = name
				break
			}
		}
	}
}

func checkProvisionPlan(t *testing.T, v ProvisionView, p ProvisionPlan) {
	t.Helper()
	claim := v.Claim
	// Each placeholder is handled once.
	seen := map[string]string{}
	mark := func(s *corev1.Service, what string) {
		if prev, ok := seen[s.Name]; ok {
			t.Fatalf("placeholder %s is both %s and %s", s.Name, prev, what)
		}
		seen[s.Name] = what
	}
	for _, h := range p.ToHold {
		mark(h.Svc, "handed over")
	}
	for _, s := range p.Delete {
		mark(s, "deleted")
	}
	for _, st := range p.Settle {
		mark(st.Svc, "settled")
	}
	for _, s := range p.Nudge {
		mark(s, "nudged")
	}
	// Never two holds for one address: a handover or a settlement only for an address that has
	// none, and at most one each.
	toAddr := map[string]bool{}
	for _, h := range p.ToHold {
		a := v.Addresses[h.Address]
		switch {
		case a == nil:
			t.Fatalf("placeholder %s handed over to IPAddress %s, which does not exist", h.Svc.Name, h.Address)
		case driverkit.TeardownMayStart(a):
			t.Fatalf("placeholder %s handed over to IPAddress %s, which is being torn down", h.Svc.Name, h.Address)
		case v.HoldOf[h.Address] != "" && !(claim != nil && driverkit.BoundTo(a, claim)):
			// (The claim's own address whose hold is not the placeholder MetalLB gave its IP:
			// the served one becomes a hold too, and the address pass keeps the served one of
			// the two, so the IP is never let go.)
			t.Fatalf("placeholder %s handed over to IPAddress %s, which has hold %s already: two holds", h.Svc.Name, h.Address, v.HoldOf[h.Address])
		case toAddr[h.Address]:
			t.Fatalf("two placeholders handed over to IPAddress %s", h.Address)
		}
		if ip, ok := ServedIP(h.Svc, ipamv1.IPFamily(h.Svc.Labels[LabelFamily])); !ok || ip != h.IP || ipamv1.AddressName(ip) != h.Address {
			t.Fatalf("placeholder %s handed over to %s (%s), which MetalLB did not give it", h.Svc.Name, h.Address, h.IP)
		}
		toAddr[h.Address] = true
	}
	// Never a deleted placeholder that already is an address's hold.
	for _, s := range p.Delete {
		if ip, ok := ServedIP(s, ipamv1.IPFamily(s.Labels[LabelFamily])); ok {
			name := ipamv1.AddressName(ip)
			if a := v.Addresses[name]; a != nil && !driverkit.TeardownMayStart(a) && v.HoldOf[name] == s.Name {
				t.Fatalf("deleted placeholder %s, the hold of IPAddress %s", s.Name, name)
			}
		}
	}
	// A kept placeholder that MetalLB served an IP whose address is being torn down keeps it: it
	// is neither deleted (the IP would go to whichever waiting claim MetalLB serves next) nor
	// made that address's hold nor settled, and the claim looks again within a minute.
	for _, s := range KeptPlaceholders(v) {
		ip, ok := ServedIP(s, ipamv1.IPFamily(s.Labels[LabelFamily]))
		if !ok {
			continue
		}
		if a := v.Addresses[ipamv1.AddressName(ip)]; a != nil && driverkit.TeardownMayStart(a) {
			if what, done := seen[s.Name]; done {
				t.Fatalf("kept placeholder %s, served %s of an address being torn down, %s", s.Name, ip, what)
			}
			if p.Requeue <= 0 || p.Requeue > driverkit.MaxRecheck {
				t.Fatalf("kept placeholder %s waits for the torn-down address %s with re-check %v", s.Name, a.Name, p.Requeue)
			}
		}
	}
	// The claim's class as the core recorded it: its spec's, its status's, else the stamp's.
	resolved := ""
	if claim != nil {
		resolved = cmp.Or(claim.Spec.ClassName, claim.Status.ClassName, claim.Annotations[ipamv1.AnnotationResolvedClass])
	}
	needs := claim != nil && driverkit.NeedsProvisioning(claim, Provisioner) && driverkit.ClassProvisions(v.Class, Provisioner) && v.Class.Name == resolved &&
		len(driverkit.UnservedFamilies(v.Class, claim)) == 0 && driverkit.RefusesNamespace(v.Class, claim.Namespace, v.NamespaceLabels) == driverkit.NamespaceAdmitted
	if !needs && (len(p.Create) > 0 || len(p.Settle) > 0) {
		t.Fatalf("claim needs no provisioning, yet the plan creates %v and settles %d", names(p.Create), len(p.Settle))
	}
	// An address is made only from a placeholder that asked the class's pool, and a placeholder
	// is created only for it.
	for _, st := range p.Settle {
		if got := st.Svc.Annotations[metallb.AnnotationAddressPool]; got != v.Class.Spec.Parameters[ClassParameterPool] {
			t.Fatalf("settles placeholder %s of pool %q as an address of class %s (pool %q)", st.Svc.Name, got, v.Class.Name, v.Class.Spec.Parameters[ClassParameterPool])
		}
	}
	for _, s := range p.Create {
		if got := s.Annotations[metallb.AnnotationAddressPool]; got != v.Class.Spec.Parameters[ClassParameterPool] {
			t.Fatalf("creates placeholder %s for pool %q, the class's is %q", s.Name, got, v.Class.Spec.Parameters[ClassParameterPool])
		}
	}
	// Per family: at most one placeholder of this claim's uid left provisioning, or created.
	gone := map[string]bool{}
	for name := range seen {
		if seen[name] != "nudged" {
			gone[name] = true
		}
	}
	perFamily := map[ipamv1.IPFamily][]string{}
	if claim != nil {
		for _, s := range v.Placeholders {
			if ip, ok := ServedIP(s, ipamv1.IPFamily(s.Labels[LabelFamily])); ok && v.HoldOf[ipamv1.AddressName(ip)] == s.Name {
				continue // relabelled as a hold already; the cache is behind
			}
			if s.Labels[LabelClaimUID] == string(claim.UID) && !gone[s.Name] {
				fam := ipamv1.IPFamily(s.Labels[LabelFamily])
				perFamily[fam] = append(perFamily[fam], s.Name)
			}
		}
	}
	// The pool's window: a placeholder is created only with a slot, and records the pool's state;
	// a family without a slot waits its turn, with a re-check.
	for _, s := range p.Create {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		if !v.MayCreate[fam] {
			t.Fatalf("created placeholder %s for %s with no slot of the pool's window", s.Name, fam)
		}
		if got := s.Annotations[AnnotationPoolState]; got != v.Pool[fam].Stamp {
			t.Fatalf("created placeholder %s recording pool state %q, the pool's is %q", s.Name, got, v.Pool[fam].Stamp)
		}
	}
	for _, fam := range p.WaitForSlot {
		if !needs || v.MayCreate[fam] || v.Have[fam] || v.PlaceholderExpected[fam] || p.Requeue <= 0 {
			t.Fatalf("claim waits for a slot for %s (needs %v, slot %v, has %v, expected %v, requeue %v)",
				fam, needs, v.MayCreate[fam], v.Have[fam], v.PlaceholderExpected[fam], p.Requeue)
		}
	}
	// No write while nothing changes: a placeholder is nudged neither while MetalLB counts its
	// pool full, nor, in the pool state it was created or last nudged in, before its back-off; a
	// nudge records the pool's state. And none is left for good: one MetalLB refused in an
	// earlier state of the pool, which has room now, is nudged at once.
	nudged := map[string]bool{}
	for _, s := range p.Nudge {
		nudged[s.Name] = true
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		st := v.Pool[fam]
		switch {
		case s.Labels[LabelRole] == RoleProvisioning && st.Full:
			t.Fatalf("nudged %s although MetalLB counts the pool full", s.Name)
		case s.Labels[LabelRole] == RoleProvisioning && !PoolMovedOn(s, st) && v.Now.Sub(LastTouch(s)) < nudgeEvery(s, v.Now, v.NudgeAfter):
			t.Fatalf("nudged %s again in the pool state %s before its back-off", s.Name, st.Stamp)
		case p.NudgeStamps[s.Name] != st.Stamp:
			t.Fatalf("nudged %s recording pool state %q, the pool's is %q", s.Name, p.NudgeStamps[s.Name], st.Stamp)
		}
	}
	for fam, s := range KeptPlaceholders(v) {
		if gone[s.Name] || !PoolMovedOn(s, v.Pool[fam]) || !refusedSinceTouch(s, v.FailedAt[s.UID]) {
			continue
		}
		if !nudged[s.Name] {
			t.Fatalf("placeholder %s, refused in the pool's earlier state %s, not nudged in its new state %s",
				s.Name, s.Annotations[AnnotationPoolState], v.Pool[fam].Stamp)
		}
	}
	for _, s := range p.Create {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		switch {
		case v.Have[fam]:
			t.Fatalf("created placeholder %s for %s, which the claim has an address of", s.Name, fam)
		case v.PlaceholderExpected[fam]:
			t.Fatalf("created placeholder %s for %s while one created earlier is not seen yet", s.Name, fam)
		case !slices.Contains(claim.Spec.Family.Families(), fam):
			t.Fatalf("created placeholder %s for %s, which the claim does not ask for", s.Name, fam)
		case s.Labels[LabelClaimUID] != string(claim.UID) || s.Labels[LabelRole] != RoleProvisioning:
			t.Fatalf("created placeholder %s with labels %v", s.Name, s.Labels)
		case s.Name != v.NextName[fam]:
			t.Fatalf("created placeholder %s, want the free name %s", s.Name, v.NextName[fam])
		}
		perFamily[fam] = append(perFamily[fam], s.Name+" (new)")
	}
	for fam, ss := range perFamily {
		if len(ss) > 1 && needs {
			t.Fatalf("two provisioning placeholders for %s of the claim after the plan: %v", fam, ss)
		}
	}
	settledFam := map[ipamv1.IPFamily]bool{}
	for _, st := range p.Settle {
		fam := ipamv1.IPFamily(st.Svc.Labels[LabelFamily])
		a := st.Address
		ip, ok := ServedIP(st.Svc, fam)
		switch {
		case !ok || a.Spec.Address != ip.String() || a.Name != ipamv1.AddressName(ip):
			t.Fatalf("settled %s as IPAddress %s (%s), not the IP MetalLB gave it", st.Svc.Name, a.Name, a.Spec.Address)
		case v.Addresses[a.Name] != nil:
			t.Fatalf("settled %s by creating IPAddress %s, which exists", st.Svc.Name, a.Name)
		case a.Spec.ClaimRef == nil || a.Spec.ClaimRef.UID != claim.UID || !driverkit.BoundTo(a, claim):
			t.Fatalf("IPAddress %s created for the claim is pre-bound to %+v", a.Name, a.Spec.ClaimRef)
		case !slices.Contains(a.Finalizers, Finalizer):
			t.Fatalf("IPAddress %s created without the driver's finalizer", a.Name)
		case settledFam[fam] || v.Have[fam]:
			t.Fatalf("a second IPAddress of %s for the claim: %s", fam, a.Name)
		case toAddr[a.Name]:
			t.Fatalf("IPAddress %s is both created and handed a placeholder", a.Name)
		}
		settledFam[fam] = true
	}
	// A waiting claim is looked at again within about a minute; no wait is longer.
	if p.Requeue > driverkit.MaxRecheck || p.Requeue < 0 {
		t.Fatalf("requeue %v", p.Requeue)
	}
	// A placeholder the plan leaves as it is, although no claim needs it (the claim is gone,
	// settled, or has another one for the family), is looked at again: it is waiting for the
	// cache to show a relabel, and nothing else would bring its claim key back (found by the
	// chaos test, seed 123529108: a gone claim's placeholder stayed provisioning for good while
	// the address reconciler waited for it to become the hold).
	for _, s := range v.Placeholders {
		if seen[s.Name] != "" {
			continue
		}
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		kept := needs && s.Labels[LabelClaimUID] == string(claim.UID) && !v.Have[fam] && slices.Contains(claim.Spec.Family.Families(), fam)
		if !kept && (p.Requeue <= 0 || p.Requeue > driverkit.MaxRecheck) {
			t.Fatalf("placeholder %s left as it is with no re-check (requeue %v), though no claim needs it", s.Name, p.Requeue)
		}
	}
	writes := len(p.Create) + len(p.Settle) + len(p.ToHold) + len(p.Delete)
	if claim != nil && driverkit.NeedsProvisioning(claim, Provisioner) && len(driverkit.MissingFamilies(claim, v.Have)) > 0 && writes == 0 && p.Requeue <= 0 {
		t.Fatalf("claim waits for %v with nothing to write and no re-check", driverkit.MissingFamilies(claim, v.Have))
	}
}

// applyProvisionPlan is the snapshot after the plan's writes, as the cache shows them once they
// arrived.
func applyProvisionPlan(v ProvisionView, p ProvisionPlan) ProvisionView {
	drop := map[string]bool{}
	for _, s := range p.Delete {
		drop[s.Name] = true
	}
	for _, h := range p.ToHold {
		drop[h.Svc.Name] = true
		v.HoldOf[h.Address] = h.Svc.Name
	}
	for _, st := range p.Settle {
		drop[st.Svc.Name] = true
		a := st.Address.DeepCopy()
		a.CreationTimestamp = metav1.NewTime(v.Now)
		v.Addresses[a.Name] = a
		v.HoldOf[a.Name] = st.Svc.Name
	}
	nudged := map[string]bool{}
	for _, s := range p.Nudge {
		nudged[s.Name] = true
	}
	var kept []*corev1.Service
	for _, s := range v.Placeholders {
		if drop[s.Name] {
			continue
		}
		if nudged[s.Name] {
			s = s.DeepCopy()
			s.Annotations[AnnotationNudge] = v.Now.Format(time.RFC3339Nano)
			if st := p.NudgeStamps[s.Name]; st != "" {
				s.Annotations[AnnotationPoolState] = st
			}
		}
		kept = append(kept, s)
	}
	for _, s := range p.Create {
		s = s.DeepCopy()
		s.UID = types.UID("uid-" + s.Name)
		s.CreationTimestamp = metav1.NewTime(v.Now)
		kept = append(kept, s)
	}
	v.Placeholders = kept
	// (placeholderExpected stays: a placeholder created earlier is still on its way.)
	refreshProvisionView(&v)
	return v
}

func FuzzPlanProvision(f *testing.F) {
	for _, seed := range [][]byte{
		{}, // a Pending IPv4 claim with no placeholder: create one
		{1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1},
		{1, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 2, 0, 0, 2, 1, 1, 0, 0, 0, 1, 0, 1},
		{1, 1, 3, 1, 1, 1, 1, 3, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0},
		{1, 2, 0, 0, 1, 1, 1, 4, 3, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 2, 1, 3, 1, 0, 1, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A placeholder that goes is replaced on the next pass (its name may be the one the new
		// one gets), so the plans settle within a few passes, then write nothing.
		v := fuzzProvisionView(data)
		var passes []string
		for range 4 {
			p := PlanProvision(v)
			checkProvisionPlan(t, v, p)
			passes = append(passes, describeProvision(p))
			if len(p.Create)+len(p.Settle)+len(p.ToHold)+len(p.Delete)+len(p.Nudge) == 0 {
				return
			}
			v = applyProvisionPlan(v, p)
		}
		t.Fatalf("the plans do not settle: after each plan's writes, planning again writes more:\n%s", strings.Join(passes, "\n"))
	})
}

func describeProvision(p ProvisionPlan) string {
	var b strings.Builder
	for _, h := range p.ToHold {
		fmt.Fprintf(&b, "toHold %s→%s; ", h.Svc.Name, h.Address)
	}
	fmt.Fprintf(&b, "delete %v; create %v; ", names(p.Delete), names(p.Create))
	for _, s := range p.Settle {
		fmt.Fprintf(&b, "settle %s→%s; ", s.Svc.Name, s.Address.Name)
	}
	fmt.Fprintf(&b, "nudge %v; requeue %v", names(p.Nudge), p.Requeue)
	return b.String()
}

// --- PlanAddress (with planHold, planTeardown, planConflict) ---

// fuzzAddressView builds an address reconciler's view: an address of this driver's class (or
// not), its pool, its holds, the Service AttachedTo names, and other Services showing its IP.
func fuzzAddressView(data []byte) AddressView {
	c := &choices{b: data}
	fam := c.family()
	ip := c.IP(fam)
	a := c.Address(ip)
	v := AddressView{Addr: a, IP: ip, Class: fuzzClass(c), Namespace: testDriverNS, Now: fuzzNow, NudgeAfter: 3 * time.Second}
	if v.Class != nil && c.yes(10) {
		v.Class.Spec.Parameters = nil // names no pool
	}
	switch c.n(6) {
	case 0:
		// the pool is gone
	case 1:
		v.Pool = testPool("198.51.100.0/24") // shrunk: the IP is outside
	default:
		v.Pool = testPool("203.0.113.0/24", "2001:db8::/64")
	}
	for i := range c.n(4) {
		name := HoldName(a.Name)
		if i > 0 {
			name = fmt.Sprintf("%s-%d", ProvisioningName("claim-uid", fam, i), i) // a relabelled provisioning placeholder
		}
		h := svc(testDriverNS, name, "uid-"+name)
		h.CreationTimestamp = c.age()
		h.Labels = map[string]string{LabelRole: RoleHold, LabelAddress: a.Name}
		if !c.yes(4) {
			h.Annotations[metallb.AnnotationLoadBalancerIPs] = ip.String()
		}
		switch c.n(4) {
		case 0: // made before holds shared their IP
		case 1:
			h.Annotations[metallb.AnnotationAllowSharedIP] = SharingKey("another-claim-uid")
		default:
			h.Annotations[metallb.AnnotationAllowSharedIP] = HoldKey(a)
		}
		if c.yes(2) {
			h.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
		}
		if c.yes(4) {
			h.Annotations[AnnotationNudge] = fuzzNow.Add(-time.Duration(c.n(100)) * time.Second).Format(time.RFC3339Nano)
		}
		v.Holds = append(v.Holds, h)
	}
	v.HoldExpected = len(v.Holds) == 0 && c.yes(5)
	var others []*corev1.Service
	if c.yes(2) {
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
		switch c.n(4) {
		case 0:
			v.AttachedGone = true
		default:
			s := tenantSvc()
			s.Annotations[ipamv1.AnnotationServiceClaim] = "c"
			switch c.n(3) {
			case 0:
				pinned(s, ip.String())
			case 1:
				pinnedUnkeyed(s, ip.String())
			}
			if c.yes(4) {
				s.Spec.Ports = []corev1.ServicePort{{Port: HoldPort, Protocol: corev1.ProtocolTCP}} // cannot share
			}
			if c.yes(2) {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
			}
			v.Attached = s
			others = append(others, s)
		}
	}
	// Other Services showing the IP: a tenant one linking to the claim (an admin's pin being
	// adopted), one that does not, one the driver is releasing, a provisioning placeholder, one
	// listing it in spec.externalIPs.
	for i := range c.n(3) {
		s := svc("t", fmt.Sprintf("other-%d", i), fmt.Sprintf("other-uid-%d", i))
		switch c.n(5) {
		case 0:
			s.Annotations[ipamv1.AnnotationServiceClaim] = "c"
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip.String()
		case 1:
			s.Annotations[metallb.AnnotationLoadBalancerIPs] = ip.String()
		case 2:
			s.Annotations[AnnotationReleasing] = ip.String()
		case 3:
			s = svc(testDriverNS, ProvisioningName("x-uid", fam, 0), "prov-uid")
			s.Labels = map[string]string{LabelRole: RoleProvisioning, LabelClaimUID: "x-uid", LabelFamily: string(fam)}
		case 4:
			s.Spec.ExternalIPs = []string{ip.String()}
		}
		if s.Spec.ExternalIPs == nil || c.yes(2) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
		}
		others = append(others, s)
	}
	// The driver's memory of an attached Service waiting unserved (plan_notserved.go): none,
	// recent, or older than NotServedAfter.
	v.NotServedAfter = 10 * time.Minute
	if c.yes(2) {
		v.Unserved = UnservedWait{Since: fuzzNow.Add(-time.Duration(c.n(1200)) * time.Second), UID: []types.UID{"web-uid", "old-uid"}[c.n(2)]}
	}
	refreshAddressView(&v, others)
	// Choices added later come last, each with its old meaning as the first option, so that the
	// committed seeds decode to the views they were found with (exhausted data chooses the first
	// option).
	if !v.Unserved.Since.IsZero() {
		// Older by half-minute steps (one byte of choice alone stops short of NotServedAfter),
		// and whether its Warning was said.
		v.Unserved.Since = v.Unserved.Since.Add(-time.Duration(c.n(24)) * 30 * time.Second)
		v.Unserved.Said = c.n(2) == 1
	}
	// The guessed release for an attached Service (plan_release.go): off (the default) or on,
	// its names free, waiting for some time.
	if c.n(2) == 1 {
		v.ReleaseFor, v.ReleaseAfter = 10*time.Second, 30*time.Second
		v.Stale.Names, v.Stale.Known = StaleCandidates(&v, nil)
		v.Stale.Free = map[string]bool{}
		for _, n := range v.Stale.Names {
			v.Stale.Free[n] = true
		}
		if len(v.Stale.Names) > 0 {
			v.Stale.Since = fuzzNow.Add(-time.Duration(c.n(24)) * 30 * time.Second)
		}
	}
	// A Service MetalLB shows the IP on although nothing on it requests it (a stale holder,
	// plan_address.go): none, or one in another namespace.
	if c.n(2) == 1 {
		others = append(others, svc("x", "former", "former-uid", ip.String()))
		refreshAddressView(&v, others)
		if v.ReleaseFor != 0 {
			// The guessed release's names, as the driver would find them with it in view.
			v.Stale.Names, v.Stale.Known = StaleCandidates(&v, nil)
			v.Stale.Free = map[string]bool{}
			for _, n := range v.Stale.Names {
				v.Stale.Free[n] = true
			}
			if len(v.Stale.Names) == 0 {
				v.Stale.Since = time.Time{}
			}
		}
	}
	// The stale-holder clears already made (plan_address.go): none, or for each other Service
	// up to clearLimit of them, clearEvery apart, the last one less than clearEvery ago.
	if c.n(2) == 1 {
		v.Cleared = map[types.UID][]time.Time{}
		for _, s := range others {
			for j := c.n(clearLimit + 1); j > 0; j-- {
				v.Cleared[s.UID] = append(v.Cleared[s.UID], fuzzNow.Add(-time.Duration(j-1)*clearEvery-time.Duration(c.n(30))*time.Second))
			}
		}
		// Or all of them clearEvery earlier: the last clear is due again.
		if c.n(2) == 1 {
			for uid, times := range v.Cleared {
				for i := range times {
					times[i] = times[i].Add(-clearEvery)
				}
				v.Cleared[uid] = times
			}
		}
	}
	return v
}

// refreshAddressView derives the holders of the IP from the Services (holds included).
func refreshAddressView(v *AddressView, others []*corev1.Service) {
	v.Holders = nil
	for _, s := range append(slices.Clone(v.Holds), others...) {
		h := Holder{Svc: s, InIngress: slices.Contains(IngressIPs(s), v.IP), InExternalIPs: slices.Contains(ExternalIPs(s), v.IP)}
		if !h.InIngress && !h.InExternalIPs {
			continue
		}
		if ref := v.Addr.Spec.ClaimRef; ref != nil && s.Namespace == ref.Namespace && s.Labels[LabelRole] == "" {
			claim, _ := LinkedClaim(s)
			h.LinksToClaim = claim == ref.Name && (ref.UID == "" || ref.UID == "claim-uid") && ref.Name == "c"
		}
		v.Holders = append(v.Holders, h)
	}
}

func pinnedTo(s *corev1.Service, ip netip.Addr) bool {
	return s != nil && s.Annotations[AnnotationPinned] == "true" && slices.Contains(PinIPs(s), ip)
}

func checkAddressPlan(t *testing.T, v AddressView, p AddressPlan) {
	t.Helper()
	a := v.Addr
	teardown := driverkit.TeardownMayStart(a)
	// (Whether the teardown unpins the attached Service itself or waits for the Service
	// reconciler to detach it is the driver's choice; these checks hold either way.)
	if !teardown && p.RemoveFinalizer {
		t.Fatalf("teardown while the core protects the address (deleting %v, finalizers %v)", a.DeletionTimestamp != nil, a.Finalizers)
	}
	// Never every hold gone while the address is kept and no pinned Service serves it.
	if !teardown && len(v.Holds) > 0 && len(p.DeleteHolds) >= len(v.Holds) && !pinnedTo(v.Attached, v.IP) {
		t.Fatalf("deletes every hold %v of an address that is not being torn down and not attached to a pinned Service", names(p.DeleteHolds))
	}
	for _, s := range p.DeleteHolds {
		if !slices.Contains(v.Holds, s) {
			t.Fatalf("deletes %s, which is not a hold of the address", s.Name)
		}
	}
	if h := p.CreateHold; h != nil {
		switch {
		case teardown:
			// (One the core still protects is held, even when an admin removed the driver's
			// finalizer: the IP stays the claim's; the hold is swept once the address is gone.)
			t.Fatalf("creates a hold for an address being torn down")
		case len(v.Holds) > 0 || v.HoldExpected:
			t.Fatalf("creates hold %s while the address has %v (expected %v): two holds", h.Name, names(v.Holds), v.HoldExpected)
		case v.Attached != nil:
			t.Fatalf("creates hold %s for an address attached to Service %s", h.Name, v.Attached.Name)
		case h.Labels[LabelAddress] != a.Name || h.Annotations[metallb.AnnotationLoadBalancerIPs] != v.IP.String():
			t.Fatalf("hold %s labelled %v pinned %q", h.Name, h.Labels, h.Annotations[metallb.AnnotationLoadBalancerIPs])
		}
	}
	if p.PinHold != nil && (slices.Contains(p.DeleteHolds, p.PinHold) || !slices.Contains(v.Holds, p.PinHold)) {
		t.Fatalf("pins %s, which is deleted or not a hold", p.PinHold.Name)
	}
	if s := p.Status; s != nil {
		switch {
		case s.Phase != a.Status.Phase || s.ReleasedAt != a.Status.ReleasedAt:
			t.Fatalf("the driver writes the core's phase: %q → %q", a.Status.Phase, s.Phase)
		case s.AttachedTo != nil && (a.Status.AttachedTo == nil || *s.AttachedTo != *a.Status.AttachedTo):
			t.Fatalf("the address pass sets attachedTo %+v (was %+v)", s.AttachedTo, a.Status.AttachedTo)
		case s.AttachedTo == nil && a.Status.AttachedTo != nil && !v.AttachedGone:
			t.Fatalf("ends the attachment to live Service %s", a.Status.AttachedTo.Name)
		}
	}
	if p.Requeue > driverkit.MaxRecheck || p.Requeue < 0 {
		t.Fatalf("requeue %v", p.Requeue)
	}
	// A stale holder's clear that is not due yet is looked at again by the time it is, whatever
	// else the address waits for.
	if (a.DeletionTimestamp == nil || !teardown) && v.Class != nil && v.Class.Spec.Provisioner == Provisioner {
		adopter := adoptingService(v)
		for _, h := range v.Holders {
			if !staleHolder(v, adopter, h) {
				continue
			}
			if due, wait := clearDue(v.Cleared[h.Svc.UID], v.Now); !due && (p.Requeue <= 0 || p.Requeue > wait) {
				t.Fatalf("the clear of stale holder %s is due in %v, the address is looked at again in %v", h.Svc.Name, wait, p.Requeue)
			}
		}
	}
	status := a.Status
	if p.Status != nil {
		status = *p.Status
	}
	if c := meta.FindStatusCondition(status.Conditions, ipamv1.ConditionHeld); c != nil && c.Status == metav1.ConditionFalse &&
		(c.Reason == ReasonWaitingForMetalLB || c.Reason == ReasonReleasing) && !teardown && p.Requeue <= 0 && p.CreateHold == nil {
		t.Fatalf("Held=False/%s with no re-check", c.Reason)
	}
}

// applyAddressPlan is the snapshot after the plan's writes have reached the cache.
func applyAddressPlan(v AddressView, p AddressPlan, others []*corev1.Service) AddressView {
	a := v.Addr.DeepCopy()
	if p.AddFinalizer && !slices.Contains(a.Finalizers, Finalizer) {
		a.Finalizers = append(a.Finalizers, Finalizer)
	}
	if p.RemoveFinalizer {
		a.Finalizers = slices.DeleteFunc(a.Finalizers, func(f string) bool { return f == Finalizer })
	}
	if p.Status != nil {
		a.Status = *p.Status.DeepCopy()
	}
	v.Addr = a
	var holds []*corev1.Service
	for _, h := range v.Holds {
		if slices.Contains(p.DeleteHolds, h) {
			continue
		}
		if pin, nudge := h == p.PinHold, h == p.Nudge; pin || nudge {
			h = h.DeepCopy()
			if pin {
				h.Annotations[metallb.AnnotationLoadBalancerIPs] = v.IP.String()
				h.Annotations[metallb.AnnotationAllowSharedIP] = HoldKey(a)
			}
			if nudge {
				h.Annotations[AnnotationNudge] = v.Now.Format(time.RFC3339Nano)
			}
		}
		holds = append(holds, h)
	}
	if h := p.CreateHold; h != nil {
		h = h.DeepCopy()
		h.UID = "uid-new-hold"
		h.CreationTimestamp = metav1.NewTime(v.Now)
		holds = append(holds, h)
	}
	v.Holds = holds
	if p.CreateHold != nil {
		v.HoldExpected = false // the new hold is in view
	}
	if v.AttachedGone && a.Status.AttachedTo == nil {
		v.AttachedGone = false
	}
	if p.Unserved != nil {
		v.Unserved = *p.Unserved
	}
	if w := p.Release.Wait; w != nil {
		v.Stale.Since, v.Stale.Last = w.Since, w.Last
	}
	if p.Release.Forget {
		v.Stale.Since, v.Stale.Last = time.Time{}, time.Time{}
	}
	refreshAddressView(&v, others)
	return v
}

// othersOf are the Services of a view that are not holds.
func othersOf(v AddressView) []*corev1.Service {
	var out []*corev1.Service
	for _, h := range v.Holders {
		if !slices.Contains(v.Holds, h.Svc) {
			out = append(out, h.Svc)
		}
	}
	if v.Attached != nil && !slices.ContainsFunc(out, func(s *corev1.Service) bool { return s.UID == v.Attached.UID }) {
		out = append(out, v.Attached)
	}
	return out
}

func FuzzPlanAddress(f *testing.F) {
	for _, seed := range [][]byte{
		{}, // the first option of every choice
		{0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 2, 1, 1, 0, 1, 1},
		{1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 2, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 2},
		{0, 2, 1, 0, 0, 0, 2, 1, 1, 1, 1, 1, 3, 0, 3, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1, 1},
		{1, 0, 0, 3, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 0, 1, 1, 0, 0, 0, 2, 3, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := fuzzAddressView(data)
		others := othersOf(v)
		p := PlanAddress(v)
		checkAddressPlan(t, v, p)
		after := applyAddressPlan(v, p, others)
		again := PlanAddress(after)
		checkAddressPlan(t, after, again)
		if again.AddFinalizer || again.RemoveFinalizer || len(again.DeleteHolds) > 0 || again.CreateHold != nil ||
			again.PinHold != nil || again.Status != nil {
			t.Fatalf("not idempotent: after the plan's writes, planning again writes more:\nfirst:  %s\nsecond: %s", describeAddress(p), describeAddress(again))
		}
		// Nor says anything again that is not deduplicated (a Warning sent on every pass).
		for _, e := range again.Events {
			if !e.Once {
				t.Fatalf("says %s %q again on the next pass:\nfirst:  %s\nsecond: %s", e.Reason, e.Message, describeAddress(p), describeAddress(again))
			}
		}
	})
}

func describeAddress(p AddressPlan) string {
	s := fmt.Sprintf("addFinalizer %v removeFinalizer %v deleteHolds %v createHold %v pinHold %v requeue %v",
		p.AddFinalizer, p.RemoveFinalizer, names(p.DeleteHolds), p.CreateHold != nil, p.PinHold != nil, p.Requeue)
	if p.Status != nil {
		s += fmt.Sprintf(" status attachedTo=%v", p.Status.AttachedTo)
		for _, c := range p.Status.Conditions {
			s += fmt.Sprintf(" %s=%s/%s", c.Type, c.Status, c.Reason)
		}
	}
	return s
}

// --- PlanAttach ---

// fuzzAttachView builds a Service reconciler's view: a tenant Service, the claim it links to
// (any phase, or none), the claim's addresses as the cache shows them (bound to it or not,
// attached here, elsewhere or nowhere), their holds, and this driver's writes the cache lags on.
func fuzzAttachView(data []byte) AttachView {
	c := &choices{b: data}
	s := tenantSvc()
	s.CreationTimestamp = c.age()
	fam := c.claimFamily()
	s.Spec.IPFamilies = nil
	for _, f := range fam.Families() {
		s.Spec.IPFamilies = append(s.Spec.IPFamilies, corev1.IPFamily(f))
	}
	if fam == ipamv1.Dual {
		pol := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &pol
	}
	if c.yes(8) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	s.DeletionTimestamp = c.deleted()
	v := AttachView{Svc: s, Now: fuzzNow, Placeholder: c.yes(20), Servable: map[string]bool{}, Elsewhere: map[string]bool{}, Attached: map[string]bool{}}
	if c.yes(6) {
		v.Why = []string{"", `IPAddressClaim t/c does not exist`}[c.n(2)]
	} else {
		claimFam := fam
		if c.yes(8) {
			claimFam = c.claimFamily()
		}
		claim := boundClaim([]ipamv1.ClaimPhase{ipamv1.ClaimBound, ipamv1.ClaimBound, ipamv1.ClaimPending, ipamv1.ClaimLost, ""}[c.n(5)])
		claim.Spec.Family = claimFam
		v.Claim = claim
		if claim.Status.Phase != ipamv1.ClaimPending && claim.Status.Phase != "" {
			for _, f := range claimFam.Families() {
				ip := c.IP(f)
				claim.Status.Addresses = append(claim.Status.Addresses, ipamv1.ClaimedAddress{Name: ipamv1.AddressName(ip), Address: ip.String(), Family: f})
				if c.yes(10) {
					v.Addrs = append(v.Addrs, nil) // not in the cache yet
					continue
				}
				a := c.Address(ip)
				a.Finalizers = []string{Finalizer, ipamv1.FinalizerAddress}
				if c.yes(5) {
					a.Finalizers = a.Finalizers[:1]
				}
				a.DeletionTimestamp = c.deleted()
				if !c.yes(6) {
					a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "c", UID: "claim-uid"}
				}
				switch c.n(5) {
				case 0:
					a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
				case 1:
					a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "old-web-uid"}
				case 2:
					a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "db", UID: "db-uid"}
					v.Elsewhere[a.Name] = !c.yes(3)
				}
				v.Servable[a.Name] = !c.yes(10)
				if c.yes(6) {
					v.Attached[a.Name] = c.yes(2) // attached here (or elsewhere) a moment ago
				}
				v.Addrs = append(v.Addrs, a)
				if !c.yes(3) {
					h := hold(a.Name, ip.String(), c.yes(2))
					if c.yes(4) {
						unkeyed(h) // made before holds shared their IP
					}
					v.Holds = append(v.Holds, h)
				}
			}
		}
	}
	// The pin and the driver's markers on the Service.
	switch c.n(5) {
	case 0:
		if v.Claim != nil {
			pinned(s, PinValue(v.Claim.Status.Addresses))
		}
	case 1:
		pinned(s, "203.0.113.9")
	case 2:
		s.Annotations[metallb.AnnotationLoadBalancerIPs] = "203.0.113.9" // someone else's pin
	case 3:
		s.Annotations[AnnotationReleasing] = "203.0.113.1"
	case 4:
		if v.Claim != nil {
			pinnedUnkeyed(s, PinValue(v.Claim.Status.Addresses)) // pinned before holds shared their IP
		}
	}
	if c.yes(5) {
		s.Spec.Ports = []corev1.ServicePort{{Port: HoldPort, Protocol: corev1.ProtocolTCP}} // cannot share
	}
	if v.Claim != nil && c.yes(6) {
		v.Pinned = PinValue(v.Claim.Status.Addresses)
	}
	// An address of another claim this Service was attached to before a re-link.
	if c.yes(5) {
		a := c.Address(netip.MustParseAddr("198.51.100.7"))
		a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "previous", UID: "previous-uid"}
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
		v.AttachedHere = append(v.AttachedHere, a)
	}
	refreshAttachView(&v)
	return v
}

// refreshAttachView derives attachedHere from the addresses of the claim.
func refreshAttachView(v *AttachView) {
	var here []*ipamv1.IPAddress
	for _, a := range v.AttachedHere {
		if !slices.ContainsFunc(v.Addrs, func(x *ipamv1.IPAddress) bool { return x != nil && x.Name == a.Name }) {
			if a.Status.AttachedTo != nil {
				here = append(here, a) // another claim's
			}
		}
	}
	for _, a := range v.Addrs {
		if a != nil && a.Status.AttachedTo != nil && AttachedTo(a.Status.AttachedTo, v.Svc) {
			here = append(here, a)
		}
	}
	v.AttachedHere = here
}

func checkAttachPlan(t *testing.T, v AttachView, p AttachPlan) {
	t.Helper()
	claim := v.Claim
	attaching := p.Pin != "" || len(p.Attach) > 0 || len(p.DeleteHolds) > 0
	if attaching && p.Detach {
		t.Fatalf("both attaches (pin %q, %d addresses) and detaches", p.Pin, len(p.Attach))
	}
	if attaching {
		switch {
		case v.Placeholder:
			t.Fatal("attaches one of the driver's own placeholders")
		case claim == nil || claim.Status.Phase != ipamv1.ClaimBound:
			t.Fatalf("attaches to a claim that is not Bound (%v)", claim)
		case v.Svc.Spec.Type != corev1.ServiceTypeLoadBalancer || v.Svc.DeletionTimestamp != nil:
			t.Fatal("attaches a Service that is not a live LoadBalancer")
		}
		// Never a pin or an attachment to an address that is not the claim's.
		for i, a := range v.Addrs {
			switch {
			case a == nil:
				t.Fatalf("attaches while IPAddress %s is not in the cache", claim.Status.Addresses[i].Name)
			case !driverkit.BoundTo(a, claim):
				t.Fatalf("attaches to IPAddress %s, whose claimRef %+v is not the claim's", a.Name, a.Spec.ClaimRef)
			case driverkit.TeardownMayStart(a) || !v.Servable[a.Name]:
				t.Fatalf("attaches to IPAddress %s, which is torn down or not this driver's", a.Name)
			case a.Status.AttachedTo != nil && !AttachedTo(a.Status.AttachedTo, v.Svc) && v.Elsewhere[a.Name]:
				t.Fatalf("attaches IPAddress %s, attached to live Service %s", a.Name, a.Status.AttachedTo.Name)
			}
		}
	}
	if p.Pin != "" {
		if !SameIPs(ParseIPList(p.Pin), ParseIPList(PinValue(claim.Status.Addresses))) {
			t.Fatalf("pins %q, not the claim's addresses %v", p.Pin, claim.Status.Addresses)
		}
		if !FamiliesFit(v.Svc, claim.Spec.Family) {
			t.Fatalf("pins a Service whose families do not fit claim family %s", claim.Spec.Family)
		}
	}
	for _, a := range p.Attach {
		if !slices.Contains(v.Addrs, a) {
			t.Fatalf("attaches IPAddress %s, not one of the claim's", a.Name)
		}
	}
	for _, a := range p.Unattach {
		if slices.ContainsFunc(v.Addrs, func(x *ipamv1.IPAddress) bool { return x != nil && x.Name == a.Name }) {
			t.Fatalf("ends the attachment of IPAddress %s of the claim it attaches to", a.Name)
		}
	}
	if p.Requeue > driverkit.MaxRecheck || p.Requeue < 0 {
		t.Fatalf("requeue %v", p.Requeue)
	}
	if claim != nil && !v.Placeholder && v.Svc.Spec.Type == corev1.ServiceTypeLoadBalancer && v.Svc.DeletionTimestamp == nil &&
		claim.Status.Phase != ipamv1.ClaimBound && claim.Status.Phase != ipamv1.ClaimLost && p.Requeue <= 0 {
		t.Fatalf("a Service waiting for claim phase %q with no re-check", claim.Status.Phase)
	}
}

// applyAttachPlan is the snapshot after the plan's writes have reached the cache.
func applyAttachPlan(v AttachView, p AttachPlan) AttachView {
	s := v.Svc.DeepCopy()
	replace := func(a *ipamv1.IPAddress, at *ipamv1.AttachmentReference) *ipamv1.IPAddress {
		a = a.DeepCopy()
		a.Status.AttachedTo = at
		return a
	}
	if p.Detach {
		if s.Annotations[AnnotationPinned] == "true" {
			s.Annotations[AnnotationReleasing] = s.Annotations[metallb.AnnotationLoadBalancerIPs]
			delete(s.Annotations, metallb.AnnotationLoadBalancerIPs)
			delete(s.Annotations, AnnotationPinned)
			if DriverKey(s) != "" {
				delete(s.Annotations, metallb.AnnotationAllowSharedIP)
			}
		}
		for i, a := range v.Addrs {
			if a != nil && slices.Contains(v.AttachedHere, a) {
				v.Addrs[i] = replace(a, nil)
			}
		}
		v.AttachedHere = nil
	}
	for i, a := range v.Addrs {
		if slices.Contains(p.Attach, a) {
			v.Addrs[i] = replace(a, &ipamv1.AttachmentReference{Kind: "Service", Namespace: s.Namespace, Name: s.Name, UID: s.UID})
		}
	}
	var holds []*corev1.Service
	for _, h := range v.Holds {
		if !slices.Contains(p.DeleteHolds, h) {
			holds = append(holds, h)
		}
	}
	v.Holds = holds
	if p.Pin != "" {
		s.Annotations[metallb.AnnotationLoadBalancerIPs] = p.Pin
		s.Annotations[AnnotationPinned] = "true"
		if p.Key != "" {
			s.Annotations[metallb.AnnotationAllowSharedIP] = p.Key
		} else if DriverKey(s) != "" {
			delete(s.Annotations, metallb.AnnotationAllowSharedIP)
		}
		delete(s.Annotations, AnnotationReleasing)
	}
	var here []*ipamv1.IPAddress
	for _, a := range v.AttachedHere {
		if !slices.Contains(p.Unattach, a) {
			here = append(here, a)
		}
	}
	v.AttachedHere = here
	v.Svc = s
	// (v.pinned and v.attached stay: only this plan's writes have reached the cache.)
	refreshAttachView(&v)
	return v
}

func FuzzPlanAttach(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{1, 0, 1, 1, 1, 0, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 4, 1, 1},
		{1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1, 0, 1, 1},
		{2, 2, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 2, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0},
		{0, 0, 1, 1, 1, 1, 3, 1, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := fuzzAttachView(data)
		p := PlanAttach(v)
		checkAttachPlan(t, v, p)
		after := applyAttachPlan(v, p)
		again := PlanAttach(after)
		checkAttachPlan(t, after, again)
		if len(again.Attach) > 0 || len(again.DeleteHolds) > 0 || again.Pin != "" || len(again.Unattach) > 0 {
			t.Fatalf("not idempotent: after the plan's writes, planning again writes more:\nfirst:  %s\nsecond: %s", describeAttach(p), describeAttach(again))
		}
	})
}

func describeAttach(p AttachPlan) string {
	var at, un []string
	for _, a := range p.Attach {
		at = append(at, a.Name)
	}
	for _, a := range p.Unattach {
		un = append(un, a.Name)
	}
	return fmt.Sprintf("attach %v deleteHolds %v pin %q unattach %v detach %v requeue %v", at, names(p.DeleteHolds), p.Pin, un, p.Detach, p.Requeue)
}

// Found by FuzzPlanProvision (testdata/fuzz/FuzzPlanProvision/2d5d7479213dc1a4): a placeholder
// relabelled as an address's hold a moment ago, still shown as the claim's provisioning
// placeholder by the cache, left the claim waiting for the family with no re-check; a lost watch
// event stranded it Pending (docs/design.md#nothing-waits-on-an-event-alone).
func TestPlanProvisionRechecksARelabelLeftBehindByTheCache(t *testing.T) {
	const ip = "2001:db8::1"
	p := PlanProvision(pview(stampedClaim(ipamv1.IPv6), func(v *ProvisionView) {
		s := provisioning("claim-uid", ipamv1.IPv6, ip)
		v.Placeholders = []*corev1.Service{s}
		a := testAddress(ip, Finalizer)
		a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: "other", UID: "other-uid"}
		v.Addresses[a.Name] = a
		v.HoldOf[a.Name] = s.Name
	}))
	if len(p.Create)+len(p.Delete)+len(p.ToHold)+len(p.Settle) != 0 {
		t.Fatalf("writes for a relabel the cache has not shown yet: %s", describeProvision(p))
	}
	if p.Requeue <= 0 || p.Requeue > driverkit.MaxRecheck {
		t.Fatalf("the claim still misses IPv6, yet the re-check is %v", p.Requeue)
	}
}

// Found by the chaos test (seed 123529108) and then by FuzzPlanProvision
// (testdata/fuzz/FuzzPlanProvision/ad1a4c1ade67ac01): a gone claim's provisioning placeholder
// that MetalLB gave another claim's address, under the name of a hold of that address deleted a
// moment before (placeholder names are reused), looked like that address's hold "the cache has
// not shown yet": the plan left it alone with no re-check, the claim key never came back, and
// the address reconciler waited for the placeholder to become its hold for good.
func TestPlanProvisionRechecksAGoneClaimsPlaceholder(t *testing.T) {
	const ip = "203.0.113.1"
	p := PlanProvision(pview(nil, func(v *ProvisionView) {
		s := provisioning("claim-uid", ipamv1.IPv4, ip)
		v.Placeholders = []*corev1.Service{s}
		a := testAddress(ip, Finalizer, ipamv1.FinalizerAddress)
		v.Addresses[a.Name] = a
		v.HoldOf[a.Name] = s.Name // the expectation of a hold of that name, now gone
	}))
	if p.Requeue <= 0 || p.Requeue > driverkit.MaxRecheck {
		t.Fatalf("a gone claim's placeholder left with re-check %v: %s", p.Requeue, describeProvision(p))
	}
}
