package controller

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func class(name string, created time.Time, annotations map[string]string) ipamv1.IPAddressClass {
	return ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{
		Name: name, CreationTimestamp: metav1.NewTime(created), Annotations: annotations}}
}

func TestPickMarkedClass(t *testing.T) {
	def := map[string]string{ipamv1.AnnotationDefaultClass: "true"}
	for _, tc := range []struct {
		name       string
		classes    []ipamv1.IPAddressClass
		want       string
		wantOthers int
	}{
		{"none", []ipamv1.IPAddressClass{class("a", t0, nil)}, "", 0},
		{"not true", []ipamv1.IPAddressClass{class("a", t0, map[string]string{ipamv1.AnnotationDefaultClass: "yes"})}, "", 0},
		{"one", []ipamv1.IPAddressClass{class("a", t0, nil), class("b", t0, def)}, "b", 0},
		{"newest wins", []ipamv1.IPAddressClass{class("old", t0, def), class("new", t0.Add(time.Hour), def)}, "new", 1},
		{"same age: lowest name", []ipamv1.IPAddressClass{class("zz", t0, def), class("aa", t0, def)}, "aa", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, others := pickMarkedClass(tc.classes, ipamv1.AnnotationDefaultClass)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want || len(others) != tc.wantOthers {
				t.Fatalf("got %q (others %v), want %q with %d others", name, others, tc.want, tc.wantOthers)
			}
		})
	}
}

func addr(name, ip string, created time.Time, ref *ipamv1.ClaimReference) ipamv1.IPAddress {
	return ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       ipamv1.IPAddressSpec{Address: ip, ClaimRef: ref},
	}
}

func TestSortClaimAddresses(t *testing.T) {
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "new"},
		Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}}
	mine := &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "new"}
	noUID := &ipamv1.ClaimReference{Namespace: "ns", Name: "c"}
	older := &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "old"}

	got := sortClaimAddresses(claim, []ipamv1.IPAddress{
		addr("second", "203.0.113.2", t0.Add(time.Second), mine),
		addr("first", "203.0.113.1", t0, noUID),
		addr("v6", "2001:db8::1", t0, mine),
		addr("previous-claim", "203.0.113.3", t0.Add(-time.Hour), older),
	})
	if got.kept[ipamv1.IPv4] == nil || got.kept[ipamv1.IPv4].Name != "first" {
		t.Fatalf("kept %v, want the oldest address, first", got.kept)
	}
	if len(got.needUID) != 1 || got.needUID[0].Name != "first" {
		t.Fatalf("needUID %v, want first", got.needUID)
	}
	var surplus []string
	for _, a := range got.surplus {
		surplus = append(surplus, a.Name)
	}
	if len(surplus) != 2 || surplus[0] != "v6" || surplus[1] != "second" {
		t.Fatalf("surplus %v, want [v6 second] (an unrequested family, then the younger IPv4)", surplus)
	}
}

// An address already in the claim's status wins over an older one bound to the claim later:
// a Bound claim's addresses never change.
func TestSortClaimAddressesPrefersTheStatus(t *testing.T) {
	mine := &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "u"}
	for _, tc := range []struct {
		name     string
		inStatus []string
		want     string
	}{
		{"nothing in status: the oldest", nil, "older"},
		{"the younger is in status", []string{"younger"}, "younger"},
		{"the older is in status", []string{"older"}, "older"},
		{"a name in status that is not bound here: the oldest", []string{"elsewhere"}, "older"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u"},
				Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}}
			for _, n := range tc.inStatus {
				claim.Status.Addresses = append(claim.Status.Addresses, ipamv1.ClaimedAddress{Name: n, Family: ipamv1.IPv4})
			}
			got := sortClaimAddresses(claim, []ipamv1.IPAddress{
				addr("younger", "203.0.113.1", t0.Add(time.Hour), mine),
				addr("older", "203.0.113.2", t0, mine),
			})
			if k := got.kept[ipamv1.IPv4]; k == nil || k.Name != tc.want {
				t.Fatalf("kept %v, want %s", k, tc.want)
			}
			if len(got.surplus) != 1 || got.surplus[0].Name == tc.want {
				t.Fatalf("surplus %v", got.surplus)
			}
		})
	}
}

func TestDecideClaimStatus(t *testing.T) {
	v4 := addr("ip-203-0-113-1", "203.0.113.1", t0, nil)
	v6 := addr("ip-2001-0db8-0000-0000-0000-0000-0000-0001", "2001:db8::1", t0, nil)
	lost := v4
	lost.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionLost, Status: metav1.ConditionTrue}}
	claim := func(fam ipamv1.IPFamily, phase ipamv1.ClaimPhase) *ipamv1.IPAddressClaim {
		return &ipamv1.IPAddressClaim{Spec: ipamv1.IPAddressClaimSpec{Family: fam}, Status: ipamv1.IPAddressClaimStatus{Phase: phase,
			Addresses: []ipamv1.ClaimedAddress{{Name: v4.Name, Family: ipamv1.IPv4}}}}
	}
	for _, tc := range []struct {
		name       string
		claim      *ipamv1.IPAddressClaim
		kept       map[ipamv1.IPFamily]*ipamv1.IPAddress
		wait       *waiting
		wantPhase  ipamv1.ClaimPhase
		wantReason string
		wantAddrs  int
	}{
		{"new claim, nothing yet", claim(ipamv1.IPv4, ""), nil, nil, ipamv1.ClaimPending, ipamv1.ReasonWaitingForAddress, 0},
		{"waiting with a reason", claim(ipamv1.IPv4, ""), nil, &waiting{ipamv1.ReasonClassNotFound, "x"}, ipamv1.ClaimPending, ipamv1.ReasonClassNotFound, 0},
		{"bound", claim(ipamv1.IPv4, ipamv1.ClaimPending), map[ipamv1.IPFamily]*ipamv1.IPAddress{ipamv1.IPv4: &v4}, nil, ipamv1.ClaimBound, ipamv1.ReasonBound, 1},
		{"dual half bound", claim(ipamv1.Dual, ipamv1.ClaimPending), map[ipamv1.IPFamily]*ipamv1.IPAddress{ipamv1.IPv4: &v4}, nil, ipamv1.ClaimPending, ipamv1.ReasonWaitingForAddress, 1},
		{"dual bound", claim(ipamv1.Dual, ""), map[ipamv1.IPFamily]*ipamv1.IPAddress{ipamv1.IPv4: &v4, ipamv1.IPv6: &v6}, nil, ipamv1.ClaimBound, ipamv1.ReasonBound, 2},
		{"bound then address gone", claim(ipamv1.IPv4, ipamv1.ClaimBound), nil, nil, ipamv1.ClaimLost, ipamv1.ReasonAddressLost, 0},
		{"bound then address lost", claim(ipamv1.IPv4, ipamv1.ClaimBound), map[ipamv1.IPFamily]*ipamv1.IPAddress{ipamv1.IPv4: &lost}, nil, ipamv1.ClaimLost, ipamv1.ReasonAddressLost, 1},
		{"lost then recovered", claim(ipamv1.IPv4, ipamv1.ClaimLost), map[ipamv1.IPFamily]*ipamv1.IPAddress{ipamv1.IPv4: &v4}, nil, ipamv1.ClaimBound, ipamv1.ReasonBound, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideClaimStatus(tc.claim, tc.kept, tc.wait)
			if got.phase != tc.wantPhase || got.reason != tc.wantReason || len(got.addresses) != tc.wantAddrs {
				t.Fatalf("got phase=%s reason=%s addresses=%v, want %s/%s/%d", got.phase, got.reason, got.addresses, tc.wantPhase, tc.wantReason, tc.wantAddrs)
			}
			if got.message == "" {
				t.Fatal("every outcome needs a message")
			}
		})
	}
}

func TestDecideAddress(t *testing.T) {
	ref := &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: types.UID("u")}
	hour := time.Hour
	releasedAt := metav1.NewTime(t0.Add(-30 * time.Minute))
	mk := func(ref *ipamv1.ClaimReference, policy ipamv1.ReclaimPolicy, phase ipamv1.AddressPhase, released *metav1.Time, conds ...string) *ipamv1.IPAddress {
		a := addr("a", "203.0.113.1", t0, ref)
		a.Spec.ReclaimPolicy, a.Status.Phase, a.Status.ReleasedAt = policy, phase, released
		for _, c := range conds {
			a.Status.Conditions = append(a.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue})
		}
		return &a
	}
	for _, tc := range []struct {
		name      string
		a         *ipamv1.IPAddress
		claim     claimState
		delay     *time.Duration
		want      ipamv1.AddressPhase
		clear     bool
		del       bool
		released  bool
		requeueIn time.Duration
	}{
		{"unbound", mk(nil, ipamv1.ReclaimRetain, "", nil), claimGone, nil, ipamv1.AddressAvailable, false, false, false, 0},
		{"bound to a live claim", mk(ref, ipamv1.ReclaimRetain, "", nil), claimLive, nil, ipamv1.AddressBound, false, false, false, 0},
		{"claim terminating keeps Bound", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressBound, nil), claimTerminating, nil, ipamv1.AddressBound, false, false, false, 0},
		{"claim gone, Retain", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressBound, nil), claimGone, nil, ipamv1.AddressReleased, false, false, true, 0},
		{"claim gone, Delete", mk(ref, ipamv1.ReclaimDelete, ipamv1.AddressBound, nil), claimGone, nil, ipamv1.AddressBound, false, true, false, 0},
		{"released, delay pending", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressReleased, &releasedAt), claimGone, &hour, ipamv1.AddressReleased, false, false, true, 30 * time.Minute},
		{"released, delay passed", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressReleased, &releasedAt), claimGone, ptr(10 * time.Minute), ipamv1.AddressAvailable, true, false, false, 0},
		{"released, zero delay", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressReleased, &releasedAt), claimGone, ptr(time.Duration(0)), ipamv1.AddressAvailable, true, false, false, 0},
		{"conflict wins", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressBound, nil, ipamv1.ConditionConflict), claimLive, nil, ipamv1.AddressConflict, false, false, false, 0},
		{"lost", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressBound, nil, ipamv1.ConditionLost), claimLive, nil, ipamv1.AddressLost, false, false, false, 0},
		{"conflict over lost", mk(nil, ipamv1.ReclaimRetain, "", nil, ipamv1.ConditionLost, ipamv1.ConditionConflict), claimGone, nil, ipamv1.AddressConflict, false, false, false, 0},
		// The driver's conditions decide the phase only; the binding's lifecycle goes on beneath
		// them (found by the chaos test: a Lost address kept naming a deleted claim forever).
		{"lost, claim gone, Retain: released beneath", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressLost, nil, ipamv1.ConditionLost), claimGone, nil, ipamv1.AddressLost, false, false, true, 0},
		{"lost, claim gone, zero delay: unbound", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressLost, &releasedAt, ipamv1.ConditionLost), claimGone, ptr(time.Duration(0)), ipamv1.AddressLost, true, false, false, 0},
		{"lost, claim gone, Delete", mk(ref, ipamv1.ReclaimDelete, ipamv1.AddressLost, nil, ipamv1.ConditionLost), claimGone, nil, ipamv1.AddressLost, false, true, false, 0},
		{"conflict, claim gone, delay pending", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressConflict, &releasedAt, ipamv1.ConditionConflict), claimGone, &hour, ipamv1.AddressConflict, false, false, true, 30 * time.Minute},
		{"claim terminating after a lost spell is Bound", mk(ref, ipamv1.ReclaimRetain, ipamv1.AddressLost, nil), claimTerminating, nil, ipamv1.AddressBound, false, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAddress(tc.a, tc.claim, tc.delay, t0)
			if d.delete != tc.del {
				t.Fatalf("delete=%v, want %v", d.delete, tc.del)
			}
			if tc.del {
				return
			}
			if d.phase != tc.want || d.clearClaimRef != tc.clear || (d.releasedAt != nil) != tc.released || d.requeueAfter != tc.requeueIn {
				t.Fatalf("got %+v, want phase=%s clear=%v releasedAt set=%v requeue=%s", d, tc.want, tc.clear, tc.released, tc.requeueIn)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSummarizeNames(t *testing.T) {
	if got := summarizeNames([]string{"c", "a", "b"}, 5); got != "a, b, c" {
		t.Fatal(got)
	}
	if got := summarizeNames([]string{"e", "d", "c", "b", "a", "f", "g"}, 5); got != "a, b, c, d, e and 2 more" {
		t.Fatal(got)
	}
}

func TestReclaimAction(t *testing.T) {
	yes := true
	plain := &ipamv1.IPAddressClaim{}
	auto := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{
		Annotations:     map[string]string{ipamv1.AnnotationAutoClaim: "true"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "s", Controller: &yes}},
	}}
	unowned := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"},
	}}
	mk := func(policy ipamv1.ReclaimPolicy) *ipamv1.IPAddress {
		a := addr("a", "203.0.113.1", t0, nil)
		a.Spec.ReclaimPolicy = policy
		return &a
	}
	marked := func(a *ipamv1.IPAddress) *ipamv1.IPAddress {
		a.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "true"}
		return a
	}
	deleteClass := &ipamv1.IPAddressClass{Spec: ipamv1.IPAddressClassSpec{ReclaimPolicy: ipamv1.ReclaimDelete}}
	for _, tc := range []struct {
		name  string
		a     *ipamv1.IPAddress
		claim *ipamv1.IPAddressClaim
		class *ipamv1.IPAddressClass
		want  reclaim
	}{
		{"Retain", mk(ipamv1.ReclaimRetain), plain, nil, reclaimRelease},
		{"Delete", mk(ipamv1.ReclaimDelete), plain, nil, reclaimDelete},
		{"auto-claim under Retain", mk(ipamv1.ReclaimRetain), auto, nil, reclaimDelete},
		{"auto-claim whose owner reference was removed keeps Retain", mk(ipamv1.ReclaimRetain), unowned, nil, reclaimRelease},
		{"claim gone, Retain", mk(ipamv1.ReclaimRetain), nil, nil, reclaimRelease},
		{"claim gone, Delete", mk(ipamv1.ReclaimDelete), nil, nil, reclaimDelete},
		{"no policy on the address: the class's", mk(""), plain, deleteClass, reclaimDelete},
		{"no policy anywhere: Retain", mk(""), plain, nil, reclaimRelease},
		{"claim gone, Retain, the address marked an auto-claim's", marked(mk(ipamv1.ReclaimRetain)), nil, nil, reclaimDelete},
		{"claim known: the claim decides, not a stale mark", marked(mk(ipamv1.ReclaimRetain)), unowned, nil, reclaimRelease},
	} {
		if got := reclaimAction(tc.a, tc.claim, tc.class); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecheckAfter(t *testing.T) {
	for _, tc := range []struct{ waited, want time.Duration }{
		{0, time.Second},
		{-time.Minute, time.Second}, // clock skew
		{1500 * time.Millisecond, 1500 * time.Millisecond},
		{20 * time.Second, 20 * time.Second},
		{time.Hour, time.Minute},
	} {
		if got := recheckAfter(tc.waited); got != tc.want {
			t.Errorf("recheckAfter(%s) = %s, want %s", tc.waited, got, tc.want)
		}
	}
}

func TestDecideClassMeta(t *testing.T) {
	now := t0.Add(time.Hour)
	mk := func(finalized, marked bool, stamp string) *ipamv1.IPAddressClass {
		c := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "c", CreationTimestamp: metav1.NewTime(t0),
			Annotations: map[string]string{}}}
		if finalized {
			c.Finalizers = []string{ipamv1.FinalizerClass}
		}
		if marked {
			c.Annotations[ipamv1.AnnotationAutoClaimClass] = "true"
		}
		if stamp != "" {
			c.Annotations[ipamv1.AnnotationAutoClaimEnabledAt] = stamp
		}
		return c
	}
	stamp := t0.Add(time.Minute).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name  string
		class *ipamv1.IPAddressClass
		want  classMeta
	}{
		{"new, unmarked: the finalizer", mk(false, false, ""), classMeta{finalizer: true}},
		{"new, marked: the finalizer and now, not its creation (it may have been marked later, while no core ran)", mk(false, true, ""), classMeta{finalizer: true, enabledAt: now.UTC().Format(time.RFC3339)}},
		{"seen, marked now: now", mk(true, true, ""), classMeta{enabledAt: now.UTC().Format(time.RFC3339)}},
		{"seen, marked and stamped: nothing", mk(true, true, stamp), classMeta{}},
		{"seen, unmarked and stamped: the stamp goes", mk(true, false, stamp), classMeta{clearEnabledAt: true}},
		{"seen, unmarked: nothing", mk(true, false, ""), classMeta{}},
	} {
		if got := decideClassMeta(tc.class, ipamv1.FinalizerClass, now); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if at, ok := autoClaimEnabledAt(mk(true, true, stamp)); !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("autoClaimEnabledAt = %s, %v", at, ok)
	}
	if _, ok := autoClaimEnabledAt(mk(true, true, "")); ok {
		t.Error("autoClaimEnabledAt of an unstamped class reports a time")
	}
}

// A claim whose status the core never wrote, and that waits only for its driver, stays as the
// API server defaults it for quietWait; anything else is written at once.
func TestQuietUntil(t *testing.T) {
	fresh := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)},
		Status: ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending}}
	waitingFor := func(reason string) *ipamv1.IPAddressClaimStatus {
		return &ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "k", Conditions: []metav1.Condition{
			{Type: ipamv1.ConditionBound, Status: metav1.ConditionFalse, Reason: reason, Message: "m"}}}
	}
	written := fresh.DeepCopy()
	written.Status = *waitingFor(ipamv1.ReasonWaitingForAddress)
	undefaulted := fresh.DeepCopy()
	undefaulted.Status.Phase = ""
	bound := &ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound, ClassName: "k",
		Addresses:  []ipamv1.ClaimedAddress{{Name: "ip-203-0-113-1", Address: "203.0.113.1", Family: ipamv1.IPv4}},
		Conditions: []metav1.Condition{{Type: ipamv1.ConditionBound, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonBound}}}
	partial := waitingFor(ipamv1.ReasonWaitingForAddress)
	partial.Addresses = bound.Addresses
	for _, tc := range []struct {
		name  string
		claim *ipamv1.IPAddressClaim
		want  *ipamv1.IPAddressClaimStatus
		quiet bool
	}{
		{"fresh, waiting for its driver", fresh, waitingFor(ipamv1.ReasonWaitingForAddress), true},
		{"no phase at all yet (read before the schema default)", undefaulted, waitingFor(ipamv1.ReasonWaitingForAddress), true},
		{"fresh, its class missing", fresh, waitingFor(ipamv1.ReasonClassNotFound), false},
		{"fresh, its class refused", fresh, waitingFor(ipamv1.ReasonClassNotAccepted), false},
		{"fresh, no default class", fresh, waitingFor(ipamv1.ReasonNoDefaultClass), false},
		{"fresh, its named address unusable", fresh, waitingFor(ipamv1.ReasonAddressUnusable), false},
		{"fresh, now Bound", fresh, bound, false},
		{"fresh, one family bound", fresh, partial, false},
		{"written before (a reason to keep current)", written, waitingFor(ipamv1.ReasonWaitingForAddress), false},
	} {
		until, quiet := quietUntil(tc.claim, tc.want, time.Minute, time.Time{})
		if quiet != tc.quiet {
			t.Errorf("%s: quiet=%v, want %v", tc.name, quiet, tc.quiet)
		}
		if quiet && !until.Equal(t0.Add(time.Minute)) {
			t.Errorf("%s: quiet until %s, want a minute after creation", tc.name, until)
		}
		// A busy driver changes how long, never whether.
		if _, busy := quietUntil(tc.claim, tc.want, time.Minute, t0.Add(2*time.Minute)); busy != tc.quiet {
			t.Errorf("%s, with a recent bind of its class: quiet=%v, want %v", tc.name, busy, tc.quiet)
		}
	}
	// A driver that keeps binding claims of the class extends the quiet: a wait after its last
	// bind, never more than quietCap waits after the claim's creation.
	want := waitingFor(ipamv1.ReasonWaitingForAddress)
	for _, tc := range []struct {
		name     string
		lastBind time.Time
		until    time.Time
	}{
		{"no bind seen", time.Time{}, t0.Add(time.Minute)},
		{"last bind before the claim", t0.Add(-30 * time.Second), t0.Add(time.Minute)},
		{"a bind after the claim's creation", t0.Add(90 * time.Second), t0.Add(150 * time.Second)},
		{"binds still coming after many waits", t0.Add(20 * time.Minute), t0.Add(quietCap * time.Minute)},
	} {
		until, quiet := quietUntil(fresh, want, time.Minute, tc.lastBind)
		if !quiet || !until.Equal(tc.until) {
			t.Errorf("%s: quiet=%v until %s, want until %s", tc.name, quiet, until.Sub(t0), tc.until.Sub(t0))
		}
	}
	// Progress never quiets what is written at once.
	if _, quiet := quietUntil(fresh, waitingFor(ipamv1.ReasonClassNotFound), time.Minute, t0.Add(time.Minute)); quiet {
		t.Errorf("a missing class was kept quiet because other claims of some class were bound")
	}
}

func TestClassProgress(t *testing.T) {
	v4, v6, dual := []ipamv1.IPFamily{ipamv1.IPv4}, []ipamv1.IPFamily{ipamv1.IPv6}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}
	var p classProgress
	if !p.lastBind("a", v4).IsZero() {
		t.Fatal("a class never seen has a last bind")
	}
	p.saw("a", v4, t0.Add(time.Minute))
	p.saw("a", v4, t0) // an older Bound claim seen later does not move it back
	p.saw("", v4, t0.Add(time.Hour))
	p.saw("b", v4, time.Time{})
	if got := p.lastBind("a", v4); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("last IPv4 bind of a = %s, want t0+1m", got.Sub(t0))
	}
	if !p.lastBind("b", v4).IsZero() || !p.lastBind("", v4).IsZero() {
		t.Errorf("an unnamed class or a zero time was recorded")
	}
	// IPv4 binds say nothing of IPv6 (its range may be exhausted), and a Dual claim waits for
	// both: the earlier of the two counts.
	if !p.lastBind("a", v6).IsZero() || !p.lastBind("a", dual).IsZero() {
		t.Errorf("IPv4 binds counted as progress for IPv6 or Dual claims")
	}
	p.saw("a", dual, t0.Add(30*time.Second))
	if got := p.lastBind("a", dual); !got.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("last Dual bind of a = %s, want t0+30s (the IPv6 side's)", got.Sub(t0))
	}
	// Seeded once; workers that ask meanwhile wait for the seed; a failed seed is tried again.
	fills := 0
	fill := func() error { fills++; return nil }
	fail := func() error { fills++; return errors.New("cache gone") }
	if err := p.seed("c", fail); err == nil {
		t.Errorf("a failed seed reported no error")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.seed("c", func() error {
				time.Sleep(10 * time.Millisecond)
				p.saw("c", v4, t0)
				return fill()
			})
			if p.lastBind("c", v4).IsZero() {
				t.Errorf("a worker went on before the seed was made")
			}
		}()
	}
	wg.Wait()
	if fills != 2 {
		t.Errorf("the class was filled %d times, want twice (the failed seed, then once)", fills)
	}
	p.forget("c")
	if !p.lastBind("c", v4).IsZero() || p.isSeeded("c") {
		t.Errorf("a forgotten class keeps its last bind or its seed")
	}
}

// A Bound condition written by a clock that runs ahead (a previous leader's) counts as a bind
// now, not in the future: it must not stretch the quiet of every queued claim to quietCap.
func TestSawBoundIsNeverLaterThanNow(t *testing.T) {
	r := &ClaimReconciler{Now: func() time.Time { return t0 }}
	claim := &ipamv1.IPAddressClaim{Status: ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound, ClassName: "k",
		Addresses:  []ipamv1.ClaimedAddress{{Name: "ip-203-0-113-1", Address: "203.0.113.1", Family: ipamv1.IPv4}},
		Conditions: []metav1.Condition{{Type: ipamv1.ConditionBound, Status: metav1.ConditionTrue, Reason: ipamv1.ReasonBound, LastTransitionTime: metav1.NewTime(t0.Add(time.Hour))}}}}
	r.sawBound(claim)
	if got := r.progress.lastBind("k", []ipamv1.IPFamily{ipamv1.IPv4}); !got.Equal(t0) {
		t.Errorf("a bind stamped an hour ahead counts at %s, want now", got.Sub(t0))
	}
	claim.Status.Conditions[0].Status = metav1.ConditionFalse
	r.progress = classProgress{}
	r.sawBound(claim)
	if !r.progress.lastBind("k", []ipamv1.IPFamily{ipamv1.IPv4}).IsZero() {
		t.Errorf("a claim not Bound counted as a bind")
	}
}

// A claim binds an unbound address, or one that names it with its own uid or none; never one
// that names another claim, nor an earlier claim of its own name (another uid).
func TestBindableBy(t *testing.T) {
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "new"}}
	for _, tc := range []struct {
		name string
		ref  *ipamv1.ClaimReference
		want bool
	}{
		{"unbound", nil, true},
		{"pre-bound without uid", &ipamv1.ClaimReference{Namespace: "ns", Name: "c"}, true},
		{"its own uid", &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "new"}, true},
		{"an earlier claim of its name", &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "old"}, false},
		{"another claim", &ipamv1.ClaimReference{Namespace: "ns", Name: "d"}, false},
		{"another namespace", &ipamv1.ClaimReference{Namespace: "other", Name: "c"}, false},
	} {
		a := addr("a", "203.0.113.1", t0, tc.ref)
		if got := bindableBy(claim, &a); got != tc.want {
			t.Errorf("%s: bindableBy %v, want %v", tc.name, got, tc.want)
		}
		w := checkNamedAddress(claim, &a, "", ipamv1.IPv4)
		wantReason := ipamv1.ReasonAddressUnusable
		if tc.ref != nil && tc.ref.Namespace != claim.Namespace {
			wantReason = ipamv1.ReasonAddressNotFound // another namespace's address is not shown
		}
		if (w == nil) != tc.want || w != nil && w.reason != wantReason {
			t.Errorf("%s: checkNamedAddress %+v, want usable %v", tc.name, w, tc.want)
		}
	}
}

// A claim's condition and Warning are the tenant's to read. A named address reserved for a claim
// of another namespace reads as an address that does not exist (neither who holds it nor that
// anyone does); a claim of the claim's own namespace may be named.
func TestNamedAddressMessageNamesNoOtherNamespace(t *testing.T) {
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: "grab", UID: "new"}}
	for _, tc := range []struct {
		name string
		ref  *ipamv1.ClaimReference
		want []string
	}{
		{"bound in another namespace", &ipamv1.ClaimReference{Namespace: "tenant-a", Name: "web-a", UID: "a"}, []string{"ip-203-0-113-1"}},
		{"released by another namespace", &ipamv1.ClaimReference{Namespace: "tenant-a", Name: "old-a", UID: "a"}, []string{"ip-203-0-113-1"}},
		{"pre-bound for another namespace", &ipamv1.ClaimReference{Namespace: "tenant-a", Name: "pre-a"}, []string{"ip-203-0-113-1"}},
		{"bound to another claim of its own namespace", &ipamv1.ClaimReference{Namespace: "tenant-b", Name: "web", UID: "b"}, []string{"ip-203-0-113-1", "tenant-b/web"}},
	} {
		a := addr("ip-203-0-113-1", "203.0.113.1", t0, tc.ref)
		w := checkNamedAddress(claim, &a, "", ipamv1.IPv4)
		want := ipamv1.ReasonAddressUnusable
		if tc.ref.Namespace != claim.Namespace {
			want = ipamv1.ReasonAddressNotFound
		}
		if w == nil || w.reason != want {
			t.Fatalf("%s: %+v, want %s", tc.name, w, want)
		}
		if tc.ref.Namespace != claim.Namespace && *w != *addressNotFound(a.Name) {
			t.Errorf("%s: %+v, want what a missing address reads: %+v", tc.name, *w, *addressNotFound(a.Name))
		}
		if tc.ref.Namespace != claim.Namespace && (strings.Contains(w.message, tc.ref.Namespace) || strings.Contains(w.message, tc.ref.Name)) {
			t.Errorf("%s: the message names the other namespace's claim: %q", tc.name, w.message)
		}
		for _, s := range tc.want {
			if !strings.Contains(w.message, s) {
				t.Errorf("%s: the message lacks %q: %q", tc.name, s, w.message)
			}
		}
	}
}

// A claim asks for addresses against the limit unless the class sets none, it asks for nothing,
// or it carries the class's stamp (it was let through when it was stamped).
func TestAskOfLimit(t *testing.T) {
	limited := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: "d", MaxAddressesPerNamespace: ptr[int32](2)}}
	open := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "d"}}
	plain := &ipamv1.IPAddressClaim{}
	stamped := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		ipamv1.AnnotationProvisioner: "d", ipamv1.AnnotationResolvedClass: "c"}}}
	otherStamp := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		ipamv1.AnnotationProvisioner: "d", ipamv1.AnnotationResolvedClass: "old"}}}
	for _, tc := range []struct {
		name   string
		claim  *ipamv1.IPAddressClaim
		class  *ipamv1.IPAddressClass
		asking int
		want   *limitAsk
	}{
		{"no limit", plain, open, 1, nil},
		{"asks nothing", plain, limited, 0, nil},
		{"asks", plain, limited, 2, &limitAsk{class: "c", max: 2, asking: 2}},
		{"already stamped for the class", stamped, limited, 1, nil},
		{"stamped for another class", otherStamp, limited, 1, &limitAsk{class: "c", max: 2, asking: 1}},
	} {
		got := askOfLimit(tc.claim, tc.class, tc.asking)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// What a namespace holds of a class: its addresses of the class in any phase, and what its other
// stamped claims still wait for; not another namespace's or another class's, nor what a claim
// that is Bound, Lost or being deleted, or stamped for another class, no longer asks for.
func TestDecideLimit(t *testing.T) {
	self := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "self", UID: "self"},
		Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}}
	address := func(ip, class, ns, claim string, uid types.UID, phase ipamv1.AddressPhase) ipamv1.IPAddress {
		a := addr("ip-"+ip, ip, t0, &ipamv1.ClaimReference{Namespace: ns, Name: claim, UID: uid})
		a.Spec.ClassName, a.Status.Phase = class, phase
		return a
	}
	stampedClaim := func(name string, fam ipamv1.IPFamily, class string, mutate ...func(*ipamv1.IPAddressClaim)) ipamv1.IPAddressClaim {
		c := ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
			Annotations: map[string]string{ipamv1.AnnotationProvisioner: "d", ipamv1.AnnotationResolvedClass: class}},
			Spec: ipamv1.IPAddressClaimSpec{Family: fam}}
		for _, m := range mutate {
			m(&c)
		}
		return c
	}
	now := metav1.NewTime(t0)
	for _, tc := range []struct {
		name   string
		max    int32
		asking int
		addrs  []ipamv1.IPAddress
		claims []ipamv1.IPAddressClaim
		used   int
	}{
		{"nothing held", 1, 1, nil, nil, 0},
		{"a Released address counts", 1, 1, []ipamv1.IPAddress{address("203.0.113.1", "c", "ns", "gone", "old", ipamv1.AddressReleased)}, nil, 1},
		{"Bound, Conflict and Lost count", 3, 1, []ipamv1.IPAddress{
			address("203.0.113.1", "c", "ns", "a", "a", ipamv1.AddressBound),
			address("203.0.113.2", "c", "ns", "b", "b", ipamv1.AddressConflict),
			address("203.0.113.3", "c", "ns", "c", "c", ipamv1.AddressLost)}, nil, 3},
		{"another class or namespace does not", 1, 1, []ipamv1.IPAddress{
			address("203.0.113.1", "other", "ns", "a", "a", ipamv1.AddressBound),
			address("203.0.113.2", "c", "elsewhere", "a", "a", ipamv1.AddressBound)}, nil, 0},
		{"the claim's own addresses count", 1, 1, []ipamv1.IPAddress{address("2001:db8::1", "c", "ns", "self", "self", ipamv1.AddressBound)}, nil, 1},
		{"a stamped claim waiting for its driver counts each family", 2, 1, nil,
			[]ipamv1.IPAddressClaim{stampedClaim("dual", ipamv1.Dual, "c")}, 2},
		{"a family it has counts once", 2, 1, []ipamv1.IPAddress{address("203.0.113.1", "c", "ns", "dual", "dual", ipamv1.AddressBound)},
			[]ipamv1.IPAddressClaim{stampedClaim("dual", ipamv1.Dual, "c")}, 2},
		{"the deciding claim's stamp is not counted twice", 1, 1, nil,
			[]ipamv1.IPAddressClaim{stampedClaim("self", ipamv1.IPv4, "c")}, 0},
		{"stamped for another class", 1, 1, nil, []ipamv1.IPAddressClaim{stampedClaim("x", ipamv1.IPv4, "other")}, 0},
		{"Bound or Lost claims ask for nothing more", 1, 1, nil, []ipamv1.IPAddressClaim{
			stampedClaim("b", ipamv1.IPv4, "c", func(c *ipamv1.IPAddressClaim) { c.Status.Phase = ipamv1.ClaimBound }),
			stampedClaim("l", ipamv1.IPv4, "c", func(c *ipamv1.IPAddressClaim) { c.Status.Phase = ipamv1.ClaimLost })}, 0},
		{"a claim being deleted asks for nothing more", 1, 1, nil, []ipamv1.IPAddressClaim{
			stampedClaim("d", ipamv1.IPv4, "c", func(c *ipamv1.IPAddressClaim) { c.DeletionTimestamp = &now })}, 0},
		{"an unstamped claim asks for nothing", 1, 1, nil, []ipamv1.IPAddressClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "u", UID: "u"}}}, 0},
		{"limit zero", 0, 1, nil, nil, 0},
		{"asking two", 2, 2, nil, nil, 0},
	} {
		if got := namespaceUse("ns", "c", self, tc.addrs, tc.claims); got != tc.used {
			t.Errorf("%s: namespaceUse %d, want %d", tc.name, got, tc.used)
		}
		w := decideLimit(self, &limitAsk{class: "c", max: tc.max, asking: tc.asking}, tc.addrs, tc.claims)
		if over := tc.used+tc.asking > int(tc.max); (w != nil) != over || w != nil && w.reason != ipamv1.ReasonAddressLimitReached {
			t.Errorf("%s: decideLimit %+v, want over the limit: %v", tc.name, w, over)
		}
	}
	if decideLimit(self, nil, nil, nil) != nil {
		t.Error("a pass that asks nothing of a limit waited")
	}
}
