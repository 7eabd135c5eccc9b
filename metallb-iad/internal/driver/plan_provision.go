package driver

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// provisionView is what the claim reconciler reads about one claim.
type provisionView struct {
	// claim is nil when it is gone; claimKey is its "namespace/name" either way.
	claim    *ipamv1.IPAddressClaim
	claimKey string
	class    *ipamv1.IPAddressClass
	// have are the families the claim already has an address for.
	have map[ipamv1.IPFamily]bool
	// placeholders are the provisioning placeholders made for this claim key (any uid).
	placeholders []*corev1.Service
	// placeholderExpected: one was created for the family and is not visible yet.
	placeholderExpected map[ipamv1.IPFamily]bool
	// addresses are the IPAddresses, by name, of the IPs MetalLB gave the placeholders;
	// holdOf names the hold placeholder such an address has, or is getting from this driver's
	// own recent relabel ("" when none).
	addresses map[string]*ipamv1.IPAddress
	holdOf    map[string]string
	// nextName is the name a new placeholder of the family gets.
	nextName map[ipamv1.IPFamily]string

	// failedAt is when MetalLB last reported AllocationFailed for a placeholder (by uid; looked
	// up only for those mayNudge).
	failedAt map[types.UID]time.Time
	// metallbPassed is how far MetalLB has got (metallbProgress).
	metallbPassed metallbMark

	namespace  string
	now        time.Time
	nudgeAfter time.Duration
}

// provisionPlan is what the claim reconciler writes, in this order: retire placeholders the
// claim no longer needs (a served one whose address exists becomes that address's hold);
// create missing placeholders; for a placeholder MetalLB served, create the IPAddress and then,
// in one patch, pin the placeholder and make it the address's hold; nudge the ones MetalLB
// has not served.
type provisionPlan struct {
	toHold  []handover
	delete  []*corev1.Service
	create  []*corev1.Service
	settle  []settlement
	nudge   []*corev1.Service
	requeue time.Duration
}

// handover turns a placeholder into the hold of an address.
type handover struct {
	svc     *corev1.Service
	address string
	ip      netip.Addr
}

// settlement is a served placeholder whose IPAddress is to be created.
type settlement struct {
	svc     *corev1.Service
	address *ipamv1.IPAddress
}

// planProvision decides the writes that provision a claim's missing families through
// placeholder Services, and retire the placeholders it no longer needs.
func planProvision(v provisionView) provisionPlan {
	var p provisionPlan
	claim := v.claim
	needs := needsProvisioning(v)
	kept := keptPlaceholders(v)
	for _, s := range sortedByName(v.placeholders) {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		if kept[fam] == s {
			continue
		}
		// Not needed (any more): a served placeholder whose address exists becomes its hold
		// (a crash between creating the address and relabelling); any other goes, returning its
		// address to the pool.
		if ip, ok := servedIP(s, fam); ok {
			if a := v.addresses[ipamv1.AddressName(ip)]; a != nil && !driverkit.TeardownMayStart(a) {
				switch v.holdOf[a.Name] {
				case s.Name:
					// It is that address's hold already; the cache is behind. Look again soon: if
					// the relabel never shows (the name was a hold's that is gone since), nothing
					// else brings this claim key back
					// (docs/design.md#nothing-waits-on-an-event-alone).
					p.requeue = driverkit.Sooner(p.requeue, time.Second)
					continue
				case "":
					p.toHold = append(p.toHold, handover{svc: s, address: a.Name, ip: ip})
					continue
				}
			}
		}
		p.delete = append(p.delete, s)
	}
	if !needs {
		if claim != nil && driverkit.NeedsProvisioning(claim, Provisioner) {
			// Waiting for its class (not accepted, being deleted, or not seen yet).
			p.requeue = driverkit.Recheck(claim.CreationTimestamp.Time, v.now, time.Second)
		}
		return p
	}
	for _, fam := range driverkit.MissingFamilies(claim, v.have) {
		s := kept[fam]
		if s == nil {
			if v.placeholderExpected[fam] {
				p.requeue = driverkit.Sooner(p.requeue, time.Second)
				continue
			}
			p.create = append(p.create, ProvisioningService(v.namespace, v.nextName[fam], claim, fam, v.class.Spec.Parameters[ClassParameterPool]))
			p.requeue = driverkit.Sooner(p.requeue, v.nudgeAfter)
			continue
		}
		ip, ok := servedIP(s, fam)
		if !ok {
			nudge, wait := nudgeDue(s, v.now, v.nudgeAfter, v.failedAt[s.UID], v.metallbPassed)
			if nudge {
				p.nudge = append(p.nudge, s)
			}
			p.requeue = driverkit.Sooner(p.requeue, wait)
			continue
		}
		name := ipamv1.AddressName(ip)
		a := v.addresses[name]
		switch {
		case a == nil:
			p.settle = append(p.settle, settlement{svc: s, address: driverkit.MarkAutoClaim(driverkit.PreBoundAddress(ip, v.class, claim, Finalizer), claim)})
		case v.holdOf[name] == s.Name:
			// Relabelled as the address's hold a moment ago; the cache is behind. Look again soon:
			// the claim still misses the family (docs/design.md#nothing-waits-on-an-event-alone).
			p.requeue = driverkit.Sooner(p.requeue, time.Second)
		case driverkit.TeardownMayStart(a):
			// The IP's address is being torn down: never relabel a placeholder as its hold. The
			// placeholder goes; the claim gets a fresh one. (One an admin deleted that the core
			// still protects is held as before.)
			p.delete = append(p.delete, s)
		case driverkit.BoundTo(a, claim) || v.holdOf[name] == "":
			// Created by an earlier pass (relabel left undone), or another claim's address that
			// has no hold: the placeholder becomes its hold (and the claim gets a fresh one).
			p.toHold = append(p.toHold, handover{svc: s, address: name, ip: ip})
		default:
			p.delete = append(p.delete, s)
		}
	}
	return p
}

// needsProvisioning: the claim asks this driver for an address of an accepted class, the one it
// resolved to.
func needsProvisioning(v provisionView) bool {
	return v.claim != nil && driverkit.NeedsProvisioning(v.claim, Provisioner) && driverkit.ClassProvisions(v.class, Provisioner) &&
		v.class.Name == driverkit.ClaimClass(v.claim)
}

// keptPlaceholders are the placeholders that go on provisioning the claim's missing families:
// per family, the first by name made for this claim that asks the class's pool (one made for
// another class, the claim's resolution having changed under it, would settle an address outside
// the class's pool). Every other placeholder is retired (planProvision).
func keptPlaceholders(v provisionView) map[ipamv1.IPFamily]*corev1.Service {
	kept := map[ipamv1.IPFamily]*corev1.Service{}
	if !needsProvisioning(v) {
		return kept
	}
	for _, s := range sortedByName(v.placeholders) {
		fam := ipamv1.IPFamily(s.Labels[LabelFamily])
		if s.Labels[LabelClaimUID] == string(v.claim.UID) && !v.have[fam] &&
			slices.Contains(v.claim.Spec.Family.Families(), fam) && kept[fam] == nil &&
			s.Annotations[metallb.AnnotationAddressPool] == v.class.Spec.Parameters[ClassParameterPool] {
			kept[fam] = s
		}
	}
	return kept
}

// servedIP is the IP of the family MetalLB gave a placeholder.
func servedIP(s *corev1.Service, fam ipamv1.IPFamily) (netip.Addr, bool) {
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

// ProvisioningService is the placeholder that asks MetalLB for an address of the class's pool
// for one family of a claim.
func ProvisioningService(namespace, name string, claim *ipamv1.IPAddressClaim, fam ipamv1.IPFamily, pool string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{ipamv1.LabelDriverService: Provisioner,
				LabelRole: RoleProvisioning, LabelClaimUID: string(claim.UID), LabelFamily: string(fam)},
			Annotations: map[string]string{
				metallb.AnnotationAddressPool: pool,
				AnnotationClaim:               claim.Namespace + "/" + claim.Name,
			},
		},
		Spec: PlaceholderSpec(fam),
	}
}
