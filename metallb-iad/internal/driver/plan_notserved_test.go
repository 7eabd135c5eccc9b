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
	const after = 3 * time.Minute
	waiting := pinned(svc("t", "web", "web-uid"), ip)    // pinned, MetalLB shows nothing
	served := pinned(svc("t", "web", "web-uid", ip), ip) // pinned and served
	saidBefore := func() *ipamv1.IPAddress {
		a := testAddress(ip, Finalizer)
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
		a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: ReasonNotServed,
			Message: "m", LastTransitionTime: metav1.NewTime(t0)}}
		return a
	}
	notServedEvents := func(p addressPlan) int {
		n := 0
		for _, e := range p.events {
			if e.reason == ReasonNotServed {
				if !e.warning || !e.once || e.obj.GetName() != "web" || e.topic != notServedTopic(testAddress(ip)) {
					t.Errorf("NotServed event %+v: want a Warning on the Service, said once under its address's topic", e)
				}
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		v     addressView
		check func(t *testing.T, p addressPlan)
	}{
		{"first seen unserved: remembered, nothing said, looked at again when due", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
		}), func(t *testing.T, p addressPlan) {
			if p.unserved == nil || !p.unserved.Equal(t0.Add(10*time.Second)) {
				t.Fatalf("memory %v, want now", p.unserved)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAttached {
				t.Fatalf("Held %+v", c)
			}
			if notServedEvents(p) != 0 || p.requeue != driverkit.MaxRecheck {
				t.Fatalf("events %+v requeue %v", p.events, p.requeue)
			}
		}},
		{"unserved for less than NotServedAfter: MetalLB's backlog, no write", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unservedSince = v.now.Add(-time.Minute)
		}), func(t *testing.T, p addressPlan) {
			if p.unserved != nil || notServedEvents(p) != 0 {
				t.Fatalf("%+v", p)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAttached {
				t.Fatalf("Held %+v", c)
			}
			if p.requeue != driverkit.MaxRecheck {
				t.Fatalf("requeue %v, want a minute (due in two)", p.requeue)
			}
		}},
		{"unserved for NotServedAfter: Held=False NotServed and a Warning on the Service", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unservedSince = v.now.Add(-after)
		}), func(t *testing.T, p addressPlan) {
			c := cond(p, ipamv1.ConditionHeld)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonNotServed {
				t.Fatalf("Held %+v", c)
			}
			if notServedEvents(p) != 1 {
				t.Fatalf("events %+v", p.events)
			}
			if p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("requeue %v: a scheduled re-check while it lasts", p.requeue)
			}
			if p.nudge != nil || p.createHold != nil || len(p.deleteHolds) != 0 {
				t.Fatalf("writes to MetalLB's objects: %+v", p)
			}
		}},
		{"the message stays the same from pass to pass (one status write)", view(saidBefore(), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unservedSince = v.now.Add(-2 * after)
		}), func(t *testing.T, p addressPlan) {
			again := planAddress(view(saidBefore(), func(v *addressView) {
				v.attached, v.notServedAfter = waiting, after
				v.unservedSince = v.now.Add(-2 * after)
				v.now = v.now.Add(time.Minute)
			}))
			if a, b := cond(p, ipamv1.ConditionHeld), cond(again, ipamv1.ConditionHeld); a == nil || b == nil || a.Message != b.Message {
				t.Fatalf("%+v then %+v", a, b)
			}
		}},
		{"served again: Held Attached, memory and say-once memory forgotten", view(saidBefore(), func(v *addressView) {
			v.attached, v.notServedAfter = served, after
			v.unservedSince = v.now.Add(-2 * after)
		}), func(t *testing.T, p addressPlan) {
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonAttached {
				t.Fatalf("Held %+v", c)
			}
			if p.unserved == nil || !p.unserved.IsZero() {
				t.Fatalf("memory %v, want forgotten", p.unserved)
			}
			if len(p.unsay) != 1 || p.unsay[0].obj.GetName() != "web" || p.unsay[0].topic != notServedTopic(testAddress(ip)) {
				t.Fatalf("unsay %+v", p.unsay)
			}
		}},
		{"served, nothing remembered: nothing to forget", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = served, after
		}), func(t *testing.T, p addressPlan) {
			if p.unserved != nil || len(p.unsay) != 0 || notServedEvents(p) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"Lost: MetalLB cannot serve it, Lost says so, not NotServed", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, after
			v.unservedSince = v.now.Add(-2 * after)
			v.pool = nil
		}), func(t *testing.T, p addressPlan) {
			if notServedEvents(p) != 0 {
				t.Fatalf("events %+v", p.events)
			}
			if p.unserved == nil || !p.unserved.IsZero() {
				t.Fatalf("memory %v, want forgotten", p.unserved)
			}
		}},
		{"detached: the memory goes", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.notServedAfter = after
			v.unservedSince = v.now.Add(-time.Minute)
			v.holds = nil
		}), func(t *testing.T, p addressPlan) {
			if p.unserved == nil || !p.unserved.IsZero() {
				t.Fatalf("memory %v, want forgotten", p.unserved)
			}
		}},
		{"reporting off (negative NotServedAfter): remembered, never said", view(testAddress(ip, Finalizer), func(v *addressView) {
			v.attached, v.notServedAfter = waiting, -1
			v.unservedSince = v.now.Add(-time.Hour)
		}), func(t *testing.T, p addressPlan) {
			if notServedEvents(p) != 0 {
				t.Fatalf("events %+v", p.events)
			}
			if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonAttached {
				t.Fatalf("Held %+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, planAddress(tc.v))
		})
	}
}
