package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Reasons of the events the driver says about tenant Services.
const (
	ReasonClaimNotReady      = "ClaimNotReady"
	ReasonFamilyMismatch     = "FamilyMismatch"
	ReasonForeignPin         = "ForeignPin"
	ReasonClaimInUse         = "ClaimInUse"
	ReasonAddressNotServable = "AddressNotServable"
	// ReasonReservedAddressRequested: a Service that names no claim requests (an admin's pin,
	// spec.loadBalancerIP) an IP reserved as an IPAddress of this driver. MetalLB refuses it
	// while the reservation holds the IP; in a tenant namespace the chart's hand-over-events
	// policy keeps MetalLB's own report of that off the Service, so the driver says it.
	ReasonReservedAddressRequested = "ReservedAddressRequested"
	// ReasonForeignLoadBalancerClass: the Service names a claim but another load-balancer
	// implementation (spec.loadBalancerClass), which MetalLB leaves alone.
	ReasonForeignLoadBalancerClass = "ForeignLoadBalancerClass"
	// ReasonPoolExcludesService: the Service names a claim whose pool's spec.serviceAllocation
	// does not admit it, so MetalLB would refuse it the address.
	ReasonPoolExcludesService = "PoolExcludesService"
)

// serviceReasons are the lasting conditions said about a Service; an attach clears them all.
var serviceReasons = []string{ReasonClaimNotReady, ReasonFamilyMismatch, ReasonForeignPin, ReasonClaimInUse, ReasonAddressNotServable,
	ReasonReservedAddressRequested, ReasonForeignLoadBalancerClass, ReasonPoolExcludesService}

// AttachView is what the Service reconciler reads about one Service.
type AttachView struct {
	Svc *corev1.Service
	// Placeholder: the Service is one of the driver's own.
	Placeholder bool
	// Claim is the claim the Service links to (any phase), nil when none; why says what stands
	// in the way when the Service names a claim that does not exist.
	Claim *ipamv1.IPAddressClaim
	Why   string
	// Addrs are the claim's addresses as its status lists them (nil: not in the cache yet), and
	// servable says whether each one's class is this driver's.
	Addrs    []*ipamv1.IPAddress
	Servable map[string]bool
	// Excluded says, per address of the claim, why its pool's spec.serviceAllocation does not
	// admit the Service (AllocationExcludes); absent when it does.
	Excluded map[string]string
	// Elsewhere says, per address of the claim attached to another Service, whether that
	// Service still exists.
	Elsewhere map[string]bool
	// AttachedHere are the addresses whose AttachedTo names this Service.
	AttachedHere []*ipamv1.IPAddress
	// Holds are the hold placeholders of the claim's addresses.
	Holds []*corev1.Service
	// Pinned is the pin this driver wrote on the Service a moment ago and attached the
	// addresses it recorded AttachedTo on, while the cache does not show them yet.
	Pinned   string
	Attached map[string]bool
	// Park: the Service should be parked while it has no pin of this driver (ParkingWanted).
	Park bool
	// Reserved are the addresses of this driver whose IP the Service requests by other means
	// than a claim (RequestedIPs) and is not attached to.
	Reserved []*ipamv1.IPAddress
	Now      time.Time
}

// AttachPlan is what the Service reconciler writes, in this crash-safe order: record AttachedTo
// on the claim's addresses (the optimistic lock lets one Service win), delete the holds the
// Service cannot share the IP with, pin the Service; then end the attachments it no longer has (a re-link). Or, on detach: unpin the
// Service and clear AttachedTo on its addresses.
type AttachPlan struct {
	Attach      []*ipamv1.IPAddress
	DeleteHolds []*corev1.Service
	Pin         string
	// Key is the sharing key the pin carries ("" for none; plan/sharing.go).
	Key      string
	Unattach []*ipamv1.IPAddress
	Detach   bool
	// Park and unpark add or remove the parking annotation (parking.go): in the unpin's patch
	// when there is one, else in a patch of their own.
	Park, unpark bool
	// Parked is the parked state wanted once the pass is done (nil: leave it as it is).
	Parked *bool
	Events []Event
	// Clear are the lasting-condition reasons no longer true of the Service.
	Clear   []string
	Requeue time.Duration
}

// pendingWarnAfter is how long a Service and its claim may be new before a claim that is not
// Bound is warned about (ClaimNotReady).
const pendingWarnAfter = 15 * time.Second

// PlanAttach applies the link rule's outcome to a Service: attach it to its Bound claim's
// addresses, keep it while the claim is Lost, or detach it; a Service detached (or never
// attached) is parked or unparked as ParkingWanted says.
func PlanAttach(v AttachView) AttachPlan {
	p := planAttachment(v)
	if v.Claim == nil && v.Why == "" && v.Park && p.Requeue == 0 {
		// Parked for an auto-claim the core has not made yet: the claim's event brings it back,
		// and a re-check makes sure of it (docs/design.md#nothing-waits-on-an-event-alone).
		p.Requeue = driverkit.Recheck(v.Svc.CreationTimestamp.Time, v.Now, time.Second)
	}
	if p.Detach && p.Pin == "" && !parkingUntouched(v.Svc) {
		// Decided against the Service as the pass read it; applied against the Service as
		// written (the unpin may read a fresher one): p.parked is the state wanted.
		parked := autoclaim.Parked(v.Svc)
		p.Park = v.Park && !parked
		p.unpark = !v.Park && parked
		p.Parked = &v.Park
	}
	return p
}

// planAttachment decides the attachment of a Service that is not one of the driver's own: none
// while the link rule's outcome stands in the way (planUnattachable), else the claim's addresses.
func planAttachment(v AttachView) AttachPlan {
	if v.Placeholder {
		return AttachPlan{}
	}
	if p, done := planUnattachable(v); done {
		return p
	}
	return planAttachAddresses(v)
}

// said returns the plan with a Warning about the Service, said once while it lasts; every other
// lasting condition is cleared.
func (p AttachPlan) said(svc *corev1.Service, reason, msg string, names ...any) AttachPlan {
	p.Events = append(p.Events, Event{Obj: svc, Warning: true, Reason: reason, Message: msg, Once: true, Names: names})
	p.Clear = slices.DeleteFunc(slices.Clone(serviceReasons), func(r string) bool { return r == reason })
	return p
}

// waiting returns the plan with a re-check backing off from the Service's creation.
func (p AttachPlan) waiting(v AttachView) AttachPlan {
	p.Requeue = driverkit.Recheck(v.Svc.CreationTimestamp.Time, v.Now, time.Second)
	return p
}

// planUnattachable decides a Service that gets no address from a claim now: not a LoadBalancer,
// no claim, another load-balancer class, a claim Lost or not Bound yet, or families that do not
// fit. done is false when none stands in the way.
func planUnattachable(v AttachView) (p AttachPlan, done bool) {
	svc := v.Svc
	lb := svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil
	claim := v.Claim
	switch {
	case !lb || claim == nil:
		switch {
		case lb && v.Why != "":
			p = p.said(svc, ReasonClaimNotReady, v.Why+"; the Service gets its address once the claim is Bound").waiting(v)
		case lb && len(v.Reserved) > 0:
			p = p.said(svc, ReasonReservedAddressRequested, reservedRequestedMessage(svc, v.Reserved), "reservedFor", reservedFor(v.Reserved))
		default:
			p.Clear = serviceReasons
		}
		p.Detach = true
		return p, true
	case ForeignClass(svc):
		// MetalLB never serves it: attaching would delete the hold and leave the IP free in
		// MetalLB for anyone. The address stays held. (The class cannot change while the Service
		// stays a LoadBalancer, so there is nothing to wait for; a Service attached before this
		// rule existed is detached, and its address held again.)
		p = p.said(svc, ReasonForeignLoadBalancerClass, fmt.Sprintf("spec.loadBalancerClass %q gives the Service to another load-balancer implementation, not MetalLB, "+
			"so it cannot use claim %s's addresses, which stay reserved; use a Service without spec.loadBalancerClass", *svc.Spec.LoadBalancerClass, claim.Name))
		p.Detach = true
		return p, true
	case claim.Status.Phase == ipamv1.ClaimLost:
		return planLostClaim(v), true
	case claim.Status.Phase != ipamv1.ClaimBound:
		// A claim made with (or for) the Service is Pending for a moment on the normal path (an
		// auto-claim always is): said only once the wait outlasts pendingWarnAfter.
		since := svc.CreationTimestamp.Time
		if claim.CreationTimestamp.After(since) {
			since = claim.CreationTimestamp.Time
		}
		if quiet := since.Add(pendingWarnAfter).Sub(v.Now); quiet > 0 {
			p.Requeue = min(quiet, pendingWarnAfter) // (another clock's timestamps)
		} else {
			p = p.said(svc, ReasonClaimNotReady, fmt.Sprintf("IPAddressClaim %s/%s is %s, not Bound yet; the Service gets its address once the claim is Bound",
				claim.Namespace, claim.Name, orPending(claim.Status.Phase))).waiting(v)
		}
		p.Detach = true
		return p, true
	case !FamiliesFit(svc, claim.Spec.Family):
		p = p.said(svc, ReasonFamilyMismatch, fmt.Sprintf("the Service's IP families %v do not match claim %s (%s); set spec.ipFamilies and spec.ipFamilyPolicy to match",
			svc.Spec.IPFamilies, claim.Name, claim.Spec.Family))
		p.Detach = true
		return p, true
	}
	return AttachPlan{}, false
}

// planLostClaim decides a Service that links to a Lost claim.
func planLostClaim(v AttachView) AttachPlan {
	var p AttachPlan
	claim := v.Claim
	// A Service attached to the Lost claim's addresses keeps its pin: the tenant decides. Only
	// those: a Service re-linked to a Lost claim from another one does not keep the other
	// claim's pin (docs/design.md#attach-detach-and-re-link: it ends with the new claim's
	// addresses only). (Not one the core let go of: its teardown waits for this Service's
	// detach.)
	if slices.ContainsFunc(v.AttachedHere, func(a *ipamv1.IPAddress) bool { return ownAddress(claim, a) && !driverkit.TeardownMayStart(a) }) {
		for _, a := range v.AttachedHere {
			if !ownAddress(claim, a) {
				p.Unattach = append(p.Unattach, a)
			}
		}
		return p
	}
	p = p.said(v.Svc, ReasonClaimNotReady, fmt.Sprintf("IPAddressClaim %s/%s is Lost; the Service gets no address from it", claim.Namespace, claim.Name)).waiting(v)
	p.Detach = true
	return p
}

// planAttachAddresses attaches the Service to its Bound claim's addresses once each one agrees:
// record AttachedTo, delete the holds it cannot share with, pin; the attachments it no longer has end (a re-link).
func planAttachAddresses(v AttachView) AttachPlan {
	svc, claim := v.Svc, v.Claim
	want := PinValue(claim.Status.Addresses)
	wantIPs := ParseIPList(want)
	if foreign := ForeignPins(svc); len(foreign) > 0 {
		// An admin pinned exactly the claim's addresses by hand: adopt the pin (the Service keeps
		// its address throughout). Anything else is not ours to overwrite.
		if !(len(foreign) == 1 && foreign[0] == metallb.AnnotationLoadBalancerIPs && SameIPs(PinIPs(svc), wantIPs)) {
			return AttachPlan{}.said(svc, ReasonForeignPin, fmt.Sprintf("the Service already requests addresses through %s; remove it to use claim %s",
				strings.Join(foreign, ", "), claim.Name))
		}
	}
	if p, ok := planAddressesAgree(v); !ok {
		return p
	}
	p := AttachPlan{Clear: serviceReasons}
	for _, a := range v.Addrs {
		if at := a.Status.AttachedTo; (at == nil || !AttachedTo(at, svc) || at.UID != svc.UID) && !v.Attached[a.Name] {
			p.Attach = append(p.Attach, a)
		}
	}
	_, releasingLeft := svc.Annotations[AnnotationReleasing]
	// A parked Service (autoclaim.ParkingPool) is unparked by the pin: MetalLB refuses a pin
	// together with another pool.
	if (!SameIPs(PinIPs(svc), wantIPs) || svc.Annotations[AnnotationPinned] != "true" || releasingLeft || autoclaim.Parked(svc)) && v.Pinned != want {
		p.Pin = want
		p.Key = pinKey(svc, claim)
	}
	// The holds stay while the Service shares their IP (plan/sharing.go); the others go before
	// the pin, as MetalLB gives the Service the IP only once they have let go of it. (A pin
	// written a moment ago that the cache does not show yet carried the key pinKey says.)
	key := DriverKey(svc)
	if p.Pin != "" || v.Pinned == want {
		key = pinKey(svc, claim)
	}
	for _, h := range v.Holds {
		if !Shares(svc, key, h) {
			p.DeleteHolds = append(p.DeleteHolds, h)
		}
	}
	for _, a := range v.AttachedHere {
		if !slices.ContainsFunc(v.Addrs, func(x *ipamv1.IPAddress) bool { return x.Name == a.Name }) {
			p.Unattach = append(p.Unattach, a) // re-link: the Service moved to another claim
		}
	}
	return p
}

// pinKey is the sharing key a pin of the claim's addresses carries on the Service: the claim's,
// unless the Service cannot share its IP with a hold.
func pinKey(svc *corev1.Service, claim *ipamv1.IPAddressClaim) string {
	if CannotShare(svc) != "" {
		return ""
	}
	return SharingKey(claim.UID)
}

// planAddressesAgree checks the claim's addresses before the Service gets them: the claim's
// status is the core's word; each address must agree (bound to this claim, of a class of this
// driver, admitting the Service, not attached to another Service). ok is false with the plan of
// the first that does not.
func planAddressesAgree(v AttachView) (p AttachPlan, ok bool) {
	svc, claim := v.Svc, v.Claim
	for i, a := range v.Addrs {
		if a == nil {
			return p.waiting(v), false // the cache has not shown the address yet
		}
		// An address an admin deleted stays the claim's while the core protects it: it attaches
		// as before; only one the core let go of is not servable.
		if !driverkit.BoundTo(a, claim) || !v.Servable[a.Name] || driverkit.TeardownMayStart(a) {
			p = p.said(svc, ReasonAddressNotServable, fmt.Sprintf("IPAddress %s listed by claim %s is not bound to it or not served by this driver",
				claim.Status.Addresses[i].Name, claim.Name)).waiting(v)
			// A Service attached to it lets go: the address's teardown waits for this detach
			// (the Service reconciler alone unpins).
			p.Detach = slices.ContainsFunc(v.AttachedHere, func(x *ipamv1.IPAddress) bool { return x.Name == a.Name })
			return p, false
		}
		if why := v.Excluded[a.Name]; why != "" {
			// MetalLB would refuse the Service the address: the address stays held. The pool or
			// the namespace's labels may change without an event of this Service: a re-check.
			p = p.said(svc, ReasonPoolExcludesService, fmt.Sprintf("%s; MetalLB would not give it claim %s's address %s, which stays reserved",
				why, claim.Name, a.Spec.Address)).waiting(v)
			p.Detach = true
			return p, false
		}
		if at := a.Status.AttachedTo; at != nil && !AttachedTo(at, svc) {
			if at.Namespace == svc.Namespace && at.Name == svc.Name {
				continue // an earlier Service of the same name, gone: this one takes over
			}
			if !v.Elsewhere[a.Name] {
				return p.waiting(v), false // the other Service is gone; the address's pass ends its attachment first
			}
			// A tenant reads this: a Service of another namespace is not named (the address's
			// AttachedTo, and the log, name it for an admin).
			user := "a Service of another namespace (IPAddress " + a.Name + " names it)"
			if at.Namespace == svc.Namespace {
				user = "Service " + at.Namespace + "/" + at.Name
			}
			p = p.said(svc, ReasonClaimInUse, fmt.Sprintf("claim %s is already used by %s; a claim serves one Service", claim.Name, user),
				"attachedTo", at.Namespace+"/"+at.Name, "address", a.Name).waiting(v)
			p.Detach = true
			return p, false
		}
	}
	return p, true
}

// ownAddress reports whether the claim's status lists the address.
func ownAddress(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) bool {
	return slices.ContainsFunc(claim.Status.Addresses, func(ca ipamv1.ClaimedAddress) bool { return ca.Name == a.Name })
}

// AttachedTo reports whether an attachment names the Service (namespace, name, and uid unless
// not recorded); no attachment (nil) names none.
func AttachedTo(at *ipamv1.AttachmentReference, svc *corev1.Service) bool {
	return at != nil && at.Namespace == svc.Namespace && at.Name == svc.Name && (at.UID == "" || at.UID == svc.UID)
}

func orPending(p ipamv1.ClaimPhase) string {
	if p == "" {
		return string(ipamv1.ClaimPending)
	}
	return string(p)
}

// reservedRequestedMessage says which reserved IPs a Service requests, and what to do instead.
// A tenant reads it: a claim of the Service's own namespace is named (the one to name instead),
// a claim of another namespace is not (reservedFor names it in the log).
func reservedRequestedMessage(svc *corev1.Service, reserved []*ipamv1.IPAddress) string {
	var parts []string
	for _, a := range reserved {
		who := "no claim"
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == svc.Namespace {
			who = "IPAddressClaim " + ref.Namespace + "/" + ref.Name
		} else if ref != nil {
			who = "a claim of another namespace"
		}
		parts = append(parts, fmt.Sprintf("%s (IPAddress %s, reserved for %s)", a.Spec.Address, a.Name, who))
	}
	return fmt.Sprintf("the Service requests %s; MetalLB does not assign a reserved address to a Service that does not name its claim. "+
		"Name the claim with annotation %s (in the claim's namespace) or request another address",
		strings.Join(parts, ", "), ipamv1.AnnotationServiceClaim)
}

// reservedFor names, for the log, the claims the requested addresses are reserved for.
func reservedFor(reserved []*ipamv1.IPAddress) []string {
	out := make([]string, 0, len(reserved))
	for _, a := range reserved {
		if ref := a.Spec.ClaimRef; ref != nil {
			out = append(out, a.Name+"="+ref.Namespace+"/"+ref.Name)
		}
	}
	return out
}
