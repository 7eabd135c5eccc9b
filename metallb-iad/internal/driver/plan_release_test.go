package driver

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
			due, wait := releaseDue(since, last, now, nudge, after, tc.known)
			if due != tc.due || wait != tc.wait {
				t.Fatalf("due %v wait %s, want %v %s", due, wait, tc.due, tc.wait)
			}
		})
	}
	// Guessing off (releaseAfter 0, the default): never due on a guess, and no re-check asked for
	// it; what MetalLB named itself is still released.
	now := t0.Add(2 * time.Hour)
	if due, wait := releaseDue(now.Add(-time.Hour), time.Time{}, now, nudge, 0, false); due || wait != 0 {
		t.Errorf("guessing off: due %v wait %s", due, wait)
	}
	if due, _ := releaseDue(now, time.Time{}, now, nudge, 0, true); !due {
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
	withRelease := func(v *addressView) { v.releaseFor, v.releaseAfter = 10*time.Second, 30*time.Second }
	// refusedHold: the hold MetalLB refused, naming a deleted provisioning placeholder.
	refusedHold := func(free bool) func(v *addressView) {
		return func(v *addressView) {
			withRelease(v)
			v.holds = []*corev1.Service{hold(name, ip, false)}
			v.stale.names, v.stale.known = staleCandidates(v, map[string]string{string(v.holds[0].UID): refused})
			v.stale.free = map[string]bool{ghost: free}
		}
	}
	unserved := pinned(svc("t", "web", "web-uid"), ip)
	// attached: attached to a pinned Service MetalLB does not serve, for wait.
	attached := func(wait time.Duration) func(v *addressView) {
		return func(v *addressView) {
			withRelease(v)
			v.attached = unserved
			v.addr.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "web-uid"}
			v.stale.names, v.stale.known = staleCandidates(v, nil)
			v.stale.since = v.now.Add(-wait)
			v.stale.free = map[string]bool{}
			for _, n := range v.stale.names {
				v.stale.free[n] = true
			}
		}
	}
	staleHeld := func(a *ipamv1.IPAddress) *ipamv1.IPAddress {
		setCondition(a, &a.Status, ipamv1.ConditionHeld, false, ReasonStaleAllocation, "…")
		return a
	}
	for _, tc := range []struct {
		name  string
		view  addressView
		check func(t *testing.T, v addressView, p addressPlan)
	}{
		{"a hold refused for a deleted placeholder: released at once, said once, Held=False naming it",
			view(testAddress(ip, Finalizer), refusedHold(true)), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 1 {
					t.Fatalf("creates %+v", p.release.create)
				}
				r := p.release.create[0]
				if r.Name != ghost || r.Namespace != testDriverNS || r.Labels[LabelRole] != RoleRelease || r.Labels[LabelAddress] != name ||
					r.Spec.Type != corev1.ServiceTypeClusterIP {
					t.Fatalf("release %+v", r)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonStaleAllocation ||
					!strings.Contains(c.Message, testDriverNS+"/"+ghost) {
					t.Fatalf("held %+v", c)
				}
				if len(p.events) != 1 || p.events[0].reason != ReasonStaleAllocationReleased || !p.events[0].once ||
					!strings.Contains(p.events[0].message, "MetalLB kept "+ip+" for deleted Service "+testDriverNS+"/"+ghost) {
					t.Fatalf("events %+v", p.events)
				}
				if w := p.release.wait; w == nil || !w.last.Equal(v.now) || p.requeue <= 0 || p.requeue > v.releaseFor {
					t.Fatalf("wait %+v requeue %s", w, p.requeue)
				}
				if p.nudge != v.holds[0] {
					t.Fatal("the refused hold is not touched after the release (MetalLB does not retry it by itself)")
				}
			}},
		{"the named Service exists (not a ghost): nothing released, no StaleAllocation",
			view(testAddress(ip, Finalizer), refusedHold(false)), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 || len(p.events) != 0 {
					t.Fatalf("%+v", p)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonWaitingForMetalLB {
					t.Fatalf("held %+v", c)
				}
			}},
		{"a release of that name lives: no second one, looked at when it expires",
			view(testAddress(ip, Finalizer), refusedHold(true), func(v *addressView) {
				v.stale.releases = []*corev1.Service{release(ghost, name, 4*time.Second, v.now)}
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 || len(p.release.remove) != 0 || p.requeue <= 0 || p.requeue > 6*time.Second {
					t.Fatalf("%+v", p)
				}
			}},
		{"an expired release goes; the hold is served: the wait is forgotten, Held again, said again next time",
			view(staleHeld(testAddress(ip, Finalizer)), func(v *addressView) {
				withRelease(v)
				v.holds = []*corev1.Service{hold(name, ip, true)}
				v.stale.releases = []*corev1.Service{release(ghost, name, 10*time.Second, v.now)}
				v.stale.since, v.stale.last = v.now.Add(-time.Minute), v.now.Add(-10*time.Second)
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.remove) != 1 || len(p.release.create) != 0 || !p.release.forget {
					t.Fatalf("%+v", p.release)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonHeld {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.unsay, func(u unsay) bool { return u.topic == ReasonStaleAllocation }) {
					t.Fatalf("unsay %+v", p.unsay)
				}
			}},
		{"an attached Service just pinned and not served yet: no release, no write, looked at later",
			view(testAddress(ip, Finalizer), attached(time.Second)), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 || p.status != nil && cond(p, ipamv1.ConditionHeld).Reason != ReasonAttached || len(p.events) != 0 {
					t.Fatalf("%+v", p)
				}
				if p.requeue != 29*time.Second {
					t.Fatalf("requeue %s", p.requeue)
				}
			}},
		{"an attached Service unserved for releaseAfter: its hold's and its claim's placeholder names released",
			view(testAddress(ip, Finalizer), attached(30*time.Second)), func(t *testing.T, v addressView, p addressPlan) {
				var got []string
				for _, r := range p.release.create {
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
				if len(p.events) != 1 || p.events[0].reason != ReasonStaleAllocationReleased {
					t.Fatalf("events %+v", p.events)
				}
				if p.nudge != v.attached {
					t.Fatal("the refused Service is not touched after the release (MetalLB does not retry it by itself)")
				}
			}},
		{"between rounds: nothing, Held stays StaleAllocation, next round scheduled",
			view(staleHeld(testAddress(ip, Finalizer)), attached(40*time.Second), func(v *addressView) {
				v.stale.last = v.now.Add(-2 * time.Second)
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 || len(p.events) != 0 || p.requeue != 8*time.Second {
					t.Fatalf("%+v", p)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || c.Reason != ReasonStaleAllocation {
					t.Fatalf("held %+v", c)
				}
			}},
		{"another Service holds the IP (a Conflict): no kept allocation to release",
			view(testAddress(ip, Finalizer), attached(time.Minute), func(v *addressView) {
				v.holders = []holder{{svc: svc("t", "other", "other-uid", ip), inIngress: true}}
				v.stale.names, v.stale.known = staleCandidates(v, nil)
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 {
					t.Fatalf("%+v", p.release)
				}
			}},
		{"the hold the attach deleted had another claim's name (a handed-over placeholder): released too",
			view(testAddress(ip, Finalizer), attached(30*time.Second), func(v *addressView) {
				v.stale.names, v.stale.known = staleCandidates(v, nil, "claim-0123456789ab-v4")
				v.stale.free["claim-0123456789ab-v4"] = true
			}), func(t *testing.T, v addressView, p addressPlan) {
				if !slices.ContainsFunc(p.release.create, func(r *corev1.Service) bool { return r.Name == "claim-0123456789ab-v4" }) {
					t.Fatalf("%+v", p.release.create)
				}
			}},
		{"guessing off (the default releaseAfter 0): an attached Service unserved for minutes gets no release",
			view(testAddress(ip, Finalizer), attached(5*time.Minute), func(v *addressView) {
				v.releaseAfter = 0
				v.stale.names, v.stale.known = staleCandidates(v, nil, "hold-x")
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 || len(v.stale.names) != 0 {
					t.Fatalf("released %+v (candidates %v) with guessing off", p.release.create, v.stale.names)
				}
			}},
		{"with names remembered, only those are released (no guessing while MetalLB may be merely slow)",
			view(testAddress(ip, Finalizer), attached(30*time.Second), func(v *addressView) {
				v.stale.names, v.stale.known = staleCandidates(v, nil, "hold-x")
				for _, n := range []string{"hold-x", HoldName(v.addr.Name)} {
					v.stale.free[n] = true
				}
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 1 || p.release.create[0].Name != "hold-x" {
					t.Fatalf("released %+v, want only the remembered hold-x", p.release.create)
				}
			}},
		{"a round of the remembered names did not help: the claim's own names are released too (chaos seed 941606543)",
			view(testAddress(ip, Finalizer), attached(90*time.Second), func(v *addressView) {
				v.stale.last = t0.Add(-40 * time.Second)
				v.stale.names, v.stale.known = staleCandidates(v, nil, "hold-x")
				for _, n := range v.stale.names {
					v.stale.free[n] = true
				}
			}), func(t *testing.T, v addressView, p addressPlan) {
				uid := string(v.addr.Spec.ClaimRef.UID)
				for _, want := range []string{"hold-x", HoldName(v.addr.Name), ProvisioningName(uid, ipamv1.IPv4, 0), ProvisioningName(uid, ipamv1.IPv4, 1)} {
					if !slices.ContainsFunc(p.release.create, func(r *corev1.Service) bool { return r.Name == want }) {
						t.Errorf("%s not released: %+v", want, p.release.create)
					}
				}
			}},
		{"MetalLB keeps the attached Service's IP for a deleted Service of another namespace: said, nothing released (chaos seed 515185188)",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				v.keptBy = []string{"t/gone"}
				attached(2 * time.Minute)(v)
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(v.stale.names) != 0 || len(p.release.create) != 0 {
					t.Fatalf("released %+v (candidates %v) although MetalLB named the kept Service", p.release.create, v.stale.names)
				}
				c := cond(p, ipamv1.ConditionHeld)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonKeptByMetalLB || !strings.Contains(c.Message, "t/gone") {
					t.Fatalf("held %+v", c)
				}
				if !slices.ContainsFunc(p.events, func(e event) bool { return e.reason == ReasonKeptByMetalLB && e.obj == v.addr && e.once }) {
					t.Fatalf("events %+v", p.events)
				}
			}},
		{"the attached Service refused for a kept IP hears it once, naming nothing of another namespace",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				v.keptBy = []string{"other/gone"}
				attached(2 * time.Minute)(v)
			}), func(t *testing.T, v addressView, p addressPlan) {
				i := slices.IndexFunc(p.events, func(e event) bool { return e.obj == v.attached })
				if i < 0 || p.events[i].reason != ReasonNotServed || !p.events[i].warning || strings.Contains(p.events[i].message, "other") {
					t.Fatalf("events %+v", p.events)
				}
				if c := cond(p, ipamv1.ConditionHeld); c == nil || !strings.HasSuffix(c.Message, "Service t/web, attached to the address, waits for it") {
					t.Fatalf("held %+v", c)
				}
				if p.unserved == nil || !p.unserved.said || p.unserved.uid != v.attached.UID {
					t.Fatalf("the Warning is not remembered as said: %+v", p.unserved)
				}
			}},
		{"said before the driver restarted (its memory gone, MetalLB's report expired): nothing said or written again",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				attached(2 * time.Minute)(v)
				// What the pass that concluded it wrote.
				first := *v
				first.addr, first.keptBy = v.addr.DeepCopy(), []string{"other/gone"}
				v.addr.Status = *planAddress(first).status
				v.stale.names, v.stale.known = staleCandidates(v, nil) // as the pass reads them: after the address
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.events) != 0 || len(p.release.create) != 0 || p.status != nil {
					t.Fatalf("events %+v, releases %+v, status %+v", p.events, p.release.create, p.status)
				}
			}},
		{"remembered names are kept while the attached Service is not served yet (the pin not in the cache)",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				withRelease(v)
				v.attached = svc("t", "web", "web-uid")
				v.stale.remembered = true
			}), func(t *testing.T, v addressView, p addressPlan) {
				if p.release.forget {
					t.Fatal("forgot the deleted holds' names before the Service was served")
				}
			}},
		{"and forgotten once it is served",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				withRelease(v)
				v.attached = pinned(svc("t", "web", "web-uid", ip), ip)
				v.stale.remembered = true
			}), func(t *testing.T, v addressView, p addressPlan) {
				if !p.release.forget || len(p.release.create) != 0 {
					t.Fatalf("%+v", p.release)
				}
			}},
		{"an address an admin deleted that the core still protects: released as before (chaos seed 212695508)",
			view(func() *ipamv1.IPAddress {
				a := testAddress(ip, Finalizer, ipamv1.FinalizerAddress)
				a.DeletionTimestamp = &metav1.Time{Time: t0}
				return a
			}(), refusedHold(true)), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 1 || p.release.create[0].Name != ghost {
					t.Fatalf("%+v", p.release)
				}
			}},
		{"a Lost address: MetalLB cannot serve it anyway, nothing released",
			view(testAddress(ip, Finalizer), attached(time.Minute), func(v *addressView) {
				v.pool = testPool("198.51.100.0/28")
				v.stale.names, v.stale.known = staleCandidates(v, nil)
			}), func(t *testing.T, v addressView, p addressPlan) {
				if len(p.release.create) != 0 {
					t.Fatalf("%+v", p.release)
				}
			}},
		{"the hold is to be made under a name a release Service has: the release goes first, never taken for the hold",
			view(testAddress(ip, Finalizer), func(v *addressView) {
				withRelease(v)
				v.stale.releases = []*corev1.Service{release(HoldName(name), name, time.Second, v.now)}
			}), func(t *testing.T, v addressView, p addressPlan) {
				if p.createHold == nil || p.createHold.Name != HoldName(name) || len(p.release.remove) != 1 ||
					p.release.remove[0].Name != HoldName(name) || len(p.release.create) != 0 {
					t.Fatalf("%+v", p)
				}
				if slices.ContainsFunc(p.deleteHolds, func(s *corev1.Service) bool { return s.Labels[LabelRole] == RoleRelease }) {
					t.Fatal("a release Service counted as a hold")
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, tc.view, planAddress(tc.view))
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
	if p := planAttach(attachView{svc: r, placeholder: true}); p.detach || p.pin != "" || len(p.attach) != 0 {
		t.Fatalf("%+v", p)
	}
}

// The driver remembers, per address, the last few names of placeholders it deleted while they
// served or held the IP, and forgets them with the wait.
func TestMemoryRemembersDeletedNames(t *testing.T) {
	m := newMetallbMemory()
	for _, n := range []string{"a", "b", "c", "b", "d", "e"} {
		m.holdDeleted("ip-1", n)
	}
	m.holdDeleted("", "ignored")
	if _, got := m.staleOf("ip-1"); !slices.Equal(got, []string{"c", "b", "d", "e"}) {
		t.Fatalf("remembered %v", got)
	}
	m.setStale("ip-1", staleWait{since: t0})
	m.setUnserved("ip-1", unservedWait{since: t0})
	m.endStale("ip-1")
	if w, got := m.staleOf("ip-1"); len(got) != 0 || !w.since.IsZero() || !m.unservedOf("ip-1").since.IsZero() {
		t.Fatalf("not forgotten: %v %v", w, got)
	}
	if m.Len() != 0 {
		t.Fatalf("an empty entry is kept: %v", m.m)
	}
}

// The memory of stale clears keeps the last clearLimit within clearMemoryFor, per Service and
// address, and forgets the rest (so it stays bounded).
func TestMemoryOfClears(t *testing.T) {
	m := newMetallbMemory()
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for i := range clearLimit + 2 {
		m.noteCleared("ip-1", "a", t0.Add(time.Duration(i)*time.Minute))
	}
	now := t0.Add(time.Duration(clearLimit+1) * time.Minute)
	if got := m.clearedOf("ip-1", "a", now); len(got) != clearLimit || !got[len(got)-1].Equal(now) {
		t.Fatalf("got %v", got)
	}
	if got := m.clearedOf("ip-2", "a", now); len(got) != 0 {
		t.Fatalf("another address: %v", got)
	}
	m.noteCleared("ip-1", "b", now)
	later := now.Add(clearMemoryFor)
	if got := m.clearedOf("ip-1", "a", later); len(got) != 0 {
		t.Fatalf("not forgotten: %v", got)
	}
	if m.Len() != 0 {
		t.Fatalf("expired clears are kept: %v", m.m)
	}
	// One entry per address, whatever is remembered of it; gone with the address.
	m.noteCleared("ip-1", "c", later)
	m.holdDeleted("ip-1", "hold-ip-1")
	m.setUnserved("ip-1", unservedWait{since: later})
	if m.Len() != 1 {
		t.Fatalf("%d entries for one address", m.Len())
	}
	m.forget("ip-1")
	if m.Len() != 0 {
		t.Fatal("the address's entry outlived it")
	}
}
