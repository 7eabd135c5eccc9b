package plan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
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
	// PlanAddress writes it, its transition at saidAt).
	saidAt := t0.Add(-time.Hour)
	said := func() *ipamv1.IPAddress {
		p := PlanAddress(view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
			v.Unserved = UnservedWait{Since: v.Now.Add(-after), UID: "web-uid"}
		}))
		a := attached()
		a.Status = *p.Status
		for i := range a.Status.Conditions {
			a.Status.Conditions[i].LastTransitionTime = metav1.NewTime(saidAt)
		}
		return a
	}
	mem := func(ago time.Duration) func(*AddressView) {
		return func(v *AddressView) { v.Unserved = UnservedWait{Since: v.Now.Add(-ago), UID: "web-uid"} }
	}
	notServedEvents := func(t *testing.T, p AddressPlan) int {
		n := 0
		for _, e := range p.Events {
			if e.Reason == ReasonNotServed {
				if !e.Warning || e.Obj.GetName() != "web" {
					t.Errorf("NotServed event %+v: want a Warning on the Service", e)
				}
				n++
			}
		}
		return n
	}
	heldReason := func(p AddressPlan, a *ipamv1.IPAddress) string {
		c := cond(p, ipamv1.ConditionHeld)
		if p.Status == nil {
			c = findCondition(a, ipamv1.ConditionHeld)
		}
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
	for _, tc := range []struct {
		name  string
		v     AddressView
		check func(t *testing.T, v AddressView, p AddressPlan)
	}{
		{"first seen unserved: remembered for this Service, nothing said, looked at again", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
		}), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Unserved == nil || *p.Unserved != (UnservedWait{Since: v.Now, UID: "web-uid"}) {
				t.Fatalf("memory %+v, want now for web-uid", p.Unserved)
			}
			if heldReason(p, v.Addr) != "True/"+ReasonAttached || notServedEvents(t, p) != 0 || p.Requeue != driverkit.MaxRecheck {
				t.Fatalf("Held %s events %+v requeue %v", heldReason(p, v.Addr), p.Events, p.Requeue)
			}
		}},
		{"unserved for less than NotServedAfter: MetalLB's backlog, no write", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
		}, mem(after-30*time.Second)), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Unserved != nil || notServedEvents(t, p) != 0 || heldReason(p, v.Addr) != "True/"+ReasonAttached {
				t.Fatalf("%+v", p)
			}
			if p.Requeue != 30*time.Second {
				t.Fatalf("requeue %v, want when it is due", p.Requeue)
			}
		}},
		{"unserved for NotServedAfter: Held=False NotServed and one Warning on the Service", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
		}, mem(after)), func(t *testing.T, v AddressView, p AddressPlan) {
			if heldReason(p, v.Addr) != "False/"+ReasonNotServed || notServedEvents(t, p) != 1 {
				t.Fatalf("Held %s events %+v", heldReason(p, v.Addr), p.Events)
			}
			if p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("requeue %v: a scheduled re-check while it lasts", p.Requeue)
			}
			if p.Nudge != nil || p.CreateHold != nil || len(p.DeleteHolds) != 0 {
				t.Fatalf("writes to MetalLB's objects: %+v", p)
			}
		}},
		{"said, still unserved: no write, nothing said again", view(said(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
		}, mem(2*after)), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Status != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("status %+v events %+v", p.Status, p.Events)
			}
		}},
		{"said before the driver restarted (no memory): still NotServed at once, nothing said again, the wait remembered", view(said(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
		}), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Status != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("status %+v events %+v", p.Status, p.Events)
			}
			if p.Unserved == nil || !p.Unserved.Since.Equal(saidAt.Add(-after)) || p.Unserved.UID != "web-uid" {
				t.Fatalf("memory %+v, want from the condition's transition", p.Unserved)
			}
		}},
		{"served again: Held Attached, the memory forgotten (a recurrence is said again)", view(said(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = served, after
		}, mem(2*after)), func(t *testing.T, v AddressView, p AddressPlan) {
			if heldReason(p, v.Addr) != "True/"+ReasonAttached {
				t.Fatalf("Held %s", heldReason(p, v.Addr))
			}
			if p.Unserved == nil || *p.Unserved != (UnservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.Unserved)
			}
		}},
		{"served, nothing remembered: nothing to forget", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = served, after
		}), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Unserved != nil || notServedEvents(t, p) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"re-linked: a wait remembered for another Service does not count for this one", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
			v.Unserved = UnservedWait{Since: v.Now.Add(-time.Hour), UID: "old-uid"}
		}), func(t *testing.T, v AddressView, p AddressPlan) {
			if notServedEvents(t, p) != 0 || heldReason(p, v.Addr) != "True/"+ReasonAttached {
				t.Fatalf("reported at once: %+v", p)
			}
			if p.Unserved == nil || *p.Unserved != (UnservedWait{Since: v.Now, UID: "web-uid"}) {
				t.Fatalf("memory %+v, want counted from now for web-uid", p.Unserved)
			}
		}},
		{"Lost: MetalLB cannot serve it, Lost says so, not NotServed", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, after
			v.Pool = nil
		}, mem(2*after)), func(t *testing.T, v AddressView, p AddressPlan) {
			if notServedEvents(t, p) != 0 {
				t.Fatalf("events %+v", p.Events)
			}
			if p.Unserved == nil || *p.Unserved != (UnservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.Unserved)
			}
		}},
		{"detached: the memory goes", view(testAddress(ip, Finalizer), mem(time.Minute)), func(t *testing.T, v AddressView, p AddressPlan) {
			if p.Unserved == nil || *p.Unserved != (UnservedWait{}) {
				t.Fatalf("memory %+v, want forgotten", p.Unserved)
			}
		}},
		{"reporting off (negative NotServedAfter): never said", view(attached(), func(v *AddressView) {
			v.Attached, v.NotServedAfter = waiting, -1
		}, mem(time.Hour)), func(t *testing.T, v AddressView, p AddressPlan) {
			if notServedEvents(t, p) != 0 || heldReason(p, v.Addr) != "True/"+ReasonAttached {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, tc.v, PlanAddress(tc.v))
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
	v := view(a, func(v *AddressView) {
		v.Attached, v.NotServedAfter = pinned(svc("t", "web", "web-uid"), ip), 10*time.Minute
		v.ReleaseFor, v.ReleaseAfter = 10*time.Second, 30*time.Second
	})
	v.Stale.Names, v.Stale.Known = StaleCandidates(&v, nil)
	v.Stale.Free = map[string]bool{}
	for _, n := range v.Stale.Names {
		v.Stale.Free[n] = true
	}
	said, sawNotServed := 0, false
	for range 120 { // 20 minutes, a pass every 10 s (the Service's and the re-checks' passes)
		p := PlanAddress(v)
		for _, e := range p.Events {
			if e.Reason == ReasonNotServed {
				said++
			}
		}
		// What the driver applies: the status, its memories.
		if p.Status != nil {
			v.Addr = v.Addr.DeepCopy()
			v.Addr.Status = *p.Status
			if c := findCondition(v.Addr, ipamv1.ConditionHeld); c != nil && c.Reason == ReasonNotServed {
				sawNotServed = true
			}
		}
		if p.Unserved != nil {
			v.Unserved = *p.Unserved
		}
		if w := p.Release.Wait; w != nil {
			v.Stale.Since, v.Stale.Last = w.Since, w.Last
		}
		v.Now = v.Now.Add(10 * time.Second)
	}
	if said != 1 {
		t.Fatalf("NotServed said %d times over 20 minutes unserved, want once (Held showed NotServed: %v)", said, sawNotServed)
	}
}
