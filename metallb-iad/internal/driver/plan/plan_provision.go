package plan

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// ProvisionView is what the claim reconciler reads about one claim.
type ProvisionView struct {
	// Claim is nil when it is gone; claimKey is its "namespace/name" either way.
	Claim    *ipamv1.IPAddressClaim
	ClaimKey string
	Class    *ipamv1.IPAddressClass
	// NamespaceLabels are the labels of the claim's namespace (a class may serve only some
	// namespaces).
	NamespaceLabels map[string]string
	// Have are the families the claim already has an address for.
	Have map[ipamv1.IPFamily]bool
	// Placeholders are the provisioning placeholders made for this claim key (any uid).
	Placeholders []*corev1.Service
	// PlaceholderExpected: one was created for the family and is not visible yet.
	PlaceholderExpected map[ipamv1.IPFamily]bool
	// Addresses are the IPAddresses, by name, of the IPs MetalLB gave the placeholders;
	// holdOf names the hold placeholder such an address has, or is getting from this driver's
	// own recent relabel ("" when none).
	Addresses map[string]*ipamv1.IPAddress
	HoldOf    map[string]string
	// NextName is the name a new placeholder of the family gets.
	NextName map[ipamv1.IPFamily]string

	// MayCreate: the provisioning window of the class's pool lets the claim create a new
	// placeholder of the family now (the reconciler granted it a slot, ProvisioningSlots). A
	// family without a slot waits its turn with no placeholder at all.
	MayCreate map[ipamv1.IPFamily]bool
	// Pool is the state of the class's pool per family, as MetalLB counts it.
	Pool map[ipamv1.IPFamily]PoolState

	// FailedAt is when MetalLB last reported AllocationFailed for a placeholder (by uid; looked
	// up only for those MayNudge).
	FailedAt map[types.UID]time.Time
	// MetallbPassed is how far MetalLB has got (metallbProgress).
	MetallbPassed MetallbMark

	Namespace  string
	Now        time.Time
	NudgeAfter time.Duration
}

// ProvisionPlan is what the claim reconciler writes, in this order: retire placeholders the
// claim no longer needs (a served one whose address exists becomes that address's hold);
// create missing placeholders; for a placeholder MetalLB served, create the IPAddress and then,
// in one patch, pin the placeholder and make it the address's hold; nudge the ones MetalLB
// has not served.
type ProvisionPlan struct {
	ToHold []Handover
	Delete []*corev1.Service
	Create []*corev1.Service
	Settle []settlement
	Nudge  []*corev1.Service
	// NudgeStamps is the pool state (AnnotationPoolState) each nudged placeholder records, by
	// name.
	NudgeStamps map[string]string
	// WaitForSlot are the families that need a placeholder and have no slot of the pool's
	// window: the reconciler queues the claim for the pool, and wakes it when a slot frees.
	WaitForSlot []ipamv1.IPFamily
	Requeue     time.Duration
}

// Handover turns a placeholder into the hold of an address.
type Handover struct {
	Svc     *corev1.Service
	Address string
	IP      netip.Addr
	// Key is the hold's sharing key (HoldKey of the address).
	Key string
}

// settlement is a served placeholder whose IPAddress is to be created.
type settlement struct {
	Svc     *corev1.Service
	Address *ipamv1.IPAddress
}

// PlanProvision decides the writes that provision a claim's missing families through
// placeholder Services, and retire the placeholders it no longer needs.
func PlanProvision(v ProvisionView) ProvisionPlan {
	kept := KeptPlaceholders(v)
	p := planRetire(v, kept)
	claim := v.Claim
	if !needsProvisioning(v) {
		if claim != nil && driverkit.NeedsProvisioning(claim, Provisioner) {
			// Waiting for its class (not accepted, being deleted, or not seen yet).
			p.Requeue = driverkit.Recheck(claim.CreationTimestamp.Time, v.Now, time.Second)
		}
		return p
	}
	for _, fam := range driverkit.MissingFamilies(claim, v.Have) {
		s := kept[fam]
		if s == nil {
			switch {
			case v.PlaceholderExpected[fam]:
				p.Requeue = driverkit.Sooner(p.Requeue, time.Second)
			case !v.MayCreate[fam]:
				// The pool's window is full: the claim waits its turn with no placeholder, woken
				// when a slot frees, and looked at again now and then meanwhile (reads only).
				p.WaitForSlot = append(p.WaitForSlot, fam)
				p.Requeue = driverkit.Sooner(p.Requeue, driverkit.MaxRecheck)
			default:
				p.Create = append(p.Create, ProvisioningService(v.Namespace, v.NextName[fam], claim, fam, ParseClassParams(v.Class).Pool, v.Pool[fam].Stamp))
				p.Requeue = driverkit.Sooner(p.Requeue, v.NudgeAfter)
			}
			continue
		}
		ip, ok := ServedIP(s, fam)
		if !ok {
			nudge, wait := provisioningNudgeDue(v, s, fam)
			if nudge {
				p.Nudge = append(p.Nudge, s)
				if p.NudgeStamps == nil {
					p.NudgeStamps = map[string]string{}
				}
				p.NudgeStamps[s.Name] = v.Pool[fam].Stamp
			}
			p.Requeue = driverkit.Sooner(p.Requeue, wait)
			continue
		}
		p = p.settle(v, s, ip)
	}
	return p
}

// CreatesFor are the families for which PlanProvision creates a placeholder when the pool's
// window has a slot: those the claim still misses with no placeholder kept or expected. The
// reconciler asks the window for a slot for each, before it plans.
func CreatesFor(v ProvisionView) []ipamv1.IPFamily {
	if !needsProvisioning(v) {
		return nil
	}
	kept := KeptPlaceholders(v)
	var out []ipamv1.IPFamily
	for _, fam := range driverkit.MissingFamilies(v.Claim, v.Have) {
		if kept[fam] == nil && !v.PlaceholderExpected[fam] {
			out = append(out, fam)
		}
	}
	return out
}

// provisioningNudgeDue decides whether a placeholder MetalLB has not served is nudged now, and
// when to look again. MetalLB does not retry an allocation it refused, so a nudge is what makes
// it try again. Nothing is nudged while MetalLB counts the pool full: a claim waiting on a full
// pool costs no periodic write, and the window brings it back when the pool's state changes. A
// placeholder MetalLB refused in an earlier state of the pool, which has room now, is nudged at
// once, recording the new state (the stamp never repeats, so no later state looks like the one
// it was refused in). Otherwise, while the pool has room (or MetalLB counts nothing), the general
// rule decides (nudgeDue: after a refusal, or after a silence that tells of a lost report), with
// its back-off: a count that lags MetalLB's own view is asked again now and then, never left for
// good; and since the window keeps no more placeholders waiting than MetalLB counts free, those
// writes stay bounded per pool, whatever the number of waiting claims.
func provisioningNudgeDue(v ProvisionView, s *corev1.Service, fam ipamv1.IPFamily) (bool, time.Duration) {
	st := v.Pool[fam]
	if st.Full {
		return false, driverkit.MaxRecheck
	}
	if PoolMovedOn(s, st) && refusedSinceTouch(s, v.FailedAt[s.UID]) {
		return true, nudgeEvery(s, v.Now, v.NudgeAfter)
	}
	return nudgeDue(s, v.Now, v.NudgeAfter, v.FailedAt[s.UID], v.MetallbPassed)
}

// refusedSinceTouch: MetalLB's last refusal (failedAt) came after the placeholder was created or
// last nudged (event times have a resolution of a second).
func refusedSinceTouch(s *corev1.Service, failedAt time.Time) bool {
	return !failedAt.IsZero() && !failedAt.Before(LastTouch(s).Truncate(time.Second))
}

// planRetire decides the placeholders the claim does not need (any more), all but kept: a served
// placeholder whose address exists becomes its hold (a crash between creating the address and
// relabelling); any other goes, returning its address to the pool.
func planRetire(v ProvisionView, kept map[ipamv1.IPFamily]*corev1.Service) ProvisionPlan {
	var p ProvisionPlan
	for _, s := range sortedByName(v.Placeholders) {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		if kept[fam] == s {
			continue
		}
		if ip, ok := ServedIP(s, fam); ok {
			if a := v.Addresses[ipamv1.AddressName(ip)]; a != nil && !driverkit.TeardownMayStart(a) {
				switch v.HoldOf[a.Name] {
				case s.Name:
					// It is that address's hold already; the cache is behind. Look again soon: if
					// the relabel never shows (the name was a hold's that is gone since), nothing
					// else brings this claim key back
					// (docs/design.md#nothing-waits-on-an-event-alone).
					p.Requeue = driverkit.Sooner(p.Requeue, time.Second)
					continue
				case "":
					p.ToHold = append(p.ToHold, Handover{Svc: s, Address: a.Name, IP: ip, Key: HoldKey(a)})
					continue
				}
			}
		}
		p.Delete = append(p.Delete, s)
	}
	return p
}

// settle returns the plan with the kept placeholder s that MetalLB served ip settled: its
// IPAddress created, or the placeholder made the hold of an address that has none, or retired,
// or kept until the IP's old address is gone.
func (p ProvisionPlan) settle(v ProvisionView, s *corev1.Service, ip netip.Addr) ProvisionPlan {
	name := ipamv1.AddressName(ip)
	a := v.Addresses[name]
	switch {
	case a == nil:
		p.Settle = append(p.Settle, settlement{Svc: s, Address: driverkit.MarkAutoClaim(driverkit.PreBoundAddress(ip, v.Class, v.Claim, Finalizer), v.Claim)})
	case v.HoldOf[name] == s.Name:
		// Relabelled as the address's hold a moment ago; the cache is behind. Look again soon:
		// the claim still misses the family (docs/design.md#nothing-waits-on-an-event-alone).
		p.Requeue = driverkit.Sooner(p.Requeue, time.Second)
	case driverkit.TeardownMayStart(a):
		// The IP's address is being torn down: never relabel a placeholder as its hold. MetalLB
		// gave the IP to this claim's placeholder, so the claim keeps it: the teardown deletes
		// the address's holds and its finalizer in one pass, and the pass after that creates the
		// claim's own address for the IP. Deleting the placeholder instead would give the IP to
		// whichever waiting claim MetalLB serves next, not to the one whose turn it is. (One an
		// admin deleted that the core still protects is held as before.) While the address has
		// this driver's finalizer its teardown is this driver's next pass: look again in a
		// second. Without it the address stays for another finalizer: back off from when the
		// address was deleted.
		wait := time.Second
		if !slices.Contains(a.Finalizers, Finalizer) {
			wait = driverkit.Recheck(a.DeletionTimestamp.Time, v.Now, time.Second)
		}
		p.Requeue = driverkit.Sooner(p.Requeue, wait)
	case driverkit.BoundTo(a, v.Claim) || v.HoldOf[name] == "":
		// Created by an earlier pass (relabel left undone), or another claim's address that
		// has no hold: the placeholder becomes its hold (and the claim gets a fresh one).
		p.ToHold = append(p.ToHold, Handover{Svc: s, Address: name, IP: ip, Key: HoldKey(a)})
	default:
		p.Delete = append(p.Delete, s)
	}
	return p
}

// needsProvisioning: the claim asks this driver for an address of an accepted class, the one it
// resolved to, that serves the claim's namespace and every family it asks for. (The core refuses
// the others and takes their stamp back; until it has, a stamp provisions nothing: a family the
// pool cannot serve would wait for ever, and half a Dual claim would hold an address for a claim
// that can never be Bound.)
func needsProvisioning(v ProvisionView) bool {
	return v.Claim != nil && driverkit.NeedsProvisioning(v.Claim, Provisioner) && driverkit.ClassProvisions(v.Class, Provisioner) &&
		v.Class.Name == driverkit.ClaimClass(v.Claim) && ClassServesClaim(v.Class, v.Claim, v.NamespaceLabels)
}

// ClassServesClaim: the class serves the claim's namespace and every family it asks for, by what
// the class says (its namespaceSelector) and what this driver reported (status.families,
// status.servedNamespaces).
func ClassServesClaim(class *ipamv1.IPAddressClass, claim *ipamv1.IPAddressClaim, nsLabels map[string]string) bool {
	return len(driverkit.UnservedFamilies(class, claim)) == 0 &&
		driverkit.RefusesNamespace(class, claim.Namespace, nsLabels) == driverkit.NamespaceAdmitted
}

// KeptPlaceholders are the placeholders that go on provisioning the claim's missing families:
// per family, the first by name made for this claim that asks the class's pool (one made for
// another class, the claim's resolution having changed under it, would settle an address outside
// the class's pool). Every other placeholder is retired (PlanProvision).
func KeptPlaceholders(v ProvisionView) map[ipamv1.IPFamily]*corev1.Service {
	kept := map[ipamv1.IPFamily]*corev1.Service{}
	if !needsProvisioning(v) {
		return kept
	}
	for _, s := range sortedByName(v.Placeholders) {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		if s.Labels[LabelClaimUID] == string(v.Claim.UID) && !v.Have[fam] &&
			slices.Contains(v.Claim.Spec.Family.Families(), fam) && kept[fam] == nil &&
			s.Annotations[metallb.AnnotationAddressPool] == ParseClassParams(v.Class).Pool {
			kept[fam] = s
		}
	}
	return kept
}

// ServedIP is the IP of the family MetalLB gave a placeholder.
func ServedIP(s *corev1.Service, fam ipamv1.IPFamily) (netip.Addr, bool) {
	for _, ip := range IngressIPs(s) {
		if fam == "" || ipamv1.FamilyOf(ip) == fam {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func sortedByName(s []*corev1.Service) []*corev1.Service {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	return out
}
