package driver

import (
	"fmt"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/driverkit"
)

// A Service this driver pinned to its claim's address that MetalLB does not serve.
//
// MetalLB serves a pinned Service moments after it has handled the deletion of the address's
// hold; until then it may refuse the Service ("address also in use by <the hold>"). The chart's
// metallb-iad-handover-events policy keeps that report of an unfinished hand-over off the
// Service, so a refusal that lasts is the driver's to report: MetalLB keeping the IP for a
// placeholder deleted in its restart window (plan_release.go), or anything else that keeps it
// from serving the pin. After NotServedAfter the address says Held=False NotServed and the
// Service gets a Warning, once; both end when MetalLB serves it. Shorter waits are MetalLB's
// backlog (hundreds of Services attaching at once) and cost no write.

// ReasonNotServed (Held=False, and the Warning on the Service): MetalLB has not served the
// attached Service its pinned address for NotServedAfter.
const ReasonNotServed = "NotServed"

// DefaultNotServedAfter is Driver.NotServedAfter when zero: longer than MetalLB takes to work
// through the attaches of a thousand Services at once on a small control plane
// (docs/benchmarks.md).
const DefaultNotServedAfter = 3 * time.Minute

// planNotServed reports an attached Service MetalLB has not served for v.notServedAfter, from
// the driver's memory of when it first saw it so (v.unservedSince), and keeps that memory:
// unserved says whether the attached Service waits now.
func planNotServed(v addressView, unserved bool, status *ipamv1.IPAddressStatus, p *addressPlan) {
	held := findCondition(v.addr, ipamv1.ConditionHeld)
	wasSaid := held != nil && held.Reason == ReasonNotServed
	if !unserved {
		if !v.unservedSince.IsZero() {
			p.unserved = &time.Time{} // forget
		}
		if wasSaid && v.attached != nil {
			// Said once while it lasted; a recurrence is said again.
			p.unsay = append(p.unsay, unsay{obj: v.attached, topic: notServedTopic(v.addr)})
		}
		return
	}
	since := v.unservedSince
	if since.IsZero() {
		since = v.now
		p.unserved = &since
	}
	if v.notServedAfter <= 0 {
		return
	}
	if wait := v.notServedAfter - v.now.Sub(since); wait > 0 {
		// Nothing waits on an event alone (DESIGN §5a): looked at again when it would be due
		// (at most a minute away, as every re-check).
		p.requeue = driverkit.Sooner(p.requeue, min(wait, driverkit.MaxRecheck))
		return
	}
	s := v.attached
	setCondition(v.addr, status, ipamv1.ConditionHeld, false, ReasonNotServed,
		fmt.Sprintf("attached to Service %s/%s, which MetalLB has not served %s for over %s: see the Service's events and MetalLB's controller log",
			s.Namespace, s.Name, v.ip, v.notServedAfter))
	p.events = append(p.events, event{obj: s, warning: true, reason: ReasonNotServed, once: true, topic: notServedTopic(v.addr),
		message: fmt.Sprintf("MetalLB has not assigned %s (IPAddress %s, reserved for this Service) for over %s; its controller log says why (after a restart MetalLB can keep an address for a Service that no longer exists: restarting its controller frees it)",
			v.ip, v.addr.Name, v.notServedAfter)})
	p.requeue = driverkit.Sooner(p.requeue, driverkit.Recheck(since, v.now, time.Second))
}

// notServedTopic is what the Announcer remembers a NotServed Warning under: one per address (a
// dual-stack Service has two).
func notServedTopic(a *ipamv1.IPAddress) string { return ReasonNotServed + "/" + a.Name }
