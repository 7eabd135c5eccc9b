package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Reasons of the driver's address conditions and events.
const (
	ReasonHeld              = "Held"
	ReasonAttached          = "Attached"
	ReasonAdopting          = "Adopting"
	ReasonWaitingForMetalLB = "WaitingForMetalLB"
	ReasonReleasing         = "Releasing"
	ReasonLost              = "Lost"
	ReasonNoConflict        = "NoConflict"
	ReasonHeldByOther       = "HeldByOtherService"
	ReasonConflictResolved  = "ConflictResolved"
	ReasonServiceConflict   = "ReservedAddressConflict"
	ReasonDetached          = "Detached"
	ReasonServable          = "Servable"
	// ReasonStaleIngressCleared: a MetalLB Service that requests no address showed a reserved
	// one (an allocation MetalLB kept); the driver cleared its load-balancer status.
	ReasonStaleIngressCleared = "StaleAddressCleared"

	// Reasons of Lost=True.
	// (with ReasonPoolNotSet and ReasonPoolNotFound of class.go)
	ReasonOutsidePool = "OutsidePool"
)

// AddressView is what the address reconciler reads about one IPAddress.
type AddressView struct {
	Addr *ipamv1.IPAddress
	IP   netip.Addr
	// Class is the address's class (nil when missing); pool the MetalLB pool it names (nil
	// when missing).
	Class *ipamv1.IPAddressClass
	Pool  *metallb.IPAddressPool
	// Holds are the hold placeholders labelled with this address.
	Holds []*corev1.Service
	// HoldExpected: this driver created a hold the cache does not show yet.
	HoldExpected bool
	// Attached is the Service status.AttachedTo names, when it still exists (same uid);
	// attachedGone says AttachedTo names a Service that is gone or was replaced.
	Attached     *corev1.Service
	AttachedGone bool
	// Holders are the other Services whose load-balancer ingress or spec.externalIPs include
	// the IP.
	Holders []Holder

	// Cleared are the times this driver cleared a holder's stale ingress of this IP, by the
	// holder's uid (the last clearLimit, within clearMemoryFor).
	Cleared map[types.UID][]time.Time

	// FailedAt is when MetalLB last reported AllocationFailed for a hold (by uid; looked up only
	// for those MayNudge).
	FailedAt map[types.UID]time.Time
	// KeptBy are the Services outside the driver's namespace ("ns/name") that MetalLB's latest
	// reports say use the IP and that have been gone for KeptGrace (KeptVerdict); keptRecheck is
	// when the next named one is due (zero: none); reported: some report was read at all (an
	// Event MetalLB wrote more than an hour ago is gone).
	KeptBy      []string
	KeptRecheck time.Duration
	Reported    bool
	// MetallbPassed is how far MetalLB has got (metallbProgress).
	MetallbPassed MetallbMark

	// Stale is what the pass knows of MetalLB's possibly kept allocations of the IP
	// (plan_release.go); releaseFor is how long a release Service lives, releaseAfter how long an
	// attached Service waits unserved before the driver releases.
	Stale        staleView
	ReleaseFor   time.Duration
	ReleaseAfter time.Duration

	// Unserved is this driver's memory of an attached Service's wait unserved (zero when none);
	// notServedAfter how long before it says so (plan_notserved.go).
	Unserved       UnservedWait
	NotServedAfter time.Duration

	Namespace  string
	Now        time.Time
	NudgeAfter time.Duration
}

// Holder is a Service that shows the address's IP.
type Holder struct {
	Svc           *corev1.Service
	InIngress     bool
	InExternalIPs bool
	// LinksToClaim: the Service links (link rule) to the address's claim.
	LinksToClaim bool
}

// ingressClear is a stale holder whose ingress is cleared, and what is said on success.
type ingressClear struct {
	Svc  *corev1.Service
	Said Event
}

// AddressPlan is what the address reconciler writes, in this order: the finalizer; on teardown
// (once the Service reconciler detached the Service) the holds' deletion, then the finalizer's
// removal; otherwise the holds (create, pin, nudge, delete surplus) and then the driver's status.
type AddressPlan struct {
	AddFinalizer    bool
	DeleteHolds     []*corev1.Service
	RemoveFinalizer bool
	CreateHold      *corev1.Service
	PinHold         *corev1.Service
	Nudge           *corev1.Service
	// ClearIngress are Services whose load-balancer status shows the IP although nothing on
	// them requests it (staleHolder): their status is cleared, which makes MetalLB let go, and
	// the event said once it was.
	ClearIngress []ingressClear
	// Release are the release Services to create and delete (plan_release.go).
	Release ReleasePlan
	// Unserved is the new memory of the attached Service's wait unserved; a zero one forgets it
	// (plan_notserved.go).
	Unserved *UnservedWait
	// Status is the driver's part of the status to write, nil when unchanged.
	Status *ipamv1.IPAddressStatus
	Events []Event
	// Unsay are the say-once memories of conditions that ended, so that a recurrence is said
	// again.
	Unsay   []Unsay
	Requeue time.Duration
}

// addressPart is one sub-planner's share of an address plan, returned as a value: its writes,
// events and re-check, and the conditions it sets on the address. PlanAddress composes the parts
// in order (with).
type addressPart struct {
	AddressPlan
	// conds are the conditions the part sets on the address's status, in order.
	conds []condition
	// detached: the attachment of a Service that is gone ends (status.AttachedTo).
	detached bool
}

// condition is a condition of the address's status a part sets (SetCondition).
type condition struct {
	typ             string
	ok              bool
	reason, message string
}

// set returns the part with one more condition set.
func (p addressPart) set(typ string, ok bool, reason, message string) addressPart {
	p.conds = append(slices.Clip(p.conds), condition{typ: typ, ok: ok, reason: reason, message: message})
	return p
}

// with composes part q after p: q's writes and events follow p's, its conditions are set after
// p's, the sooner of their re-checks stands. Of the holds touched, p's nudge
// stands (a release's touch is the hold's nudge when there is one); of the memories of the wait
// unserved, q's is the newer.
func (p addressPart) with(q addressPart) addressPart {
	p.AddFinalizer = p.AddFinalizer || q.AddFinalizer
	p.RemoveFinalizer = p.RemoveFinalizer || q.RemoveFinalizer
	p.DeleteHolds = join(p.DeleteHolds, q.DeleteHolds)
	p.CreateHold = cmp.Or(p.CreateHold, q.CreateHold)
	p.PinHold = cmp.Or(p.PinHold, q.PinHold)
	p.Nudge = cmp.Or(p.Nudge, q.Nudge)
	p.ClearIngress = join(p.ClearIngress, q.ClearIngress)
	p.Release.Create = join(p.Release.Create, q.Release.Create)
	p.Release.Remove = join(p.Release.Remove, q.Release.Remove)
	p.Release.Wait = cmp.Or(q.Release.Wait, p.Release.Wait)
	p.Release.Forget = p.Release.Forget || q.Release.Forget
	p.Unserved = cmp.Or(q.Unserved, p.Unserved)
	p.Events = join(p.Events, q.Events)
	p.Unsay = join(p.Unsay, q.Unsay)
	p.conds = join(p.conds, q.conds)
	p.detached = p.detached || q.detached
	p.Requeue = driverkit.Sooner(p.Requeue, q.Requeue)
	return p
}

// join is a followed by b (b itself when a is nil).
func join[T any](a, b []T) []T {
	if a == nil {
		return b
	}
	return append(slices.Clip(a), b...)
}

// statusOf is the address's status with the part's changes.
func (p addressPart) statusOf(a *ipamv1.IPAddress) *ipamv1.IPAddressStatus {
	status := a.Status.DeepCopy()
	if p.detached {
		status.AttachedTo = nil
	}
	for _, c := range p.conds {
		SetCondition(a, status, c.typ, c.ok, c.reason, c.message)
	}
	return status
}

// PlanAddress decides the writes for one address: teardown once the core let go, else the
// hold invariant (exactly one placeholder pinned to an address not attached to a live Service),
// Lost, Conflict, and the end of an attachment whose Service is gone.
func PlanAddress(v AddressView) AddressPlan {
	var p addressPart
	a := v.Addr
	ours := v.Class != nil && v.Class.Spec.Provisioner == Provisioner
	if a.DeletionTimestamp != nil {
		if driverkit.TeardownMayStart(a) {
			return planTeardown(v)
		}
		// The core still protects the address (Bound to a live claim), even if our finalizer
		// was removed by hand: nothing changes for the IP until the core lets go.
	} else if ours && !slices.Contains(a.Finalizers, Finalizer) {
		// Addresses an admin created by hand are torn down the same way.
		p.AddFinalizer = true
	}
	if !ours {
		return p.AddressPlan
	}

	p = p.with(planDetached(v))
	lostReason, lostMessage := lostVerdict(v)
	adopter := adoptingService(v)
	p = p.with(planClears(v, adopter))
	// waiting is the Service that should show the IP and does not: MetalLB may keep the IP for
	// a deleted placeholder (plan_release.go).
	state, waiting := planState(v, lostReason, lostMessage, adopter)
	p = p.with(state)
	if v.Attached == nil && !v.Unserved.Since.IsZero() {
		p.Unserved = &UnservedWait{} // no attached Service waits any more
	}
	p = p.with(planRelease(v, waiting, p.CreateHold))
	if waiting != nil && waiting == v.Attached && v.kept() {
		// MetalLB refuses the attached Service for a deleted Service of another namespace: what
		// the driver could release would not help, and the admin is told what does.
		p = p.with(planKeptForService(v, p.Unserved))
	}
	p.Requeue = driverkit.Sooner(p.Requeue, v.KeptRecheck)
	p = p.with(planLost(v, lostReason, lostMessage, meta.FindStatusCondition(p.statusOf(a).Conditions, ipamv1.ConditionLost) != nil))
	p = p.with(planKeptEnded(v, meta.FindStatusCondition(p.statusOf(a).Conditions, ipamv1.ConditionHeld)))
	p = p.with(planConflict(v, adopter, meta.IsStatusConditionTrue(p.statusOf(a).Conditions, ipamv1.ConditionConflict)))

	out := p.AddressPlan
	if status := p.statusOf(a); !equalDriverStatus(&a.Status, status) {
		out.Status = status
	}
	return out
}

// planDetached ends the attachment of a Service that is gone (or was replaced).
func planDetached(v AddressView) addressPart {
	if !v.AttachedGone {
		return addressPart{}
	}
	at := v.Addr.Status.AttachedTo
	return addressPart{detached: true, AddressPlan: AddressPlan{Events: []Event{{Obj: v.Addr, Reason: ReasonDetached,
		Message: fmt.Sprintf("Service %s/%s is gone; the address is held by a placeholder again", at.Namespace, at.Name)}}}}
}

// planClears clears the ingress of the stale holders (staleHolder) that are due; each clear is
// said once it succeeded (clears are few: clearEvery, clearLimit).
func planClears(v AddressView, adopter *corev1.Service) addressPart {
	var p addressPart
	for _, h := range v.Holders {
		if !staleHolder(v, adopter, h) {
			continue
		}
		if due, wait := clearDue(v.Cleared[h.Svc.UID], v.Now); !due {
			p.Requeue = driverkit.Sooner(p.Requeue, wait)
			continue
		}
		p.ClearIngress = append(p.ClearIngress, ingressClear{Svc: h.Svc, Said: Event{Obj: h.Svc, Warning: true,
			Reason:  ReasonStaleIngressCleared,
			Message: fmt.Sprintf("showed %s, reserved as IPAddress %s, although nothing on the Service requests it (an allocation MetalLB kept); cleared its load-balancer status so that MetalLB lets go", v.IP, v.Addr.Name)}})
	}
	return p
}

// planState decides Held: attached, Lost, being adopted, or held by a placeholder. It returns the
// Service that should show the IP and does not (nil when none).
func planState(v AddressView, lostReason, lostMessage string, adopter *corev1.Service) (addressPart, *corev1.Service) {
	a := v.Addr
	switch {
	case v.Attached != nil:
		var p addressPart
		// A hold the Service shares the IP with stays (one: a second is a leftover). The Service
		// reconciler deletes the others between recording the attachment and pinning (and
		// finishes that after a crash); one still there once the Service is pinned to the IP is
		// a leftover, and goes; before that it is the Service reconciler's to delete.
		if v.Attached.Annotations[AnnotationPinned] == "true" && slices.Contains(PinIPs(v.Attached), v.IP) {
			kept := false
			for _, h := range holdsServedFirst(v) {
				if !kept && Shares(v.Attached, DriverKey(v.Attached), h) {
					kept = true
					continue
				}
				p.DeleteHolds = append(p.DeleteHolds, h)
			}
		}
		p = p.set(ipamv1.ConditionHeld, true, ReasonAttached, AttachedMessage(v.Attached))
		var waiting *corev1.Service
		if lostReason == "" && AttachedUnserved(&v) {
			waiting = v.Attached
		}
		return p.with(planNotServed(v, waiting != nil)), waiting
	case lostReason != "":
		// MetalLB cannot serve the IP: no new hold (it would only fail), the existing one stays.
		return addressPart{}.set(ipamv1.ConditionHeld, false, ReasonLost, lostMessage), nil
	case adopter != nil:
		// A Service already serves the IP and links to the address's claim (an admin's pin being
		// adopted): it attaches next; holding the IP now would only fight it.
		p := addressPart{}.set(ipamv1.ConditionHeld, true, ReasonAdopting,
			fmt.Sprintf("served by Service %s/%s, which links to the claim", adopter.Namespace, adopter.Name))
		// Nothing waits on an event alone (docs/design.md#nothing-waits-on-an-event-alone): the
		// adoption is looked at again.
		p.Requeue = driverkit.Recheck(conditionSince(a, ipamv1.ConditionHeld, v.Now), v.Now, time.Second)
		return p, nil
	}
	return planHold(v)
}

// planLost sets Lost while MetalLB cannot serve the address (lostReason), and ends it once it can
// (shown: the status has a Lost condition).
func planLost(v AddressView, lostReason, lostMessage string, shown bool) addressPart {
	a := v.Addr
	var p addressPart
	if lostReason != "" {
		p = p.set(ipamv1.ConditionLost, true, lostReason, lostMessage)
		p.Events = append(p.Events, Event{Obj: a, Warning: true, Reason: ReasonLost, Message: lostMessage, Once: true})
		// A pool or class event usually ends Lost; a scheduled re-check makes sure of it.
		p.Requeue = driverkit.Recheck(conditionSince(a, ipamv1.ConditionLost, v.Now), v.Now, time.Second)
	} else if shown {
		p = p.set(ipamv1.ConditionLost, false, ReasonServable, "MetalLB can serve the address")
		if meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionLost) {
			// Said once while it lasted; a recurrence is said again.
			p.Unsay = append(p.Unsay, Unsay{Obj: a, Topic: ReasonLost})
		}
	}
	return p
}

// planKeptEnded forgets that KeptByMetalLB was said once Held (held, as planned) no longer says
// so: a recurrence is said again.
func planKeptEnded(v AddressView, held *metav1.Condition) addressPart {
	if c := findCondition(v.Addr, ipamv1.ConditionHeld); c != nil && c.Reason == ReasonKeptByMetalLB {
		if held == nil || held.Reason != ReasonKeptByMetalLB {
			return addressPart{AddressPlan: AddressPlan{Unsay: []Unsay{{Obj: v.Addr, Topic: ReasonKeptByMetalLB}}}}
		}
	}
	return addressPart{}
}

// planTeardown releases a deleted address once the core let go: an attached Service is unpinned
// (only a pin of ours that names the IP), the holds go, then the finalizer; MetalLB returns the
// IP to the pool.
func planTeardown(v AddressView) AddressPlan {
	if !slices.Contains(v.Addr.Finalizers, Finalizer) {
		// Torn down already (or our finalizer was removed by hand): a hold left over, for
		// instance one labelled while the address was going, ends too.
		return AddressPlan{DeleteHolds: v.Holds}
	}
	if s := v.Attached; s != nil && s.Annotations[AnnotationPinned] == "true" && slices.Contains(PinIPs(s), v.IP) {
		// The Service reconciler detaches it (it alone unpins a Service: one write, not two
		// racing ones); the finalizer stays until then, so the IP is never freed under a pin.
		return AddressPlan{Requeue: driverkit.Recheck(v.Addr.DeletionTimestamp.Time, v.Now, time.Second)}
	}
	return AddressPlan{DeleteHolds: v.Holds, RemoveFinalizer: true}
}

// planHold keeps exactly one placeholder pinned to an address that no Service uses. It returns
// the hold MetalLB has not served yet (nil when none).
func planHold(v AddressView) (addressPart, *corev1.Service) {
	if len(v.Holds) == 0 {
		return planNoHold(v), nil
	}
	holds := holdsServedFirst(v)
	hold := holds[0]
	// A second one is a leftover.
	p := addressPart{AddressPlan: AddressPlan{DeleteHolds: holds[1:]}}
	if hold.Annotations[metallb.AnnotationLoadBalancerIPs] != v.IP.String() || DriverKey(hold) != HoldKey(v.Addr) {
		// (also a hold made before holds shared their IP, or of an address bound since to
		// another claim: it gets the key of the address's claim)
		p.PinHold = hold
	}
	if slices.Contains(IngressIPs(hold), v.IP) {
		return p.set(ipamv1.ConditionHeld, true, ReasonHeld, fmt.Sprintf("held by placeholder %s/%s", hold.Namespace, hold.Name)), nil
	}
	if v.kept() {
		// Nothing the driver can write frees the IP, a nudge included; the admin is told what
		// does. The restart of MetalLB's controller passes over every Service and serves the
		// hold by itself; the address is looked at again a minute from now at the latest.
		p = p.with(planKept(v, v.keptMessage()))
		p.Requeue = driverkit.MaxRecheck
		return p, hold
	}
	p = p.set(ipamv1.ConditionHeld, false, ReasonWaitingForMetalLB,
		fmt.Sprintf("waiting for MetalLB to assign %s to placeholder %s/%s", v.IP, hold.Namespace, hold.Name))
	nudge, wait := nudgeDue(hold, v.Now, v.NudgeAfter, v.FailedAt[hold.UID], v.MetallbPassed)
	if nudge {
		p.Nudge = hold
	}
	p.Requeue = wait
	return p, hold
}

// planNoHold makes the address's hold, unless one is on its way or a Service on its way out
// still shows the IP.
func planNoHold(v AddressView) addressPart {
	a := v.Addr
	switch {
	case v.HoldExpected || settlingPlaceholder(v) != nil:
		// Created (or being relabelled from the provisioning placeholder MetalLB gave the
		// IP) by this driver; the cache has not shown the hold yet. No status either: the
		// next pass, with the hold in view, writes it once.
		return addressPart{AddressPlan: AddressPlan{Requeue: time.Second}}
	case releasingHolder(v) != nil:
		// A Service this driver unpinned still shows the IP: a hold now would only get
		// MetalLB's AllocationFailed. Wait for MetalLB to let go.
		s := releasingHolder(v)
		p := addressPart{}.set(ipamv1.ConditionHeld, false, ReasonReleasing,
			fmt.Sprintf("waiting for MetalLB to release %s from Service %s/%s", v.IP, s.Namespace, s.Name))
		p.Requeue = driverkit.Recheck(conditionSince(a, ipamv1.ConditionHeld, v.Now), v.Now, time.Second)
		return p
	}
	p := addressPart{AddressPlan: AddressPlan{CreateHold: HoldService(v.Namespace, a.Name, v.IP, ParseClassParams(v.Class).Pool, HoldKey(a)),
		Requeue: v.NudgeAfter}}
	return p.set(ipamv1.ConditionHeld, false, ReasonWaitingForMetalLB,
		fmt.Sprintf("waiting for MetalLB to assign %s to placeholder %s/%s", v.IP, v.Namespace, HoldName(a.Name)))
}

// holdsServedFirst orders the address's holds: the one MetalLB serves (else the oldest) first.
func holdsServedFirst(v AddressView) []*corev1.Service {
	holds := slices.Clone(v.Holds)
	slices.SortStableFunc(holds, func(x, y *corev1.Service) int {
		xs, ys := slices.Contains(IngressIPs(x), v.IP), slices.Contains(IngressIPs(y), v.IP)
		if xs != ys {
			if xs {
				return -1
			}
			return 1
		}
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return holds
}

// nudgeDue decides whether a placeholder MetalLB has not served should be touched now, and when
// to look again. MetalLB does not retry a failed allocation by itself until some other Service
// is deleted; a placeholder it has not refused is merely waiting its turn, and a touch would be
// a wasted write. So a nudge needs MetalLB's AllocationFailed since the last touch (failedAt,
// zero when none was seen), at most every nudgeAfter at first, backing off to a quarter of the
// placeholder's age, at most a minute; while none has come, it looks again when the
// placeholder's age has doubled (at most a minute). Without such a report (an event MetalLB's recorder dropped
// must not strand it), after a minute of silence once MetalLB has served a placeholder touched
// later than this one (mark.passed, metallbProgress: it went past this one), or after silenceCap
// once MetalLB has served nothing new for silenceCap either (stuck, or never seen serving):
// while it keeps serving the placeholders touched before this one, it is working through a
// backlog in order and will get to this one.
func nudgeDue(s *corev1.Service, now time.Time, nudgeAfter time.Duration, failedAt time.Time, mark MetallbMark) (bool, time.Duration) {
	last := LastTouch(s)
	every := nudgeEvery(s, now, nudgeAfter)
	if wait := every - now.Sub(last); wait > 0 {
		return false, wait
	}
	// Event times have a resolution of a second.
	if !failedAt.IsZero() && !failedAt.Before(last.Truncate(time.Second)) {
		return true, every
	}
	// Not refused: waiting its turn, or its report was lost, which only a minute of silence can
	// tell. Until then, look again when the placeholder's age has doubled (a refusal is found
	// then): a placeholder waits in MetalLB's backlog as long as the backlog takes, and at
	// 10,000 claims looking every quarter of its age cost the claim controller about twenty
	// passes per claim.
	look := min(max(nudgeAfter, now.Sub(s.CreationTimestamp.Time)), driverkit.MaxRecheck)
	stalled := mark.MovedAt.IsZero() || now.Sub(mark.MovedAt) >= silenceCap
	if silent := now.Sub(last); silent >= driverkit.MaxRecheck && (mark.Passed.After(last) || (silent >= silenceCap && stalled)) {
		return true, every
	}
	return false, look
}

// nudgeEvery is the back-off between two nudges of a placeholder: a quarter of its age, at least
// nudgeAfter, at most driverkit.MaxRecheck.
func nudgeEvery(s *corev1.Service, now time.Time, nudgeAfter time.Duration) time.Duration {
	return min(max(nudgeAfter, driverkit.Recheck(s.CreationTimestamp.Time, now, nudgeAfter)), driverkit.MaxRecheck)
}

// silenceCap is how long a placeholder waits without a report, while MetalLB serves nothing
// else either (a mark that does not move), before it is nudged.
const silenceCap = 5 * time.Minute

// LastTouch is when a placeholder was created or last nudged.
func LastTouch(s *corev1.Service) time.Time {
	last := s.CreationTimestamp.Time
	if t, err := time.Parse(time.RFC3339Nano, s.Annotations[AnnotationNudge]); err == nil && t.After(last) {
		last = t
	}
	return last
}

// MayNudge: a placeholder MetalLB has not served, untouched for nudgeAfter, for which the
// snapshot looks up MetalLB's AllocationFailed reports.
func MayNudge(s *corev1.Service, now time.Time, nudgeAfter time.Duration) bool {
	return len(IngressIPs(s)) == 0 && now.Sub(LastTouch(s)) >= nudgeAfter
}

// lostVerdict says why MetalLB can no longer serve the address, or "" when it can: the class's
// pool is unset, gone, or no longer includes the IP (shrunk, or the class names another pool).
func lostVerdict(v AddressView) (reason, message string) {
	name := ParseClassParams(v.Class).Pool
	switch {
	case name == "":
		return ReasonPoolNotSet, fmt.Sprintf("class %s names no MetalLB pool; MetalLB cannot serve %s", v.Class.Name, v.IP)
	case v.Pool == nil:
		return ReasonPoolNotFound, fmt.Sprintf("IPAddressPool %s of class %s no longer exists; MetalLB cannot serve %s", name, v.Class.Name, v.IP)
	case !poolContains(v.Pool, v.IP):
		return ReasonOutsidePool, fmt.Sprintf("IPAddressPool %s of class %s no longer includes %s", name, v.Class.Name, v.IP)
	}
	return "", ""
}

// adoptingService is a Service that serves the IP and links to the address's claim while the
// address is not attached yet. Not one of another load-balancer class: the Service reconciler
// never attaches it, so waiting for it would leave the IP unheld in MetalLB.
func adoptingService(v AddressView) *corev1.Service {
	if v.Attached != nil || v.Addr.Spec.ClaimRef == nil {
		return nil
	}
	for _, h := range v.Holders {
		if h.InIngress && h.LinksToClaim && !ForeignClass(h.Svc) {
			return h.Svc
		}
	}
	return nil
}

// settlingPlaceholder is a provisioning placeholder of this driver that MetalLB gave the IP: the
// claim reconciler is making it this address's hold (or handing it over).
func settlingPlaceholder(v AddressView) *corev1.Service {
	for _, h := range v.Holders {
		if h.InIngress && h.Svc.Namespace == v.Namespace && h.Svc.Labels[LabelRole] == RoleProvisioning {
			return h.Svc
		}
	}
	return nil
}

// releasingHolder is a Service that still shows the IP in its ingress while it is on its way
// out: this driver unpinned it (the releasing record names the IP), or pinned it (a re-link to
// other addresses, or a view of it older than the address's). None is a conflict.
func releasingHolder(v AddressView) *corev1.Service {
	for _, h := range v.Holders {
		if h.InIngress && releasing(h.Svc, v.IP) || staleHolder(v, adoptingService(v), h) {
			return h.Svc
		}
	}
	return nil
}

// staleHolder: a Service MetalLB serves (type LoadBalancer, no loadBalancerClass) that shows the IP
// in its load-balancer status although nothing on it requests the IP — no pin or pool or sharing
// annotation under either prefix, no spec.loadBalancerIP, no marker or releasing record of this
// driver — and that is neither the attached Service nor an adopting one. MetalLB assigns an IP of
// an autoAssign: false pool only on request, so such an ingress is an allocation MetalLB kept in
// memory: typically written back, while MetalLB's passes kept failing, into a Service this driver
// had unpinned and cleared. An admin could not act on it (there is nothing to remove), so the
// driver finishes the release itself: clearing the status makes MetalLB drop its state for the
// Service (docs/design.md#attach-detach-and-re-link). A Service that does request the IP, or that
// another implementation serves, stays a Conflict.
func staleHolder(v AddressView, adopter *corev1.Service, h Holder) bool {
	s := h.Svc
	if !h.InIngress || h.InExternalIPs || s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Spec.LoadBalancerClass != nil {
		return false
	}
	// Only while MetalLB hands the IP out on request alone: the IP inside the class's pool, and
	// that pool not auto-assigning (with an auto-assigning pool, or none, the class is refused
	// and the premise is false). Never for a Lost address: an IP the class's pool no longer
	// includes may well be served, unasked and rightly, from another pool an admin gave it to.
	if v.Pool == nil || v.Pool.Spec.AutoAssign == nil || *v.Pool.Spec.AutoAssign || !poolContains(v.Pool, v.IP) {
		return false
	}
	if v.Class == nil {
		return false
	}
	if reason, _ := lostVerdict(v); reason != "" {
		return false
	}
	// A Service cleared clearLimit times within clearMemoryFor that shows the IP again is not
	// showing MetalLB's stale memory (something keeps writing it): a Conflict for an admin.
	if len(v.Cleared[s.UID]) >= clearLimit {
		return false
	}
	if (v.Attached != nil && s.UID == v.Attached.UID) || (adopter != nil && s.UID == adopter.UID) {
		return false
	}
	if s.Namespace == v.Namespace && (s.Labels[LabelAddress] != "" || s.Labels[LabelRole] != "") {
		return false // this driver's own Services
	}
	if _, ok := s.Annotations[AnnotationReleasing]; ok || s.Annotations[AnnotationPinned] == "true" {
		return false // the Service reconciler is moving it
	}
	return len(ForeignPins(s)) == 0
}

// servedUnasked: a Service MetalLB serves that requests no address, showing the IP of an
// address that is Lost because the class's pool no longer includes it (MetalLB gave the IP from
// whichever pool includes it now).
func servedUnasked(v AddressView, s *corev1.Service) bool {
	if v.Class == nil || s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Spec.LoadBalancerClass != nil || len(ForeignPins(s)) > 0 {
		return false
	}
	reason, _ := lostVerdict(v)
	return reason == ReasonOutsidePool || reason == ReasonPoolNotFound
}

// releasing: a Service this driver pinned (its marker, which tenants cannot write) or is
// unpinning is never a wrongful holder. Its pin may already name other addresses (a re-link),
// or this driver's cache may show the Service from before a write its address view already
// includes (two informers, two lags): either way the Service reconciler is moving it.
func releasing(s *corev1.Service, ip netip.Addr) bool {
	if r, ok := s.Annotations[AnnotationReleasing]; ok && slices.Contains(ParseIPList(r), ip) {
		return true
	}
	return s.Annotations[AnnotationPinned] == "true"
}

// How often a stale holder's ingress is cleared: at most once per clearEvery, and at most
// clearLimit times within clearMemoryFor before it is taken for a Conflict after all.
const (
	clearEvery     = 30 * time.Second
	clearLimit     = 3
	clearMemoryFor = 10 * time.Minute
)

// clearDue says whether a stale holder's ingress may be cleared now, given when it was last
// cleared (oldest first), and else how long to wait.
func clearDue(cleared []time.Time, now time.Time) (bool, time.Duration) {
	if len(cleared) == 0 {
		return true, 0
	}
	if wait := cleared[len(cleared)-1].Add(clearEvery).Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// planConflict sets Conflict while a Service other than the attached one, the address's holds
// and an adopting Service shows the IP: in its load-balancer status, or in spec.externalIPs
// (kube-proxy routes those to that Service's endpoints). conflicting: the status says Conflict.
func planConflict(v AddressView, adopter *corev1.Service, conflicting bool) addressPart {
	var p addressPart
	a := v.Addr
	var wrongful []string
	for _, h := range v.Holders {
		s := h.Svc
		isAttached := v.Attached != nil && s.UID == v.Attached.UID
		var why string
		switch {
		case h.InExternalIPs && !isAttached:
			why = fmt.Sprintf("lists %s, reserved as IPAddress %s, in spec.externalIPs; remove it there", v.IP, a.Name)
		case !h.InIngress || isAttached || (adopter != nil && s.UID == adopter.UID) || releasing(s, v.IP) ||
			staleHolder(v, adopter, h) ||
			(s.Namespace == v.Namespace && s.Labels[LabelAddress] == a.Name) ||
			(s.Namespace == v.Namespace && s.Labels[LabelRole] == RoleProvisioning):
			// (A provisioning placeholder of this driver is settled by the claim reconciler.)
			continue
		case servedUnasked(v, s):
			// A Lost address's IP, served from a pool other than the class's: the tenant did
			// nothing wrong; the admin decides where the IP belongs.
			why = fmt.Sprintf("holds %s, reserved as IPAddress %s, which MetalLB assigned it from another pool: the class's pool no longer includes it; "+
				"an admin can return the IP to that pool or release the address", v.IP, a.Name)
		default:
			why = fmt.Sprintf("holds %s, reserved as IPAddress %s; remove the MetalLB annotation or spec.loadBalancerIP that requests it", v.IP, a.Name)
		}
		wrongful = append(wrongful, s.Namespace+"/"+s.Name)
		p.Events = append(p.Events, Event{Obj: s, Warning: true, Reason: ReasonServiceConflict, Message: why, Once: true,
			Topic: ReasonServiceConflict + "/" + a.Name})
	}
	slices.Sort(wrongful)
	if conflicting {
		// The Services no longer wrongful are forgotten, so they are told again if they come back.
		keep := make([]types.NamespacedName, 0, len(wrongful))
		for _, w := range wrongful {
			ns, name, _ := strings.Cut(w, "/")
			keep = append(keep, types.NamespacedName{Namespace: ns, Name: name})
		}
		p.Unsay = append(p.Unsay, Unsay{Topic: ReasonServiceConflict + "/" + a.Name, Keep: keep})
	}
	if len(wrongful) == 0 {
		if conflicting {
			p = p.set(ipamv1.ConditionConflict, false, ReasonNoConflict, "no other Service holds the address")
			p.Events = append(p.Events, Event{Obj: a, Reason: ReasonConflictResolved, Message: fmt.Sprintf("no other Service holds %s any more", v.IP)})
			p.Unsay = append(p.Unsay, Unsay{Obj: a, Topic: ipamv1.ConditionConflict})
		}
		return p
	}
	msg := fmt.Sprintf("Service %s holds %s outside the reservation", strings.Join(wrongful, ", "), v.IP)
	p = p.set(ipamv1.ConditionConflict, true, ReasonHeldByOther, msg)
	p.Events = append(p.Events, Event{Obj: a, Warning: true, Reason: ipamv1.ConditionConflict, Message: msg, Once: true})
	return p
}

// Unsay forgets what was said once about a condition that ended: about obj, or (obj nil) about
// every object but keep.
type Unsay struct {
	Obj   Object
	Topic string
	Keep  []types.NamespacedName
}

// conditionSince is when the address's condition last changed status, or now when it has none:
// the start of a wait that a re-check backs off from.
func conditionSince(a *ipamv1.IPAddress, typ string, now time.Time) time.Time {
	if c := meta.FindStatusCondition(a.Status.Conditions, typ); c != nil && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	return now
}

func AttachedMessage(s *corev1.Service) string {
	return fmt.Sprintf("attached to Service %s/%s", s.Namespace, s.Name)
}

func SetCondition(a *ipamv1.IPAddress, status *ipamv1.IPAddressStatus, typ string, ok bool, reason, message string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: message, ObservedGeneration: a.Generation})
}

// equalDriverStatus compares the fields the driver owns (AttachedTo, conditions without their
// transition times).
func equalDriverStatus(a, b *ipamv1.IPAddressStatus) bool {
	if (a.AttachedTo == nil) != (b.AttachedTo == nil) || (a.AttachedTo != nil && *a.AttachedTo != *b.AttachedTo) {
		return false
	}
	if len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range b.Conditions {
		o := meta.FindStatusCondition(a.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message || o.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}
