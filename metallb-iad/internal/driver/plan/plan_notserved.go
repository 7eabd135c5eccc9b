package plan

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// A Service this driver pinned to its claim's address that MetalLB does not serve.
//
// MetalLB serves a pinned Service moments after it has handled the deletion of the address's
// hold; until then it may refuse the Service ("address also in use by <the hold>"). The chart's
// metallb-iad-handover-events policy keeps that report of an unfinished hand-over off the
// Service, so a refusal that lasts is the driver's to report: MetalLB keeping the IP for a
// placeholder deleted in its restart window (plan_release.go), or anything else that keeps it
// from serving the pin. After NotServedAfter the address says Held=False NotServed and the
// Service gets one Warning, when the condition turns so; both end when MetalLB serves it, and a
// recurrence is said again. Shorter waits are MetalLB's backlog and cost no write.

// ReasonNotServed (Held=False, and the Warning on the Service): MetalLB has not served the
// attached Service its pinned address for NotServedAfter.
const ReasonNotServed = "NotServed"

// DefaultNotServedAfter is Driver.NotServedAfter when zero. MetalLB takes minutes to work
// through a thousand attaches at once on a small control plane (it passes over every Service
// after each hold it sees deleted: docs/benchmarks.md), and a Service is not reported while
// MetalLB may merely not have got to it.
const DefaultNotServedAfter = 10 * time.Minute

// UnservedWait is the driver's memory of an attached Service waiting unserved: since when, and
// which Service (a re-link may attach another one to the address before a pass sees it free).
type UnservedWait struct {
	Since time.Time
	UID   types.UID
	// Said: the Warning was sent for this wait. Held can show another reason meanwhile (the
	// driver releasing a stale allocation for the Service, plan_release.go), and the Warning
	// is still said once.
	Said bool
}

// planNotServed reports an attached Service MetalLB has not served for v.notServedAfter (unserved
// says it waits now), from the driver's memory of when it first saw it so (v.unserved), and keeps
// that memory.
func planNotServed(v AddressView, unserved bool) addressPart {
	var p addressPart
	held := findCondition(v.Addr, ipamv1.ConditionHeld)
	// A KeptByMetalLB condition told the Service already (planKeptForService).
	said := held != nil && held.Status == metav1.ConditionFalse && (held.Reason == ReasonNotServed || held.Reason == ReasonKeptByMetalLB)
	var since time.Time
	if v.Attached != nil && v.Unserved.UID == v.Attached.UID {
		since, said = v.Unserved.Since, said || v.Unserved.Said
	}
	if !unserved {
		if !v.Unserved.Since.IsZero() {
			p.Unserved = &UnservedWait{} // forget (this Service's wait, or another's)
		}
		return p
	}
	if since.IsZero() {
		since = v.Now
		if said {
			// Said before this driver restarted (its memory went with it): still due.
			since = held.LastTransitionTime.Add(-v.NotServedAfter)
		}
		p.Unserved = &UnservedWait{Since: since, UID: v.Attached.UID}
	}
	if v.NotServedAfter <= 0 {
		return p
	}
	if wait := v.NotServedAfter - v.Now.Sub(since); wait > 0 && !said {
		// Nothing waits on an event alone (docs/design.md#nothing-waits-on-an-event-alone): looked
		// at again when it would be due (at most a minute away, as every re-check).
		p.Requeue = driverkit.Sooner(p.Requeue, min(wait, driverkit.MaxRecheck))
		return p
	}
	s := v.Attached
	p = p.set(ipamv1.ConditionHeld, false, ReasonNotServed,
		fmt.Sprintf("attached to Service %s/%s, which MetalLB has not served %s for over %s: see the Service's events and MetalLB's controller log",
			s.Namespace, s.Name, v.IP, v.NotServedAfter))
	if !said {
		// Said once per wait, when the condition turns, after its write (a failed write says it
		// again on the next pass, not twice); the memory (kept after the write) remembers it
		// while Held shows another reason, and a restart of the driver says nothing new while
		// Held still shows NotServed.
		p.Unserved = &UnservedWait{Since: since, UID: s.UID, Said: true}
		p.Events = append(p.Events, Event{Obj: s, Warning: true, Reason: ReasonNotServed,
			Message: fmt.Sprintf("MetalLB has not assigned %s (IPAddress %s, reserved for this Service) for over %s; its controller log says why (after a restart MetalLB can keep an address for a Service that no longer exists: restarting its controller frees it)",
				v.IP, v.Addr.Name, v.NotServedAfter)})
	}
	p.Requeue = driverkit.Sooner(p.Requeue, driverkit.Recheck(since, v.Now, time.Second))
	return p
}
