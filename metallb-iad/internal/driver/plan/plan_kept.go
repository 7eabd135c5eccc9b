package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// An IP MetalLB keeps for a deleted Service of another namespace.
//
// MetalLB's controller handles no Service event until its first pass over every Service after a
// restart succeeds; a tenant Service deleted in that window keeps its IP in MetalLB's state, and
// MetalLB refuses the address's hold (or the Service attached to it) "address also in use by"
// the deleted Service. The driver may write Services only in its own namespace, so it cannot make
// MetalLB forget that name (plan_release.go does for its own names); it says so instead
// (Held=False KeptByMetalLB, a Warning on the address, and one on an attached Service), and an
// admin restarts MetalLB's controller. The decision is made here, from what the address pass
// read: MetalLB's latest reports, which of the Services they name exist (read uncached), and
// since when the driver has seen them gone (its memory).

// KeptGrace is how long a Service named by MetalLB's report must have been seen gone before the
// driver concludes that MetalLB keeps the IP for it. An ordinary deletion (a tenant deleting the
// Service that took the address, an admin removing an intruder) is handled by MetalLB within
// seconds, and its pass over every Service after it serves the refused hold: that is no reason
// to call an admin.
const KeptGrace = 30 * time.Second

// KeptCandidates are the Services that MetalLB's latest reports (messages, "" for none) say use
// the IP, outside the driver's namespace (its own names are released, plan_release.go) and other
// than the attached Service itself: at most MaxNamesPerReport of them in all.
func KeptCandidates(messages []string, driverNamespace string, attached *corev1.Service) []types.NamespacedName {
	var out []types.NamespacedName
	for _, msg := range messages {
		for _, k := range inUseBy(msg) {
			if k.Namespace == driverNamespace || slices.Contains(out, k) ||
				(attached != nil && k.Namespace == attached.Namespace && k.Name == attached.Name) {
				continue
			}
			if out = append(out, k); len(out) == MaxNamesPerReport {
				return out // each costs a read of the apiserver
			}
		}
	}
	return out
}

// KeptVerdict decides which of the named Services seen gone (goneSince: "namespace/name" → when
// the driver first saw it gone) MetalLB keeps the IP for: those gone for KeptGrace, or every one
// of them when the address says so already (said: its Held condition is KeptByMetalLB, which a
// restart of the driver must not take back for KeptGrace). recheck is when the next one is due
// (zero: none).
func KeptVerdict(goneSince map[string]time.Time, now time.Time, said bool) (kept []string, recheck time.Duration) {
	for name, since := range goneSince {
		wait := KeptGrace - now.Sub(since)
		if said || wait <= 0 {
			kept = append(kept, name)
		} else if recheck == 0 || wait < recheck {
			recheck = wait
		}
	}
	slices.Sort(kept)
	return kept, recheck
}

// KeptSaid: the address says MetalLB keeps its IP for a deleted Service.
func KeptSaid(a *ipamv1.IPAddress) bool {
	c := findCondition(a, ipamv1.ConditionHeld)
	return c != nil && c.Reason == ReasonKeptByMetalLB
}

// kept: MetalLB keeps the IP for a deleted Service of another namespace, by this pass's
// verdict, or by the address's own condition when MetalLB's report on it is gone (it expires
// after an hour, and nothing makes MetalLB repeat it) and nothing newer says otherwise.
func (v *AddressView) kept() bool {
	return len(v.KeptBy) > 0 || (KeptSaid(v.Addr) && !v.Reported)
}

// keptMessage names the Services MetalLB keeps the IP for; when the report is gone, the
// condition's own words stay.
func (v *AddressView) keptMessage() string {
	if len(v.KeptBy) == 0 {
		if c := findCondition(v.Addr, ipamv1.ConditionHeld); c != nil && c.Reason == ReasonKeptByMetalLB {
			return c.Message
		}
	}
	return keptByMessage(v.IP, v.KeptBy)
}

// planKept says that MetalLB keeps the IP for a deleted Service of another namespace:
// Held=False KeptByMetalLB, naming it (the address is the admin's object), with a Warning on the
// address when the condition turns so (a restart of the driver, which finds it said, says
// nothing new).
func planKept(v AddressView, msg string) addressPart {
	p := addressPart{}.set(ipamv1.ConditionHeld, false, ReasonKeptByMetalLB, msg)
	if !KeptSaid(v.Addr) {
		p.Events = append(p.Events, Event{Obj: v.Addr, Warning: true, Reason: ReasonKeptByMetalLB, Message: msg, Once: true})
	}
	return p
}

// planKeptForService reports an attached Service that MetalLB refuses for a deleted Service of
// another namespace (planKept, the condition naming the attached Service too) and tells the
// tenant's Service, naming nothing of another namespace, once per wait: the NotServed Warning is
// not said again for it (plan_notserved.go). unserved is the memory of the wait as planned so far
// (nil: unchanged).
func planKeptForService(v AddressView, unserved *UnservedWait) addressPart {
	s := v.Attached
	waits := fmt.Sprintf("; Service %s/%s, attached to the address, waits for it", s.Namespace, s.Name)
	msg := v.keptMessage()
	if len(v.KeptBy) > 0 {
		msg += waits
	}
	// Said to this Service before: by this driver's memory, or (after a restart of the driver)
	// by the address's condition naming it.
	c := findCondition(v.Addr, ipamv1.ConditionHeld)
	toldBefore := KeptSaid(v.Addr) && strings.HasSuffix(c.Message, waits)
	p := planKept(v, msg)
	w := v.Unserved
	if unserved != nil {
		w = *unserved
	}
	if w.UID != s.UID || w.Since.IsZero() {
		w = UnservedWait{Since: v.Now, UID: s.UID}
	}
	if w.Said || toldBefore {
		return p
	}
	w.Said = true
	p.Unserved = &w
	p.Events = append(p.Events, Event{Obj: s, Warning: true, Reason: ReasonNotServed,
		Message: fmt.Sprintf("MetalLB has not assigned %s (IPAddress %s, reserved for this Service): after a restart of its controller it still counts the address as used by a Service that no longer exists; an administrator frees it by restarting MetalLB's controller",
			v.IP, v.Addr.Name)})
	return p
}
