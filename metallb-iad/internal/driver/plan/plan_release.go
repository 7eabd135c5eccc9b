package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// MetalLB's kept allocations.
//
// After a restart, MetalLB's controller (v0.15.2 through v0.16.2) ignores every Service event until one pass over
// all Services has succeeded; a pass that fails for any Service is retried, and the addresses it
// assigned in memory stay. A placeholder this driver deletes in that window keeps its IP in
// MetalLB's memory for good: no delete event of it is ever handled. The hold made afterwards, or
// the tenant Service pinned to the IP, is refused ("address also in use by <the deleted one>").
//
// MetalLB lets go of a name when it handles a Service of that name that is not a LoadBalancer
// (a pass over every Service that lists one does too), but it does not try the refused Service
// again by itself: the driver touches it right after (a nudge). So the driver creates, in
// its own namespace, a ClusterIP Service under the deleted name — a release Service — keeps it
// for ReleaseFor (so that even a retried pass, which lists every Service, sees it), and deletes
// it. It never creates one under a name that exists, never outside its namespace (a tenant
// Service kept that way still needs MetalLB's controller restarted), and at most one per name
// (the apiserver refuses a second). Rounds repeat with the usual back-off while the IP stays
// unserved; the periodic sweep deletes release Services left by a driver that restarted.

// Reasons of the release.
const (
	// ReasonStaleAllocation (Held=False): MetalLB keeps the IP for a Service that no longer
	// exists; the driver is releasing it.
	ReasonStaleAllocation = "StaleAllocation"
	// ReasonStaleAllocationReleased is the Normal event on the address when it released names.
	ReasonStaleAllocationReleased = "StaleAllocationReleased"
)

// Defaults of Driver.ReleaseFor (how long a release Service lives) and Driver.ReleaseAfter (how
// long a Service pinned by this driver waits unserved before the driver releases the names MetalLB
// may keep its IP under).
const (
	DefaultReleaseFor = 10 * time.Second
	// DefaultReleaseAfter is zero: the guessed release for an attached Service is off unless
	// asked for. With it on, every Service MetalLB is merely slow to serve costs release rounds:
	// at 300 attaches, MetalLB's own backlog set it off for nearly all of them, quadrupling the
	// driver's writes and doubling the attach time (docs/benchmarks.md).
	DefaultReleaseAfter = 0
)

// maxGuessedWait ends the rounds made without MetalLB naming the kept Service (an attached
// Service): after this long unserved, releasing the same absent names again would only write.
const maxGuessedWait = 3 * time.Minute

// staleView is what an address pass knows of MetalLB's possibly kept allocations of its IP.
type staleView struct {
	// Names are the Services of the driver's namespace under which MetalLB may keep the IP:
	// those MetalLB's AllocationFailed on the hold names (known), else, for an attached Service
	// MetalLB does not serve, the names this driver could have held the IP under.
	Names []string
	Known bool
	// Free are the names confirmed (uncached) not to exist; looked up only when a round is due.
	Free map[string]bool
	// Releases are the release Services of this address.
	Releases []*corev1.Service
	// Since is when this driver first saw the IP wait so, last when it last released names
	// (its memory; zero when none); remembered: the memory has names of holds it deleted.
	Since, Last time.Time
	Remembered  bool
}

// staleWait is the driver's memory of one address's wait (see staleView).
type staleWait struct {
	Since, Last time.Time
}

// staleNames parses MetalLB's AllocationFailed message ("… address also in use by ns/a,ns/b")
// into the names of the Services of namespace it names, but those in live (names that exist
// as the driver's placeholders: not stale).
func staleNames(message, namespace string, live ...string) []string {
	var out []string
	for _, k := range inUseBy(message) {
		if k.Namespace != namespace || slices.Contains(live, k.Name) || slices.Contains(out, k.Name) {
			continue
		}
		out = append(out, k.Name)
	}
	slices.Sort(out)
	return out
}

// inUseBy parses the Services MetalLB's AllocationFailed message says use the address ("…
// address also in use by ns/a,ns/b").
func inUseBy(message string) []types.NamespacedName {
	const marker = "address also in use by "
	i := strings.LastIndex(message, marker)
	if i < 0 {
		return nil
	}
	var out []types.NamespacedName
	for _, part := range strings.Split(message[i+len(marker):], ",") {
		ns, name, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
			continue // not a Service's name: not MetalLB's words
		}
		if out = append(out, types.NamespacedName{Namespace: ns, Name: name}); len(out) == MaxNamesPerReport {
			break
		}
	}
	return out
}

// MaxNamesPerReport bounds the Services one report of MetalLB can name to the driver: each costs
// a read of the apiserver (is it gone?), and a report in a tenant's namespace may be the tenant's
// own writing. MetalLB names the Services sharing one address, which for the addresses of this
// driver is one Service, or an attached Service and the hold it shares the address with.
const MaxNamesPerReport = 4

// ReasonKeptByMetalLB (Held=False, and a Warning on the address): MetalLB refuses the hold
// because it still counts the IP as used by a Service outside the driver's namespace that no
// longer exists (a deletion MetalLB lost while its controller restarted). The driver may create
// Services only in its own namespace, so it cannot make MetalLB forget that name; a restart of
// MetalLB's controller does.
const ReasonKeptByMetalLB = "KeptByMetalLB"

// keptByMessage says which deleted Services MetalLB keeps the IP for, and what frees it.
func keptByMessage(ip netip.Addr, kept []string) string {
	return fmt.Sprintf("MetalLB still counts %s as used by %s, which no longer exists (MetalLB missed the deletion while its controller was restarting); the driver can make MetalLB forget only names of its own namespace: restart MetalLB's controller to free the address",
		ip, strings.Join(kept, ", "))
}

// AttachedUnserved: the address is attached to a Service this driver pinned to its IP, and
// MetalLB does not show the IP in the Service's status.
func AttachedUnserved(v *AddressView) bool {
	s := v.Attached
	return s != nil && s.Annotations[AnnotationPinned] == "true" && slices.Contains(PinIPs(s), v.IP) &&
		!slices.Contains(IngressIPs(s), v.IP)
}

// ipServed: the Service that should show the IP does: the attached one, else a hold.
func ipServed(v *AddressView) bool {
	if v.Attached != nil {
		return slices.Contains(IngressIPs(v.Attached), v.IP)
	}
	return slices.ContainsFunc(v.Holds, func(h *corev1.Service) bool { return slices.Contains(IngressIPs(h), v.IP) })
}

// StaleCandidates says under which names of the driver's namespace MetalLB may keep the
// address's IP, and whether MetalLB said so itself. For a hold MetalLB refused, the names its
// latest AllocationFailed gives (message by hold uid); for an attached Service MetalLB does not
// serve (its events are in the tenant's namespace, which this driver may not read), the hold's
// name, the claim's first provisioning names and the names of the holds this driver deleted for
// the attach (deleted, from its memory). None when the IP is Lost.
func StaleCandidates(v *AddressView, messages map[string]string, deleted ...string) ([]string, bool) {
	// (An address an admin deleted that the core still protects is held or served as before,
	// so it is released for as before; one whose teardown began never gets here.)
	if v.Class == nil || v.Class.Spec.Provisioner != Provisioner || driverkit.TeardownMayStart(v.Addr) {
		return nil, false
	}
	if r, _ := lostVerdict(*v); r != "" {
		return nil, false
	}
	if v.Attached != nil {
		if v.ReleaseAfter <= 0 || !AttachedUnserved(v) || v.kept() {
			// (MetalLB said it keeps the IP for a deleted Service of another namespace: no name
			// of the driver's would help.)
			return nil, false
		}
		for _, h := range v.Holders {
			if h.InIngress && h.Svc.UID != v.Attached.UID {
				return nil, false // a live Service holds the IP: a Conflict, not a kept allocation
			}
		}
		if len(deleted) > 0 && v.Stale.Last.IsZero() {
			// The holds this driver deleted for the attach are where MetalLB keeps the IP, if
			// anywhere: the first round releases those alone (guessing more names would only add
			// writes while MetalLB is merely slow).
			names := slices.Clone(deleted)
			slices.Sort(names)
			return slices.Compact(names), false
		}
		// Nothing remembered (the driver restarted since), or a round of the remembered names
		// did not help (MetalLB keeps the IP under a name this driver used without remembering
		// it: a provisioning placeholder deleted before its cached copy showed the IP): the names
		// it could have used, and the remembered ones.
		var names []string
		for _, n := range placeholderNames(v, nil, deleted) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		return names, false
	}
	live := make([]string, 0, len(v.Holds))
	for _, h := range v.Holds {
		live = append(live, h.Name)
	}
	var names []string
	for _, h := range v.Holds {
		if slices.Contains(IngressIPs(h), v.IP) {
			return nil, false // served: whatever MetalLB said before is over
		}
		msg := messages[string(h.UID)]
		found := staleNames(msg, v.Namespace, live...)
		if placeholderPortInUse(msg, v.IP) {
			// A Service under the hold's own sharing key keeps the IP with the placeholders'
			// port: one of this address's placeholders, deleted while MetalLB missed it. MetalLB
			// names no Service for a port in use, so the names it could have are released.
			found = append(found, placeholderNames(v, live, deleted)...)
		}
		for _, n := range found {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, len(names) > 0
}

// placeholderPortInUse: MetalLB's AllocationFailed message says the placeholders' port is in use
// on the IP ("… port TCP/1 is already in use on "<ip>"").
func placeholderPortInUse(message string, ip netip.Addr) bool {
	return strings.Contains(message, fmt.Sprintf("port %s/%d is already in use on %q", corev1.ProtocolTCP, HoldPort, ip.String()))
}

// placeholderNames are the names of the driver's namespace a placeholder of the address may
// have had, but for the live ones: its hold's, its claim's first provisioning placeholders', and
// those this driver remembers deleting for it.
func placeholderNames(v *AddressView, live, deleted []string) []string {
	names := []string{HoldName(v.Addr.Name)}
	if ref := v.Addr.Spec.ClaimRef; ref != nil && ref.UID != "" {
		fam := ipamv1.FamilyOf(v.IP)
		names = append(names, ProvisioningName(string(ref.UID), fam, 0), ProvisioningName(string(ref.UID), fam, 1))
	}
	names = append(names, deleted...)
	return slices.DeleteFunc(names, func(n string) bool { return slices.Contains(live, n) })
}

// ReleaseDue decides whether a round of releases is due and when to look again: at once when
// MetalLB named the names itself (known), else once the IP has waited releaseAfter (a Service
// MetalLB is merely slow to serve, under load, must not cost a round); then again every quarter
// of the wait's age (at least nudgeAfter, at most a minute) while it lasts.
func ReleaseDue(since, last, now time.Time, nudgeAfter, releaseAfter time.Duration, known bool) (bool, time.Duration) {
	if since.IsZero() {
		since = now
	}
	if !known {
		if releaseAfter <= 0 {
			return false, 0 // guessing is off
		}
		if wait := releaseAfter - now.Sub(since); wait > 0 {
			return false, wait
		}
		if now.Sub(since) > maxGuessedWait {
			// Rounds made on a guess have had their chance: the Service waits for something else
			// (MetalLB down, a pool that does not admit its namespace). No more writes; still
			// looked at (docs/design.md#nothing-waits-on-an-event-alone), in case the wait ends
			// without an event.
			return false, driverkit.MaxRecheck
		}
	}
	every := min(max(nudgeAfter, driverkit.Recheck(since, now, nudgeAfter)), driverkit.MaxRecheck)
	if last.IsZero() {
		return true, every
	}
	if wait := every - now.Sub(last); wait > 0 {
		return false, wait
	}
	return true, every
}

// ReleasePlan is the release part of an address plan.
type ReleasePlan struct {
	// Create are release Services to create, remove the expired ones (and one that stands in
	// the way of the hold's name).
	Create, Remove []*corev1.Service
	// Wait is the new memory of the wait; forget ends it.
	Wait   *staleWait
	Forget bool
}

// planRelease decides the release Services of an address: the expired ones go; while the IP
// waits under names MetalLB may keep (v.stale.names), a due round creates one per free name
// that has none. who is the Service that waits for the IP (hold or attached Service), createHold
// the hold the plan makes (nil when none); the part sets Held=False with reason StaleAllocation
// while the driver releases, and has the writes, event and re-check.
func planRelease(v AddressView, who, createHold *corev1.Service) addressPart {
	st := v.Stale
	var p addressPart
	for _, r := range st.Releases {
		if createHold != nil && r.Name == createHold.Name {
			// The hold takes the name over (MetalLB sees one Service under it): the release
			// goes first, and is never taken for the hold.
			p.Release.Remove = append(p.Release.Remove, r)
			continue
		}
		if age := v.Now.Sub(r.CreationTimestamp.Time); age >= v.ReleaseFor {
			p.Release.Remove = append(p.Release.Remove, r)
		} else {
			p.Requeue = driverkit.Sooner(p.Requeue, v.ReleaseFor-age)
		}
	}
	if who == nil || len(st.Names) == 0 {
		// The memory goes once the IP is served (not before: the attach remembers the holds it
		// deleted before the cache shows the pin).
		if (!st.Since.IsZero() || st.Remembered) && ipServed(&v) {
			p.Release.Forget = true
		}
		if c := findCondition(v.Addr, ipamv1.ConditionHeld); c != nil && c.Reason == ReasonStaleAllocation {
			p.Unsay = append(p.Unsay, Unsay{Obj: v.Addr, Topic: ReasonStaleAllocation})
		}
		return p
	}
	since := st.Since
	if since.IsZero() {
		since = v.Now
	}
	due, wait := ReleaseDue(since, st.Last, v.Now, v.NudgeAfter, v.ReleaseAfter, st.Known)
	p.Requeue = driverkit.Sooner(p.Requeue, wait)
	var released []string
	if due {
		for _, n := range st.Names {
			if !st.Free[n] || slices.ContainsFunc(st.Releases, func(r *corev1.Service) bool { return r.Name == n }) {
				continue
			}
			p.Release.Create = append(p.Release.Create, ReleaseService(v.Namespace, n, v.Addr.Name))
			released = append(released, n)
		}
	}
	next := staleWait{Since: since, Last: st.Last}
	if len(released) > 0 {
		next.Last = v.Now
		p.Requeue = driverkit.Sooner(p.Requeue, v.ReleaseFor)
		// MetalLB drops the name when it handles the release Service, but does not look at the
		// Service it refused again by itself (it passes over every Service only when the
		// handling changed a status): touched right after, it is served. A round that came
		// while MetalLB's first pass was still failing gets its touch at the next round (a
		// nudge the plan has already is that touch: addressPart.with).
		p.Nudge = who
	}
	if next != (staleWait{Since: st.Since, Last: st.Last}) {
		p.Release.Wait = &next
	}
	return p.with(staleAllocationSaid(v, who, next, len(released) > 0))
}

// staleAllocationSaid says (and shows in Held) that the driver releases names MetalLB may keep
// the IP under, once it has released (next, the wait's memory), and while the wait lasts (also
// after a restart of the driver, which forgot its rounds); the event once a round released.
func staleAllocationSaid(v AddressView, who *corev1.Service, next staleWait, released bool) addressPart {
	st := v.Stale
	held := findCondition(v.Addr, ipamv1.ConditionHeld)
	if next.Last.IsZero() && (held == nil || held.Reason != ReasonStaleAllocation) {
		return addressPart{}
	}
	qualified := make([]string, 0, len(st.Names))
	for _, n := range st.Names {
		qualified = append(qualified, v.Namespace+"/"+n)
	}
	var msg, said string
	if st.Known {
		msg = fmt.Sprintf("MetalLB keeps %s for Service %s, which no longer exists (its state from before a restart); releasing it for placeholder %s/%s",
			v.IP, strings.Join(qualified, ", "), who.Namespace, who.Name)
		said = fmt.Sprintf("MetalLB kept %s for deleted Service %s after a restart; released it", v.IP, strings.Join(qualified, ", "))
	} else {
		msg = fmt.Sprintf("attached to Service %s/%s, which MetalLB does not serve %s; releasing what MetalLB may keep for deleted Services %s after a restart",
			who.Namespace, who.Name, v.IP, strings.Join(qualified, ", "))
		said = fmt.Sprintf("MetalLB did not serve %s to Service %s/%s; released the names it may keep the address under after a restart: %s",
			v.IP, who.Namespace, who.Name, strings.Join(qualified, ", "))
	}
	p := addressPart{}.set(ipamv1.ConditionHeld, false, ReasonStaleAllocation, msg)
	if released {
		p.Events = append(p.Events, Event{Obj: v.Addr, Reason: ReasonStaleAllocationReleased, Message: said, Once: true, Topic: ReasonStaleAllocation})
	}
	return p
}

func findCondition(a *ipamv1.IPAddress, typ string) *metav1.Condition {
	for i := range a.Status.Conditions {
		if a.Status.Conditions[i].Type == typ {
			return &a.Status.Conditions[i]
		}
	}
	return nil
}
