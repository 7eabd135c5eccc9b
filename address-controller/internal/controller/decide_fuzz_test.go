package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The decide functions' fuzz targets: fuzz bytes are decoded into a claim and the addresses
// whose claimRef names it (or an address and what is known of its claim), the decision runs,
// and its invariants must hold; then the decision's writes are applied and deciding again must
// write nothing more.

// fuzzChoices decodes fuzz bytes into decisions; past the end every choice is 0.
type fuzzChoices struct {
	b []byte
	i int
}

func (c *fuzzChoices) n(k int) int {
	if c.i >= len(c.b) {
		return 0
	}
	c.i++
	return int(c.b[c.i-1]) % k
}

func (c *fuzzChoices) yes(k int) bool { return c.n(k) == 0 }

var decideFuzzIPs = []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "2001:db8::1", "2001:db8::2", "2001:db8::3"}

// fuzzClaimAndAddresses builds a claim (any phase, with the addresses its status lists) and up to
// six addresses naming it by namespace/name: with its uid, without one yet, or with an earlier
// claim's; created within the same few seconds (creation times have a one-second resolution),
// some Lost.
func fuzzClaimAndAddresses(data []byte) (*ipamv1.IPAddressClaim, []ipamv1.IPAddress) {
	c := &fuzzChoices{b: data}
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "new"},
		Spec: ipamv1.IPAddressClaimSpec{Family: []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6, ipamv1.Dual}[c.n(3)]}}
	claim.Status.Phase = []ipamv1.ClaimPhase{"", ipamv1.ClaimPending, ipamv1.ClaimBound, ipamv1.ClaimLost}[c.n(4)]
	var addrs []ipamv1.IPAddress
	used := map[string]bool{}
	for range c.n(7) {
		ip := decideFuzzIPs[c.n(len(decideFuzzIPs))]
		if used[ip] {
			continue // an address is named after its IP: one object per IP
		}
		used[ip] = true
		ref := []*ipamv1.ClaimReference{
			{Namespace: "ns", Name: "c", UID: "new"}, {Namespace: "ns", Name: "c", UID: "new"},
			{Namespace: "ns", Name: "c"}, {Namespace: "ns", Name: "c", UID: "old"},
		}[c.n(4)]
		a := addr(ipamv1.AddressName(netip.MustParseAddr(ip)), ip, t0.Add(time.Duration(c.n(3))*time.Second), ref)
		if c.yes(5) {
			a.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionLost, Status: metav1.ConditionTrue}}
		}
		addrs = append(addrs, a)
	}
	// The status lists what an earlier pass bound (when it was Bound or Lost): for each family,
	// one of the addresses of that family (or one that is gone).
	if claim.Status.Phase == ipamv1.ClaimBound || claim.Status.Phase == ipamv1.ClaimLost {
		for _, fam := range claim.Spec.Family.Families() {
			var of []ipamv1.IPAddress
			for _, a := range addrs {
				if f, _ := addressFamily(&a); f == fam {
					of = append(of, a)
				}
			}
			if len(of) == 0 || c.yes(6) {
				continue
			}
			a := of[c.n(len(of))]
			claim.Status.Addresses = append(claim.Status.Addresses, ipamv1.ClaimedAddress{Name: a.Name, Address: a.Spec.Address, Family: fam})
		}
	}
	return claim, addrs
}

func mineOf(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) bool {
	ref := a.Spec.ClaimRef
	return ref != nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name && (ref.UID == "" || ref.UID == claim.UID)
}

func checkSorted(t *testing.T, claim *ipamv1.IPAddressClaim, addrs []ipamv1.IPAddress, s claimAddresses) {
	t.Helper()
	where := map[string]string{}
	for fam, a := range s.kept {
		f, ok := addressFamily(a)
		switch {
		case !ok || f != fam:
			t.Fatalf("kept %s (%s) for family %s", a.Name, a.Spec.Address, fam)
		case !slices.Contains(claim.Spec.Family.Families(), fam):
			t.Fatalf("kept %s for %s, which the claim does not ask for", a.Name, fam)
		case !mineOf(claim, a):
			t.Fatalf("kept %s, whose claimRef %+v is not the claim's", a.Name, a.Spec.ClaimRef)
		}
		where[a.Name] = "kept"
	}
	for _, a := range s.surplus {
		if where[a.Name] != "" {
			t.Fatalf("%s is both kept and surplus", a.Name)
		}
		if !mineOf(claim, a) {
			t.Fatalf("unbinds %s, whose claimRef %+v is not the claim's: another claim's address", a.Name, a.Spec.ClaimRef)
		}
		where[a.Name] = "surplus"
	}
	for _, a := range s.needUID {
		if where[a.Name] != "kept" || a.Spec.ClaimRef.UID != "" {
			t.Fatalf("completes the uid of %s, which is not a kept address without one", a.Name)
		}
	}
	for i := range addrs {
		a := &addrs[i]
		if mineOf(claim, a) && where[a.Name] == "" {
			t.Fatalf("%s names the claim but is neither kept nor surplus", a.Name)
		}
	}
	// A claim that was Bound keeps the addresses its status lists while they are still its own:
	// never a rebind to another address of the family.
	if claim.Status.Phase == ipamv1.ClaimBound || claim.Status.Phase == ipamv1.ClaimLost {
		for _, ca := range claim.Status.Addresses {
			i := slices.IndexFunc(addrs, func(a ipamv1.IPAddress) bool { return a.Name == ca.Name })
			if i < 0 || !mineOf(claim, &addrs[i]) {
				continue
			}
			if k := s.kept[ca.Family]; k == nil || k.Name != ca.Name {
				t.Fatalf("claim %s lists %s (%s) for %s, still bound to it, yet keeps %v and unbinds it: a rebind",
					claim.Status.Phase, ca.Name, ca.Address, ca.Family, k)
			}
		}
	}
}

func checkOutcome(t *testing.T, claim *ipamv1.IPAddressClaim, kept map[ipamv1.IPFamily]*ipamv1.IPAddress, out claimOutcome) {
	t.Helper()
	wasBound := claim.Status.Phase == ipamv1.ClaimBound || claim.Status.Phase == ipamv1.ClaimLost
	complete := true
	for _, fam := range claim.Spec.Family.Families() {
		if a := kept[fam]; a == nil || !addressUsable(a) {
			complete = false
		}
	}
	switch {
	case complete && out.phase != ipamv1.ClaimBound:
		t.Fatalf("every family has a usable address, yet the claim is %s", out.phase)
	case !complete && out.phase == ipamv1.ClaimBound:
		t.Fatal("Bound without a usable address for every family")
	case wasBound && out.phase == ipamv1.ClaimPending:
		t.Fatal("a claim that was Bound went back to Pending")
	case out.message == "" || out.reason == "":
		t.Fatalf("outcome %s without a reason or message", out.phase)
	}
	if len(out.addresses) != len(kept) {
		t.Fatalf("status lists %v, kept %v", out.addresses, kept)
	}
	for _, ca := range out.addresses {
		if a := kept[ca.Family]; a == nil || a.Name != ca.Name || a.Spec.Address != ca.Address {
			t.Fatalf("status lists %+v, not the kept address %v", ca, a)
		}
	}
}

func FuzzDecideClaim(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 1, 1, 0, 0, 0},
		{2, 2, 3, 0, 1, 0, 1, 3, 2, 1, 1, 0, 1, 1},
		{0, 3, 4, 0, 1, 1, 0, 1, 2, 2, 0, 1, 2, 3, 1, 1, 1, 1},
		{0, 2, 3, 1, 0, 0, 1, 0, 0, 0, 1, 1, 2, 0, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		claim, addrs := fuzzClaimAndAddresses(data)
		s := sortClaimAddresses(claim, addrs)
		checkSorted(t, claim, addrs, s)
		out := decideClaimStatus(claim, s.kept, nil)
		checkOutcome(t, claim, s.kept, out)

		// Apply: the surplus is unbound, the kept ones get the uid, the status is written.
		unbind, complete := map[string]bool{}, map[string]bool{}
		for _, a := range s.surplus {
			unbind[a.Name] = true
		}
		for _, a := range s.needUID {
			complete[a.Name] = true
		}
		next := make([]ipamv1.IPAddress, 0, len(addrs))
		for _, a := range addrs {
			a = *a.DeepCopy()
			switch {
			case unbind[a.Name]:
				a.Spec.ClaimRef = nil
			case complete[a.Name]:
				a.Spec.ClaimRef.UID = claim.UID
			}
			next = append(next, a)
		}
		claim = claim.DeepCopy()
		claim.Status.Phase, claim.Status.Addresses = out.phase, out.addresses
		s2 := sortClaimAddresses(claim, next)
		checkSorted(t, claim, next, s2)
		if len(s2.surplus) > 0 || len(s2.needUID) > 0 {
			t.Fatalf("not idempotent: after the writes, still %d surplus and %d without uid", len(s2.surplus), len(s2.needUID))
		}
		out2 := decideClaimStatus(claim, s2.kept, nil)
		checkOutcome(t, claim, s2.kept, out2)
		if out2.phase != out.phase || fmt.Sprint(out2.addresses) != fmt.Sprint(out.addresses) {
			t.Fatalf("not idempotent: %s %v, then %s %v", out.phase, out.addresses, out2.phase, out2.addresses)
		}
	})
}

// fuzzAddressDecisionInput builds an address (bound or not, of either reclaim policy, in any
// phase, released some time ago or not, with the driver's conditions) and what the address
// controller knows of its claim.
func fuzzAddressDecisionInput(data []byte) (*ipamv1.IPAddress, claimState, *time.Duration, time.Time) {
	c := &fuzzChoices{b: data}
	var ref *ipamv1.ClaimReference
	if !c.yes(4) {
		ref = &ipamv1.ClaimReference{Namespace: "ns", Name: "c", UID: "u"}
	}
	a := addr("a", "203.0.113.1", t0, ref)
	a.Spec.ReclaimPolicy = []ipamv1.ReclaimPolicy{ipamv1.ReclaimRetain, ipamv1.ReclaimDelete, ""}[c.n(3)]
	a.Status.Phase = []ipamv1.AddressPhase{"", ipamv1.AddressAvailable, ipamv1.AddressBound, ipamv1.AddressReleased, ipamv1.AddressLost, ipamv1.AddressConflict}[c.n(6)]
	now := t0.Add(time.Duration(c.n(240))*time.Minute + time.Duration(c.n(1000))*time.Millisecond)
	if c.yes(2) {
		// Written by an earlier pass: truncated to the second, never after now.
		r := metav1.NewTime(now.Add(-time.Duration(c.n(120)) * time.Minute).Truncate(time.Second))
		a.Status.ReleasedAt = &r
	}
	for _, typ := range []string{ipamv1.ConditionLost, ipamv1.ConditionConflict} {
		if c.yes(4) {
			a.Status.Conditions = append(a.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionStatus([]string{"True", "False"}[c.n(2)])})
		}
	}
	state := []claimState{claimGone, claimLive, claimTerminating}[c.n(3)]
	var delay *time.Duration
	if !c.yes(3) {
		d := []time.Duration{0, time.Second, 10 * time.Minute, time.Hour, 24 * time.Hour}[c.n(5)]
		delay = &d
	}
	return &a, state, delay, now
}

func checkAddressDecision(t *testing.T, a *ipamv1.IPAddress, state claimState, delay *time.Duration, d addressDecision) {
	t.Helper()
	bound := a.Spec.ClaimRef != nil
	switch {
	case d.delete && (state != claimGone || !bound || reclaimAction(a, nil, nil) != reclaimDelete):
		t.Fatalf("deletes an address (bound %v, claim state %d, policy %q)", bound, state, a.Spec.ReclaimPolicy)
	case d.clearClaimRef && (state != claimGone || delay == nil):
		t.Fatalf("unbinds an address whose claim is live or terminating, or without a releaseDelay (state %d)", state)
	case bound && state == claimLive && d.phase != ipamv1.AddressBound && d.phase != ipamv1.AddressLost && d.phase != ipamv1.AddressConflict:
		t.Fatalf("an address of a live claim is %s", d.phase)
	case bound && state != claimGone && (d.clearClaimRef || d.delete):
		t.Fatal("an address of a live claim is let go")
	case d.requeueAfter < 0 || delay != nil && d.requeueAfter > *delay:
		t.Fatalf("requeue %v for a releaseDelay of %v", d.requeueAfter, delay)
	case !d.delete && d.phase == "":
		t.Fatal("no phase")
	}
}

func FuzzDecideAddress(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{1, 0, 2, 1, 1, 1, 0, 0, 0},
		{1, 1, 2, 1, 1, 0, 1, 0, 0},
		{1, 0, 3, 0, 30, 1, 1, 0, 0, 1, 3, 100, 10},
		{1, 0, 4, 1, 0, 0, 1, 0, 0, 1, 0, 5},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, state, delay, now := fuzzAddressDecisionInput(data)
		d := decideAddress(a, state, delay, now)
		checkAddressDecision(t, a, state, delay, d)
		if d.delete {
			return
		}
		// Apply the decision, decide again at the same moment: nothing more to write.
		next := a.DeepCopy()
		next.Status.Phase, next.Status.ReleasedAt = d.phase, d.releasedAt
		if d.clearClaimRef {
			next.Spec.ClaimRef = nil
		}
		d2 := decideAddress(next, state, delay, now)
		checkAddressDecision(t, next, state, delay, d2)
		if d2.delete || d2.clearClaimRef || d2.phase != d.phase || !d2.releasedAt.Equal(d.releasedAt) {
			t.Fatalf("not idempotent: %+v, then %+v", d, d2)
		}
	})
}
