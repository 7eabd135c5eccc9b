package plan

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestStaleNames(t *testing.T) {
	const ns = "cozy-metallb-iad"
	for _, tc := range []struct {
		name, message string
		live          []string
		want          []string
	}{
		{"one deleted placeholder",
			`Failed to allocate IP for "cozy-metallb-iad/hold-ip-198-18-10-130": can't change sharing key for "cozy-metallb-iad/hold-ip-198-18-10-130", address also in use by cozy-metallb-iad/claim-b7735d74bcc4-v4`,
			nil, []string{"claim-b7735d74bcc4-v4"}},
		{"several, one in a tenant namespace (not ours to release)",
			`Failed to allocate IP for "x/y": can't change sharing key for "x/y", address also in use by tenant-a/web,cozy-metallb-iad/claim-1-v6, cozy-metallb-iad/hold-ip-a`,
			nil, []string{"claim-1-v6", "hold-ip-a"}},
		{"a live placeholder is no ghost",
			`… address also in use by cozy-metallb-iad/claim-1-v4,cozy-metallb-iad/hold-ip-b`,
			[]string{"hold-ip-b"}, []string{"claim-1-v4"}},
		{"another failure (pool exhausted)", `Failed to allocate IP for "a/b": no available IPs`, nil, nil},
		{"only a tenant Service", `… address also in use by tenant-a/web`, nil, nil},
		{"no message", "", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := staleNames(tc.message, ns, tc.live...); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReleaseDue(t *testing.T) {
	const nudge, after = 3 * time.Second, 30 * time.Second
	for _, tc := range []struct {
		name        string
		since, last time.Duration // before now; -1: zero (none)
		known       bool
		due         bool
		wait        time.Duration
	}{
		{"MetalLB named the names: at once", 0, -1, true, true, nudge},
		{"an attached Service just seen unserved: not yet", 0, -1, false, false, after},
		{"unserved for less than releaseAfter", 20 * time.Second, -1, false, false, 10 * time.Second},
		{"unserved for releaseAfter: first round", 30 * time.Second, -1, false, true, 7500 * time.Millisecond},
		{"a round 2s ago: next after the back-off", 40 * time.Second, 2 * time.Second, false, false, 8 * time.Second},
		{"back-off passed: next round", 40 * time.Second, 10 * time.Second, false, true, 10 * time.Second},
		{"a long wait: rounds at most a minute apart", time.Hour, 59 * time.Second, true, false, time.Second},
		{"a guess that has not helped for ten minutes: no more rounds", 11 * time.Minute, time.Minute, false, false, time.Minute},
		{"a long wait: due after a minute", time.Hour, time.Minute, true, true, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(2 * time.Hour)
			since, last := now.Add(-tc.since), time.Time{}
			if tc.last >= 0 {
				last = now.Add(-tc.last)
			}
			due, wait := ReleaseDue(since, last, now, nudge, after, tc.known)
			if due != tc.due || wait != tc.wait {
				t.Fatalf("due %v wait %s, want %v %s", due, wait, tc.due, tc.wait)
			}
		})
	}
	// Guessing off (releaseAfter 0, the default): never due on a guess, and no re-check asked for
	// it; what MetalLB named itself is still released.
	now := t0.Add(2 * time.Hour)
	if due, wait := ReleaseDue(now.Add(-time.Hour), time.Time{}, now, nudge, 0, false); due || wait != 0 {
		t.Errorf("guessing off: due %v wait %s", due, wait)
	}
	if due, _ := ReleaseDue(now, time.Time{}, now, nudge, 0, true); !due {
		t.Error("guessing off: a name MetalLB gave is not released")
	}
}

func release(name, addr string, age time.Duration, now time.Time) *corev1.Service {
	s := ReleaseService(testDriverNS, name, addr)
	s.UID = "release-" + "uid"
	s.CreationTimestamp = metav1.NewTime(now.Add(-age))
	return s
}

func TestPlanRelease(t *testing.T) {
	const ip = "203.0.113.5"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	ghost := ProvisioningName("claim-uid", ipamv1.IPv4, 0)
	refused := `Failed to allocate IP for "` + testDriverNS + `/` + HoldName(name) + `": can't change sharing key for "x", address also in use by ` +
		testDriverNS + "/" + ghost
	withRelease := func(v *AddressView) { v.ReleaseFor, v.ReleaseAfter = 10*time.Second, 30*time.Second }
	// refusedHold: the hold MetalLB refused, naming a deleted provisioning placeholder.
	refusedHold := func(free bool) func(v *AddressView) {
		return func(v *AddressView) {
			withRelease(v)
			v.Holds = []*corev1.Service{hold(name, ip, false)}
			v.Stale.Names, v.Stale.Known = StaleCandidates(v, map[string]string{string(v.Holds[0].UID): refused})
			v.Stale.Free = map[string]bool{ghost: free}
		}
	}
	unserved := pinned(svc("t", "web", "web-uid"), ip)
	// attached: attached to a pinned Service MetalLB does not serve, for wait.
	attached := func(wait time.Duration) func(v *AddressView) {
		return func(v *AddressView) {
			withRelease(v)
			v.Attached = unserved
			v.Addr.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
			v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil)
			v.Stale.Since = v.Now.Add(-wait)
			v.Stale.Free = map[string]bool{}
			for _, n := range v.Stale.Names {
				v.Stale.Free[n] = true
			}
		}
	}
	staleHeld := func(a *ipamv1.IPAddress) *ipamv1.IPAddress {
		SetCondition(a, &a.Status, ipamv1.ConditionHeld, false, ReasonStaleAllocation, "…")
		return a
	}
	for _, tc := range []struct {
		name  string
		view  AddressView
		check func(t *testing.T, v AddressView, p AddressPlan)
	}{
		{"a hold refused for a deleted placeholder: released at once, said once, Held=False naming it",
			view(testAddress(ip, Finalizer), refusedHold(true)), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 1 {
					t.Fatalf("creates %+v", p.Release.Create)
				}
				r := p.Release.Create[0]
				if r.Name != ghost || r.Namespace != testDriverNS || r.Labels[LabelRole] != RoleRelease || r.Labels[LabelAddress] != name ||
					r.Spec.Type != corev1.ServiceTypeClusterIP {
					t.Fatalf("release %+v", r)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonStaleAllocation ||
					!strings.Contains(c.Message, testDriverNS+"/"+ghost) {
					t.Fatalf("held %+v", c)
				}
				if len(p.Events) != 1 || p.Events[0].Reason != ReasonStaleAllocationReleased || !p.Events[0].Once ||
					!strings.Contains(p.Events[0].Message, "MetalLB kept "+ip+" for deleted Service "+testDriverNS+"/"+ghost) {
					t.Fatalf("events %+v", p.Events)
				}
				if w := p.Release.Wait; w == nil || !w.Last.Equal(v.Now) || p.Requeue <= 0 || p.Requeue > v.ReleaseFor {
					t.Fatalf("wait %+v requeue %s", w, p.Requeue)
				}
				if p.Nudge != v.Holds[0] {
					t.Fatal("the refused hold is not touched after the release (MetalLB does not retry it by itself)")
				}
			}},
		{"the named Service exists (not a ghost): nothing released, no StaleAllocation",
			view(testAddress(ip, Finalizer), refusedHold(false)), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 || len(p.Events) != 0 {
					t.Fatalf("%+v", p)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
					t.Fatalf("held %+v", c)
				}
			}},
		{"a release of that name lives: no second one, looked at when it expires",
			view(testAddress(ip, Finalizer), refusedHold(true), func(v *AddressView) {
				v.Stale.Releases = []*corev1.Service{release(ghost, name, 4*time.Second, v.Now)}
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 || len(p.Release.Remove) != 0 || p.Requeue <= 0 || p.Requeue > 6*time.Second {
					t.Fatalf("%+v", p)
				}
			}},
		{"an expired release goes; the hold is served: the wait is forgotten, Held again, said again next time",
			view(staleHeld(testAddress(ip, Finalizer)), func(v *AddressView) {
				withRelease(v)
				v.Holds = []*corev1.Service{hold(name, ip, true)}
				v.Stale.Releases = []*corev1.Service{release(ghost, name, 10*time.Second, v.Now)}
				v.Stale.Since, v.Stale.Last = v.Now.Add(-time.Minute), v.Now.Add(-10*time.Second)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Remove) != 1 || len(p.Release.Create) != 0 || !p.Release.Forget {
					t.Fatalf("%+v", p.Release)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonHeld {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.Unsay, func(u Unsay) bool { return u.Topic == ReasonStaleAllocation }) {
					t.Fatalf("unsay %+v", p.Unsay)
				}
			}},
		{"an attached Service just pinned and not served yet: no release, no write, looked at later",
			view(testAddress(ip, Finalizer), attached(time.Second)), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 || p.Status != nil && cond(p, ipamv1.ConditionHeld).Reason != ReasonAttached || len(p.Events) != 0 {
					t.Fatalf("%+v", p)
				}
				if p.Requeue != 29*time.Second {
					t.Fatalf("requeue %s", p.Requeue)
				}
			}},
		{"an attached Service unserved for releaseAfter: its hold's and its claim's placeholder names released",
			view(testAddress(ip, Finalizer), attached(30*time.Second)), func(t *testing.T, v AddressView, p AddressPlan) {
				var got []string
				for _, r := range p.Release.Create {
					got = append(got, r.Name)
				}
				want := []string{HoldName(name), ghost, ProvisioningName("claim-uid", ipamv1.IPv4, 1)}
				if !slices.Equal(got, want) {
					t.Fatalf("released %v, want %v", got, want)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonStaleAllocation ||
					!strings.Contains(c.Message, "t/web") {
					t.Fatalf("held %+v", c)
				}
				if len(p.Events) != 1 || p.Events[0].Reason != ReasonStaleAllocationReleased {
					t.Fatalf("events %+v", p.Events)
				}
				if p.Nudge != v.Attached {
					t.Fatal("the refused Service is not touched after the release (MetalLB does not retry it by itself)")
				}
			}},
		{"between rounds: nothing, Held stays StaleAllocation, next round scheduled",
			view(staleHeld(testAddress(ip, Finalizer)), attached(40*time.Second), func(v *AddressView) {
				v.Stale.Last = v.Now.Add(-2 * time.Second)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 || len(p.Events) != 0 || p.Requeue != 8*time.Second {
					t.Fatalf("%+v", p)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonStaleAllocation {
					t.Fatalf("held %+v", c)
				}
			}},
		{"another Service holds the IP (a Conflict): no kept allocation to release",
			view(testAddress(ip, Finalizer), attached(time.Minute), func(v *AddressView) {
				v.Holders = []Holder{{Svc: svc("t", "other", "other-uid", ip), InIngress: true}}
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 {
					t.Fatalf("%+v", p.Release)
				}
			}},
		{"the hold the attach deleted had another claim's name (a handed-over placeholder): released too",
			view(testAddress(ip, Finalizer), attached(30*time.Second), func(v *AddressView) {
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil, "claim-0123456789ab-v4")
				v.Stale.Free["claim-0123456789ab-v4"] = true
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if !slices.ContainsFunc(p.Release.Create, func(r *corev1.Service) bool { return r.Name == "claim-0123456789ab-v4" }) {
					t.Fatalf("%+v", p.Release.Create)
				}
			}},
		{"guessing off (the default releaseAfter 0): an attached Service unserved for minutes gets no release",
			view(testAddress(ip, Finalizer), attached(5*time.Minute), func(v *AddressView) {
				v.ReleaseAfter = 0
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil, "hold-x")
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 || len(v.Stale.Names) != 0 {
					t.Fatalf("released %+v (candidates %v) with guessing off", p.Release.Create, v.Stale.Names)
				}
			}},
		{"with names remembered, only those are released (no guessing while MetalLB may be merely slow)",
			view(testAddress(ip, Finalizer), attached(30*time.Second), func(v *AddressView) {
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil, "hold-x")
				for _, n := range []string{"hold-x", HoldName(v.Addr.Name)} {
					v.Stale.Free[n] = true
				}
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 1 || p.Release.Create[0].Name != "hold-x" {
					t.Fatalf("released %+v, want only the remembered hold-x", p.Release.Create)
				}
			}},
		{"a round of the remembered names did not help: the claim's own names are released too (chaos seed 941606543)",
			view(testAddress(ip, Finalizer), attached(90*time.Second), func(v *AddressView) {
				v.Stale.Last = t0.Add(-40 * time.Second)
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil, "hold-x")
				for _, n := range v.Stale.Names {
					v.Stale.Free[n] = true
				}
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				uid := string(v.Addr.Spec.ClaimRef.UID)
				for _, want := range []string{"hold-x", HoldName(v.Addr.Name), ProvisioningName(uid, ipamv1.IPv4, 0), ProvisioningName(uid, ipamv1.IPv4, 1)} {
					if !slices.ContainsFunc(p.Release.Create, func(r *corev1.Service) bool { return r.Name == want }) {
						t.Errorf("%s not released: %+v", want, p.Release.Create)
					}
				}
			}},
		{"MetalLB keeps the attached Service's IP for a deleted Service of another namespace: said, nothing released (chaos seed 515185188)",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				v.KeptBy = []string{"t/gone"}
				attached(2 * time.Minute)(v)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(v.Stale.Names) != 0 || len(p.Release.Create) != 0 {
					t.Fatalf("released %+v (candidates %v) although MetalLB named the kept Service", p.Release.Create, v.Stale.Names)
				}
				c := cond(p, ipamv1.ConditionHeld)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonKeptByMetalLB || !strings.Contains(c.Message, "t/gone") {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.Events, func(e Event) bool { return e.Reason == ReasonKeptByMetalLB && e.Obj == v.Addr && e.Once }) {
					t.Fatalf("events %+v", p.Events)
				}
			}},
		{"the attached Service refused for a kept IP hears it once, naming nothing of another namespace",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				v.KeptBy = []string{"other/gone"}
				attached(2 * time.Minute)(v)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				i := slices.IndexFunc(p.Events, func(e Event) bool { return e.Obj == v.Attached })
				if i < 0 || p.Events[i].Reason != ReasonNotServed || !p.Events[i].Warning || strings.Contains(p.Events[i].Message, "other") {
					t.Fatalf("events %+v", p.Events)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || !strings.HasSuffix(c.Message, "Service t/web, attached to the address, waits for it") {
					t.Fatalf("held %+v", c)
				}
				if p.Unserved == nil || !p.Unserved.Said || p.Unserved.UID != v.Attached.UID {
					t.Fatalf("the Warning is not remembered as said: %+v", p.Unserved)
				}
			}},
		{"said before the driver restarted (its memory gone, MetalLB's report expired): nothing said or written again",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				attached(2 * time.Minute)(v)
				// What the pass that concluded it wrote.
				first := *v
				first.Addr, first.KeptBy = v.Addr.DeepCopy(), []string{"other/gone"}
				v.Addr.Status = *PlanAddress(first).Status
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil) // as the pass reads them: after the address
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Events) != 0 || len(p.Release.Create) != 0 || p.Status != nil {
					t.Fatalf("events %+v, releases %+v, status %+v", p.Events, p.Release.Create, p.Status)
				}
			}},
		{"remembered names are kept while the attached Service is not served yet (the pin not in the cache)",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				withRelease(v)
				v.Attached = svc("t", "web", "web-uid")
				v.Stale.Remembered = true
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if p.Release.Forget {
					t.Fatal("forgot the deleted holds' names before the Service was served")
				}
			}},
		{"and forgotten once it is served",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				withRelease(v)
				v.Attached = pinned(svc("t", "web", "web-uid", ip), ip)
				v.Stale.Remembered = true
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if !p.Release.Forget || len(p.Release.Create) != 0 {
					t.Fatalf("%+v", p.Release)
				}
			}},
		{"an address an admin deleted that the core still protects: released as before (chaos seed 212695508)",
			view(func() *ipamv1.IPAddress {
				a := testAddress(ip, Finalizer, ipamv1.FinalizerAddress)
				a.DeletionTimestamp = &metav1.Time{Time: t0}
				return a
			}(), refusedHold(true)), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 1 || p.Release.Create[0].Name != ghost {
					t.Fatalf("%+v", p.Release)
				}
			}},
		{"a Lost address: MetalLB cannot serve it anyway, nothing released",
			view(testAddress(ip, Finalizer), attached(time.Minute), func(v *AddressView) {
				v.Pool = testPool("198.51.100.0/28")
				v.Stale.Names, v.Stale.Known = StaleCandidates(v, nil)
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if len(p.Release.Create) != 0 {
					t.Fatalf("%+v", p.Release)
				}
			}},
		{"the hold is to be made under a name a release Service has: the release goes first, never taken for the hold",
			view(testAddress(ip, Finalizer), func(v *AddressView) {
				withRelease(v)
				v.Stale.Releases = []*corev1.Service{release(HoldName(name), name, time.Second, v.Now)}
			}), func(t *testing.T, v AddressView, p AddressPlan) {
				if p.CreateHold == nil || p.CreateHold.Name != HoldName(name) || len(p.Release.Remove) != 1 ||
					p.Release.Remove[0].Name != HoldName(name) || len(p.Release.Create) != 0 {
					t.Fatalf("%+v", p)
				}
				if slices.ContainsFunc(p.DeleteHolds, func(s *corev1.Service) bool { return s.Labels[LabelRole] == RoleRelease }) {
					t.Fatal("a release Service counted as a hold")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, tc.view, PlanAddress(tc.view))
		})
	}
}

// The driver's release Services are never placeholders: the indexes, the link rule and the
// attach planner leave them alone.
func TestReleaseServiceIsNoPlaceholder(t *testing.T) {
	r := ReleaseService(testDriverNS, ProvisioningName("u", ipamv1.IPv4, 0), "ip-203-0-113-5")
	if r.Labels[LabelRole] == RoleHold || r.Labels[LabelRole] == RoleProvisioning || r.Spec.Type == corev1.ServiceTypeLoadBalancer {
		t.Fatalf("%+v", r)
	}
	if p := PlanAttach(AttachView{Svc: r, Placeholder: true}); p.Detach || p.Pin != "" || len(p.Attach) != 0 {
		t.Fatalf("%+v", p)
	}
}

// The driver remembers, per address, the last few names of placeholders it deleted while they
// served or held the IP, and forgets them with the wait.
func TestMemoryRemembersDeletedNames(t *testing.T) {
	m := NewMetallbMemory()
	for _, n := range []string{"a", "b", "c", "b", "d", "e"} {
		m.HoldDeleted("ip-1", n)
	}
	m.HoldDeleted("", "ignored")
	if _, got := m.StaleOf("ip-1"); !slices.Equal(got, []string{"c", "b", "d", "e"}) {
		t.Fatalf("remembered %v", got)
	}
	m.SetStale("ip-1", staleWait{Since: t0})
	m.SetUnserved("ip-1", UnservedWait{Since: t0})
	m.EndStale("ip-1")
	if w, got := m.StaleOf("ip-1"); len(got) != 0 || !w.Since.IsZero() || !m.UnservedOf("ip-1").Since.IsZero() {
		t.Fatalf("not forgotten: %v %v", w, got)
	}
	if m.Len() != 0 {
		t.Fatalf("an empty entry is kept: %v", m.m)
	}
}

// The memory of stale clears keeps the last clearLimit within clearMemoryFor, per Service and
// address, and forgets the rest (so it stays bounded).
func TestMemoryOfClears(t *testing.T) {
	m := NewMetallbMemory()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i := range clearLimit + 2 {
		m.NoteCleared("ip-1", "a", t0.Add(time.Duration(i)*time.Minute))
	}
	now := t0.Add(time.Duration(clearLimit+1) * time.Minute)
	if got := m.ClearedOf("ip-1", "a", now); len(got) != clearLimit || !got[len(got)-1].Equal(now) {
		t.Fatalf("got %v", got)
	}
	if got := m.ClearedOf("ip-2", "a", now); len(got) != 0 {
		t.Fatalf("another address: %v", got)
	}
	m.NoteCleared("ip-1", "b", now)
	later := now.Add(clearMemoryFor)
	if got := m.ClearedOf("ip-1", "a", later); len(got) != 0 {
		t.Fatalf("not forgotten: %v", got)
	}
	if m.Len() != 0 {
		t.Fatalf("expired clears are kept: %v", m.m)
	}
	// One entry per address, whatever is remembered of it; gone with the address.
	m.NoteCleared("ip-1", "c", later)
	m.HoldDeleted("ip-1", "hold-ip-1")
	m.SetUnserved("ip-1", UnservedWait{Since: later})
	if m.Len() != 1 {
		t.Fatalf("%d entries for one address", m.Len())
	}
	m.Forget("ip-1")
	if m.Len() != 0 {
		t.Fatal("the address's entry outlived it")
	}
}

// A hold refused because a deleted placeholder of its address keeps the IP under the same sharing
// key: MetalLB reports the placeholders' port in use and names no Service, so the candidates are
// the names the address's placeholders could have had, but the live hold's.
func TestStaleCandidatesForAPlaceholderPortInUse(t *testing.T) {
	const ip = "203.0.113.5"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	v := view(testAddress(ip, Finalizer))
	v.Holds = []*corev1.Service{hold(name, ip, false)}
	v.Holds[0].Name = "hold-second"
	port := `Failed to allocate IP for "` + testDriverNS + `/hold-second": port TCP/1 is already in use on "` + ip + `"`
	names, known := StaleCandidates(&v, map[string]string{string(v.Holds[0].UID): port}, "hold-x")
	want := []string{"hold-x", HoldName(name), ProvisioningName("claim-uid", ipamv1.IPv4, 0), ProvisioningName("claim-uid", ipamv1.IPv4, 1)}
	slices.Sort(want)
	if !known || !slices.Equal(names, want) {
		t.Fatalf("candidates %v (known %v), want %v", names, known, want)
	}
	// Another port, or the same port on another IP, says nothing about the address's placeholders.
	for _, msg := range []string{
		`Failed to allocate IP for "x/y": port TCP/80 is already in use on "` + ip + `"`,
		`Failed to allocate IP for "x/y": port TCP/1 is already in use on "203.0.113.6"`,
	} {
		if names, known := StaleCandidates(&v, map[string]string{string(v.Holds[0].UID): msg}); known || len(names) != 0 {
			t.Errorf("%s: candidates %v (known %v)", msg, names, known)
		}
	}
}
