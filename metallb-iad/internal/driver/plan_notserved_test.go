package driver

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/driverkit"
)

func TestPlanNotServed(t *testing.T) {
	const ip = "203.0.113.5"
	const after = 10 * time.Minute
	waiting := pinned(svc("t", "web", "web-uid"), ip)    // pinned, MetalLB shows nothing
	served := pinned(svc("t", "web", "web-uid", ip), ip) // pinned and served
	attached := func() *ipamv1.IPAddress {
		a := testAddress(ip, Finalizer)
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
		return a
	}
	// said is the address as the driver wrote it once it reported the Service (the condition as
	// planAddress writes it, its transition at saidAt).
	saidAt := t0.Add(-time.Hour)
	said := func() *ipamv1.IPAddress {
		p := planAddress(view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unserved = unservedWait{since: v.now.Add(-after), uid: "web-uid"}
		}))
		a := attached()
		a.Status = *p.status
		for i := range a.Status.Conditions {
			a.Status.Conditions[i].LastTransitionTime = metav1.NewTime(saidAt)
		}
		return a
	}
	mem := func(ago time.Duration) func(*addressView) {
		return func(v *addressView) { v.unserved = unservedWait{since: v.now.Add(-ago), uid: "web-uid"} }
	}
	notServedEvents := func(t *testing.T, p addressPlan) int {
		n := 0
		for _, e := range p.events {
			if e.reason == ReasonNotServed {
				if !e.warning || e.obj.GetName() != "web" {
					t.Errorf("NotServed event %+v: want a Warning on the Service", e)
				}
				n++
			}
		}
		return n
	}
	heldReason := func(p addressPlan, a *ipamv1.IPAddress) string {
		c := cond(p, ipamv1.ConditionHeld)
		if p.status == nil {
			c = findCondition(a, ipamv1.ConditionHeld)
		}
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
	for _, tc := range []struct {
		name  string
		v     addressView
		check func(t *testing.T, v addressView, p addressPlan)
	}{
		{"first seen unserved: remembered for this Service, nothing said, looked at again", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}), func(t *testing.T, v addressView, p addressPlan) {
			if p.unserved == nil || *p.unserved != (unservedWait{since: v.now, uid: "web-uid"}) {
				t.Fatalf("memory %+v, want now for web-uid", p.unserved)
			}
			if heldReason(p, v.addr) != "True/"+ReasonAttached || notServedEvents(t, p) != 0 || p.requeue != driverkit.MaxRecheck {
				t.Fatalf("Held %s events %+v requeue %v", heldReason(p, v.addr), p.events, p.requeue)
			}
		}},
		{"unserved for less than NotServedAfter: MetalLB's backlog, no write", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}, mem(after-30*time.Second)), func(t *testing.T, v addressView, p addressPlan) {
			if p.unserved != nil || notServedEvents(t, p) != 0 || heldReason(p, v.addr) != "True/"+ReasonAttached {
				t.Fatalf("%+v", p)
			}
			if p.requeue != 30*time.Second {
				t.Fatalf("requeue %v, want when it is due", p.requeue)
			}
		}},
		{"unserved for NotServedAfter: Held=False NotServed and one Warning on the Service", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}, mem(after)), func(t *testing.T, v addressView, p addressPlan) {
			if heldReason(p, v.addr) != "False/"+ReasonNotServed || notServedEvents(t, p) != 1 {
				t.Fatalf("Held %s events %+v", heldReason(p, v.addr), p.events)
			}
			if p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("requeue %v: a scheduled re-check while it lasts", p.requeue)
			}
			if p.nudge != nil || p.createHold != nil || len(p.deleteHolds) != 0 {
				t.Fatalf("writes to MetalLB's objects: %+v", p)
			}
		}},
		{"said, still unserved: no write, nothing said again", view(said(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}, mem(2*after)), func(t *testing.T, v addressView, p addressPlan) {
			if p.status != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("status %+v events %+v", p.status, p.events)
			}
		}},
		{"said before the driver restarted (no memory): still NotServed at once, nothing said again, the wait remembered", view(said(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}), func(t *testing.T, v addressView, p addressPlan) {
			if p.status != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("status %+v events %+v", p.status, p.events)
			}
			if p.unserved == nil || !p.unserved.since.Equal(saidAt.Add(-after)) || p.unserved.uid != "web-uid" {
				t.Fatalf("memory %+v, want from the condition's transition", p.unserved)
			}
		}},
		{"served again: Held Attached, the memory forgotten (a recurrence is said again)", view(said(), func(v *addressView) {
			v.attached, v.notServedAfter = served, after
		}, mem(2*after)), func(t *testing.T, v addressView, p addressPlan) {
			if heldReason(p, v.addr) != "True/"+ReasonAttached {
				t.Fatalf("Held %s", heldReason(p, v.addr))
			}
			if p.unserved == nil || *p.unserved != (unservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.unserved)
			}
		}},
		{"served, nothing remembered: nothing to forget", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = served, after
		}), func(t *testing.T, v addressView, p addressPlan) {
			if p.unserved != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"re-linked: a wait remembered for another Service does not count for this one", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unserved = unservedWait{since: v.now.Add(-time.Hour), uid: "old-uid"}
		}), func(t *testing.T, v addressView, p addressPlan) {
			if notServedEvents(t, p) != 0 || heldReason(p, v.addr) != "True/"+ReasonAttached {
				t.Fatalf("reported at once: %+v", p)
			}
			if p.unserved == nil || *p.unserved != (unservedWait{since: v.now, uid: "web-uid"}) {
				t.Fatalf("memory %+v, want counted from now for web-uid", p.unserved)
			}
		}},
		{"Lost: MetalLB cannot serve it, Lost says so, not NotServed", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.pool = nil
		}, mem(2*after)), func(t *testing.T, v addressView, p addressPlan) {
			if notServedEvents(t, p) != 0 {
				t.Fatalf("events %+v", p.events)
			}
			if p.unserved == nil || *p.unserved != (unservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.unserved)
			}
		}},
		{"detached: the memory goes", view(testAddress(ip, Finalizer), mem(time.Minute)), func(t *testing.T, v addressView, p addressPlan) {
			if p.unserved == nil || *p.unserved != (unservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.unserved)
			}
		}},
		{"reporting off (negative NotServedAfter): never said", view(attached(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, -1
		}, mem(time.Hour)), func(t *testing.T, v addressView, p addressPlan) {
			if notServedEvents(t, p) != 0 || heldReason(p, v.addr) != "True/"+ReasonAttached {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, tc.v, planAddress(tc.v))
		})
	}
}

// TestNotServedIsSaidOnceWhileReleasing passes over an attached Service MetalLB never serves,
// with the guessed release on (releaseAfter): Held shows StaleAllocation while the driver releases,
// which used to hide that NotServed was said, so every pass after NotServedAfter said it again.
func TestNotServedIsSaidOnceWhileReleasing(t *testing.T) {
	const ip = "203.0.113.5"
	a := testAddress(ip, Finalizer)
	a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
	v := view(a, func(v *addressView) {
		v.attached, v.notServedAfter = pinned(svc("t", "web", "web-uid"), ip), 10*time.Minute
		v.releaseFor, v.releaseAfter = 10*time.Second, 30*time.Second
	})
	v.stale.names, v.stale.known = staleCandidates(&v, nil)
	v.stale.free = map[string]bool{}
	for _, n := range v.stale.names {
		v.stale.free[n] = true
	}
	said, sawNotServed := 0, false
	for range 120 { // 20 minutes, a pass every 10 s (the Service's and the re-checks' passes)
		p := planAddress(v)
		for _, e := range p.events {
			if e.reason == ReasonNotServed {
				said++
			}
		}
		// What the driver applies: the status, its memories.
		if p.status != nil {
			v.addr = v.addr.DeepCopy()
			v.addr.Status = *p.status
			if c := findCondition(v.addr, ipamv1.ConditionHeld); c != nil && c.Reason == ReasonNotServed {
				sawNotServed = true
			}
		}
		if p.unserved != nil {
			v.unserved = *p.unserved
		}
		if w := p.release.wait; w != nil {
			v.stale.since, v.stale.last = w.since, w.last
		}
		v.now = v.now.Add(10 * time.Second)
	}
	if said != 1 {
		t.Fatalf("NotServed said %d times over 20 minutes unserved, want once (Held showed NotServed: %v)", said, sawNotServed)
	}
}
