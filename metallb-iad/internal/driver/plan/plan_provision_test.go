package plan

import (
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func stampedClaim(fam ipamv1.IPFamily) *ipamv1.IPAddressClaim {
	return &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c", UID: "claim-uid",
		CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{ipamv1.AnnotationProvisioner: Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{Family: fam}, Status: ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "k"}}
}

func acceptedClass() *ipamv1.IPAddressClass {
	c := testClass("p")
	c.Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted}}
	return c
}

func provisioning(claimUID string, fam ipamv1.IPFamily, ingress ...string) *corev1.Service {
	s := svc(testDriverNS, ProvisioningName(claimUID, fam, 0), "p-"+claimUID+string(fam), ingress...)
	s.Labels = map[string]string{LabelRole: RoleProvisioning, LabelClaimUID: claimUID, LabelFamily: string(fam)}
	s.Annotations[AnnotationClaim] = "t/c"
	s.Annotations[metallb.AnnotationAddressPool] = "p"
	return s
}

func pview(claim *ipamv1.IPAddressClaim, mods ...func(*ProvisionView)) ProvisionView {
	v := ProvisionView{Claim: claim, ClaimKey: "t/c", Class: acceptedClass(), Have: map[ipamv1.IPFamily]bool{},
		PlaceholderExpected: map[ipamv1.IPFamily]bool{}, Addresses: map[string]*ipamv1.IPAddress{}, HoldOf: map[string]string{},
		NextName: map[ipamv1.IPFamily]string{ipamv1.IPv4: ProvisioningName("claim-uid", ipamv1.IPv4, 0),
			ipamv1.IPv6: ProvisioningName("claim-uid", ipamv1.IPv6, 0)},
		Namespace: testDriverNS, Now: t0.Add(time.Second), NudgeAfter: 3 * time.Second,
		MayCreate: map[ipamv1.IPFamily]bool{ipamv1.IPv4: true, ipamv1.IPv6: true}, Pool: map[ipamv1.IPFamily]PoolState{}}
	for _, m := range mods {
		m(&v)
	}
	return v
}

func TestPlanProvision(t *testing.T) {
	const ip = "203.0.113.5"
	addrName := testAddress(ip).Name
	for _, tc := range []struct {
		name  string
		view  ProvisionView
		check func(t *testing.T, p ProvisionPlan)
	}{
		{"stamped claim: one placeholder per family", pview(stampedClaim(ipamv1.Dual)), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 2 || p.Create[0].Spec.IPFamilies[0] != corev1.IPv4Protocol || p.Create[1].Spec.IPFamilies[0] != corev1.IPv6Protocol ||
				p.Create[0].Annotations["metallb.io/address-pool"] != "p" || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: a placeholder created and not yet seen is not created again", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.PlaceholderExpected[ipamv1.IPv4] = true
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 0 || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: the family's address exists (seen or confirmed): nothing more", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Have[ipamv1.IPv4] = true
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 0 || len(p.Settle) != 0 || len(p.Delete) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"served placeholder: the address, pre-bound, then the hold", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Settle) != 1 || p.Settle[0].Address.Spec.ClaimRef.UID != "claim-uid" || p.Settle[0].Address.Name != addrName ||
				p.Settle[0].Address.Finalizers[0] != Finalizer || len(p.Create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"served placeholder of a Service's auto-claim: the address carries the auto-claim mark", pview(func() *ipamv1.IPAddressClaim {
			c := stampedClaim(ipamv1.IPv4)
			c.Annotations[ipamv1.AnnotationAutoClaim] = "true"
			yes := true
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: &yes}}
			return c
		}(), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Settle) != 1 || p.Settle[0].Address.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
				t.Fatalf("the auto-claim's address is not marked: %+v", p.Settle)
			}
		}},
		{"refused by MetalLB: nudged after a while, re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Now = t0.Add(10 * time.Second)
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: t0.Add(time.Second)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 1 || p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 12: not served yet, not refused: no nudge, re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Now = t0.Add(10 * time.Second)
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 0 || p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"crash after creating the address: the placeholder becomes its hold", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			v.Addresses[addrName] = testAddress(ip, Finalizer)
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.ToHold) != 1 || p.ToHold[0].Address != addrName || len(p.Settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"another claim's unheld address: handover", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef.Name = "other"
			v.Addresses[addrName] = a
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.ToHold) != 1 || len(p.Settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: the placeholder just relabelled as the hold, still provisioning in the cache: left alone", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			ph := provisioning("claim-uid", ipamv1.IPv4, ip)
			v.Placeholders = []*corev1.Service{ph}
			v.Addresses[addrName] = testAddress(ip, Finalizer)
			v.HoldOf[addrName] = ph.Name
			v.Have[ipamv1.IPv4] = true
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.ToHold) != 0 || len(p.Delete) != 0 || len(p.Create) != 0 || len(p.Settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"another claim's address being torn down never gets a relabelled hold; the claim keeps the IP MetalLB gave it until the address is gone", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef.Name, a.Spec.ClaimRef.UID = "deleted", "deleted-uid"
			deleted := metav1.NewTime(t0.Add(-time.Hour))
			a.DeletionTimestamp = &deleted
			v.Addresses[addrName] = a
		}), func(t *testing.T, p ProvisionPlan) {
			// Deleting the placeholder would give the IP to whichever waiting claim MetalLB
			// serves next rather than to this one, whose turn it was. The address has the
			// driver's finalizer: its teardown is the next address pass, so the look is soon,
			// however long ago the address was deleted.
			if len(p.ToHold) != 0 || len(p.Delete) != 0 || len(p.Settle) != 0 || len(p.Create) != 0 || p.Requeue <= 0 || p.Requeue > time.Second {
				t.Fatalf("%+v", p)
			}
		}},
		{"an address kept only by another finalizer: the claim keeps the IP and backs off", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			a := testAddress(ip, "example.com/other")
			a.Spec.ClaimRef.Name, a.Spec.ClaimRef.UID = "deleted", "deleted-uid"
			deleted := metav1.NewTime(t0.Add(-time.Hour))
			a.DeletionTimestamp = &deleted
			v.Addresses[addrName] = a
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.ToHold) != 0 || len(p.Delete) != 0 || len(p.Settle) != 0 || p.Requeue != time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"the torn-down address gone: the claim's own address for the IP MetalLB gave it", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Delete) != 0 || len(p.Settle) != 1 || p.Settle[0].Address.Name != addrName || p.Settle[0].Address.Spec.ClaimRef.UID != "claim-uid" {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim gone: its placeholders go", pview(nil, func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Delete) != 1 || len(p.Create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"placeholder of an older claim of the same name goes", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("old-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Delete) != 1 || len(p.Create) != 1 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 7: a class being deleted provisions nothing, the claim is re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			now := metav1.NewTime(t0)
			v.Class.DeletionTimestamp = &now
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 0 || len(p.Delete) != 1 || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 9: a class not accepted yet: re-checked, not left to an event", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Class.Status.Conditions = nil
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 0 || p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"bound claim: leftovers retired, nothing created", pview(func() *ipamv1.IPAddressClaim {
			c := stampedClaim(ipamv1.IPv4)
			c.Status.Phase = ipamv1.ClaimBound
			return c
		}(), func(v *ProvisionView) { v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)} }), func(t *testing.T, p ProvisionPlan) {
			if len(p.Delete) != 1 || len(p.Create) != 0 || p.Requeue != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"the pool's window has no slot: no placeholder, the claim waits its turn", pview(stampedClaim(ipamv1.Dual), func(v *ProvisionView) {
			v.MayCreate[ipamv1.IPv6] = false
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 1 || p.Create[0].Spec.IPFamilies[0] != corev1.IPv4Protocol ||
				len(p.WaitForSlot) != 1 || p.WaitForSlot[0] != ipamv1.IPv6 || p.Requeue <= 0 || p.Requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"a placeholder records the pool's state it was created in", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "3/7", Free: 7}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Create) != 1 || p.Create[0].Annotations[AnnotationPoolState] != "3/7" {
				t.Fatalf("%+v", p)
			}
		}},
		{"refused by MetalLB, the pool full: no nudge, no write while it stays full", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Now = t0.Add(time.Hour)
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: t0.Add(time.Second)}
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/0", Full: true}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 0 || p.Requeue != time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"refused by MetalLB in the pool's present state, with room in it: nudged after the back-off", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/2/10"
			v.Now = t0.Add(time.Hour)
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: t0.Add(time.Second)}
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/2/10", Count: "1/2", Free: 2}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 1 || p.NudgeStamps[p.Nudge[0].Name] != "1/2/10" {
				t.Fatalf("%+v", p)
			}
		}},
		{"refused again in the state it was nudged in: not before the back-off", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Now = t0.Add(time.Hour)
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/2/10"
			v.Placeholders[0].Annotations[AnnotationNudge] = v.Now.Add(-10 * time.Second).Format(time.RFC3339Nano)
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: v.Now.Add(-9 * time.Second)}
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/2/10", Count: "1/2", Free: 2}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 0 || p.Requeue != 50*time.Second {
				t.Fatalf("%+v", p)
			}
		}},
		{"refused by MetalLB, the pool changed since: nudged once, recording the new state", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/0/10"
			v.Now = t0.Add(time.Hour)
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: t0.Add(time.Second)}
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/1/11", Count: "1/1", Free: 1}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 1 || p.NudgeStamps[p.Nudge[0].Name] != "1/1/11" {
				t.Fatalf("%+v", p)
			}
		}},
		{"refused, the pool back at the counts it was refused under: a new state, nudged at once", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/1/10"
			v.Now = t0.Add(2 * time.Second) // younger than NudgeAfter: the back-off alone would wait
			v.FailedAt = map[types.UID]time.Time{v.Placeholders[0].UID: t0.Add(time.Second)}
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/1/12", Count: "1/1", Free: 1}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 1 || p.NudgeStamps[p.Nudge[0].Name] != "1/1/12" || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"the pool moved on, but MetalLB has not answered the placeholder: no nudge yet", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/1/10"
			v.Now = t0.Add(2 * time.Second)
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/2/12", Count: "1/2", Free: 2}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Nudge) != 0 || p.Requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"two placeholders for one family: the surplus goes", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			a, b := provisioning("claim-uid", ipamv1.IPv4), provisioning("claim-uid", ipamv1.IPv4)
			b.Name = ProvisioningName("claim-uid", ipamv1.IPv4, 1)
			v.Placeholders = []*corev1.Service{b, a}
		}), func(t *testing.T, p ProvisionPlan) {
			if len(p.Delete) != 1 || p.Delete[0].Name != ProvisioningName("claim-uid", ipamv1.IPv4, 1) || len(p.Create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, PlanProvision(tc.view)) })
	}
}

// MetalLB's count of a pool paces provisioning: no more placeholders wait than it counts free
// addresses (but one), never more than the window, and a count MetalLB has not written (a
// version before v0.15, or not yet) leaves the window alone.
func TestProvisioningSlots(t *testing.T) {
	pool := func(st metallb.IPAddressPoolStatus) *metallb.IPAddressPool {
		return &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Generation: 3, ResourceVersion: "70"}, Status: st}
	}
	for _, tc := range []struct {
		name  string
		pool  *metallb.IPAddressPool
		fam   ipamv1.IPFamily
		state PoolState
		slots int
	}{
		{"not counted", pool(metallb.IPAddressPoolStatus{}), ipamv1.IPv4, PoolState{Free: -1}, 32},
		{"no pool", nil, ipamv1.IPv4, PoolState{Free: -1}, 32},
		{"full: one, to ask MetalLB once it has room", pool(metallb.IPAddressPoolStatus{AssignedIPv4: 8}), ipamv1.IPv4, PoolState{Stamp: "3/0/70", Count: "3/0", Full: true}, 1},
		{"three free", pool(metallb.IPAddressPoolStatus{AssignedIPv4: 5, AvailableIPv4: 3}), ipamv1.IPv4, PoolState{Stamp: "3/3/70", Count: "3/3", Free: 3}, 3},
		{"more free than the window", pool(metallb.IPAddressPoolStatus{AvailableIPv6: 1 << 40}), ipamv1.IPv6, PoolState{Stamp: "3/1099511627776/70", Count: "3/1099511627776", Free: 1 << 40}, 32},
		{"the other family is not counted", pool(metallb.IPAddressPoolStatus{AvailableIPv4: 3}), ipamv1.IPv6, PoolState{Free: -1}, 32},
	} {
		st := PoolStateOf(tc.pool, tc.fam)
		if st != tc.state || ProvisioningSlots(st, DefaultProvisioningWindow) != tc.slots {
			t.Errorf("%s: %+v, %d slots; want %+v, %d", tc.name, st, ProvisioningSlots(st, DefaultProvisioningWindow), tc.state, tc.slots)
		}
	}
}

// The pool's state never comes back: the same counts written again (an address taken and given
// back) are a new state, which a placeholder refused in the earlier one is asked again in.
func TestPoolStateIsForwardOnly(t *testing.T) {
	at := func(rv string, available int64) PoolState {
		return PoolStateOf(&metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Generation: 1, ResourceVersion: rv},
			Status: metallb.IPAddressPoolStatus{AssignedIPv4: 4 - available, AvailableIPv4: available}}, ipamv1.IPv4)
	}
	before, full, after := at("10", 1), at("11", 0), at("12", 1)
	if before.Stamp == after.Stamp || before.Stamp == full.Stamp || full.Stamp == after.Stamp {
		t.Fatalf("stamps repeat: %q, %q, %q", before.Stamp, full.Stamp, after.Stamp)
	}
	if before.Count != after.Count {
		t.Fatalf("counts differ: %q, %q", before.Count, after.Count)
	}
	s := provisioning("claim-uid", ipamv1.IPv4)
	s.Annotations[AnnotationPoolState] = before.Stamp
	if PoolMovedOn(s, before) || PoolMovedOn(s, full) || !PoolMovedOn(s, after) {
		t.Fatalf("moved on: in its own state %v, full %v, back at its counts %v", PoolMovedOn(s, before), PoolMovedOn(s, full), PoolMovedOn(s, after))
	}
}
