package driver

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

func pview(claim *ipamv1.IPAddressClaim, mods ...func(*provisionView)) provisionView {
	v := provisionView{claim: claim, claimKey: "t/c", class: acceptedClass(), have: map[ipamv1.IPFamily]bool{},
		placeholderExpected: map[ipamv1.IPFamily]bool{}, addresses: map[string]*ipamv1.IPAddress{}, holdOf: map[string]string{},
		nextName: map[ipamv1.IPFamily]string{ipamv1.IPv4: ProvisioningName("claim-uid", ipamv1.IPv4, 0),
			ipamv1.IPv6: ProvisioningName("claim-uid", ipamv1.IPv6, 0)},
		namespace: testDriverNS, now: t0.Add(time.Second), nudgeAfter: 3 * time.Second}
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
		view  provisionView
		check func(t *testing.T, p provisionPlan)
	}{
		{"stamped claim: one placeholder per family", pview(stampedClaim(ipamv1.Dual)), func(t *testing.T, p provisionPlan) {
			if len(p.create) != 2 || p.create[0].Spec.IPFamilies[0] != corev1.IPv4Protocol || p.create[1].Spec.IPFamilies[0] != corev1.IPv6Protocol ||
				p.create[0].Annotations["metallb.io/address-pool"] != "p" || p.requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: a placeholder created and not yet seen is not created again", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholderExpected[ipamv1.IPv4] = true
		}), func(t *testing.T, p provisionPlan) {
			if len(p.create) != 0 || p.requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: the family's address exists (seen or confirmed): nothing more", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.have[ipamv1.IPv4] = true
		}), func(t *testing.T, p provisionPlan) {
			if len(p.create) != 0 || len(p.settle) != 0 || len(p.delete) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"served placeholder: the address, pre-bound, then the hold", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.settle) != 1 || p.settle[0].address.Spec.ClaimRef.UID != "claim-uid" || p.settle[0].address.Name != addrName ||
				p.settle[0].address.Finalizers[0] != Finalizer || len(p.create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"served placeholder of a Service's auto-claim: the address carries the auto-claim mark", pview(func() *ipamv1.IPAddressClaim {
			c := stampedClaim(ipamv1.IPv4)
			c.Annotations[ipamv1.AnnotationAutoClaim] = "true"
			yes := true
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: &yes}}
			return c
		}(), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.settle) != 1 || p.settle[0].address.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
				t.Fatalf("the auto-claim's address is not marked: %+v", p.settle)
			}
		}},
		{"refused by MetalLB: nudged after a while, re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.now = t0.Add(10 * time.Second)
			v.failedAt = map[types.UID]time.Time{v.placeholders[0].UID: t0.Add(time.Second)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.nudge) != 1 || p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"finding 12: not served yet, not refused: no nudge, re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.now = t0.Add(10 * time.Second)
		}), func(t *testing.T, p provisionPlan) {
			if len(p.nudge) != 0 || p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"crash after creating the address: the placeholder becomes its hold", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			v.addresses[addrName] = testAddress(ip, Finalizer)
		}), func(t *testing.T, p provisionPlan) {
			if len(p.toHold) != 1 || p.toHold[0].address != addrName || len(p.settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"another claim's unheld address: handover", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			a := testAddress(ip, Finalizer)
			a.Spec.ClaimRef.Name = "other"
			v.addresses[addrName] = a
		}), func(t *testing.T, p provisionPlan) {
			if len(p.toHold) != 1 || len(p.settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 3: the placeholder just relabelled as the hold, still provisioning in the cache: left alone", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			ph := provisioning("claim-uid", ipamv1.IPv4, ip)
			v.placeholders = []*corev1.Service{ph}
			v.addresses[addrName] = testAddress(ip, Finalizer)
			v.holdOf[addrName] = ph.Name
			v.have[ipamv1.IPv4] = true
		}), func(t *testing.T, p provisionPlan) {
			if len(p.toHold) != 0 || len(p.delete) != 0 || len(p.create) != 0 || len(p.settle) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 2: an address being deleted never gets a relabelled hold", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4, ip)}
			a := testAddress(ip, Finalizer)
			now := metav1.NewTime(t0)
			a.DeletionTimestamp = &now
			v.addresses[addrName] = a
		}), func(t *testing.T, p provisionPlan) {
			if len(p.toHold) != 0 || len(p.delete) != 1 {
				t.Fatalf("%+v", p)
			}
		}},
		{"claim gone: its placeholders go", pview(nil, func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.delete) != 1 || len(p.create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"placeholder of an older claim of the same name goes", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.placeholders = []*corev1.Service{provisioning("old-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.delete) != 1 || len(p.create) != 1 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 7: a class being deleted provisions nothing, the claim is re-checked", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			now := metav1.NewTime(t0)
			v.class.DeletionTimestamp = &now
			v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.create) != 0 || len(p.delete) != 1 || p.requeue <= 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"defect 9: a class not accepted yet: re-checked, not left to an event", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			v.class.Status.Conditions = nil
		}), func(t *testing.T, p provisionPlan) {
			if len(p.create) != 0 || p.requeue <= 0 || p.requeue > time.Minute {
				t.Fatalf("%+v", p)
			}
		}},
		{"bound claim: leftovers retired, nothing created", pview(func() *ipamv1.IPAddressClaim {
			c := stampedClaim(ipamv1.IPv4)
			c.Status.Phase = ipamv1.ClaimBound
			return c
		}(), func(v *provisionView) { v.placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)} }), func(t *testing.T, p provisionPlan) {
			if len(p.delete) != 1 || len(p.create) != 0 || p.requeue != 0 {
				t.Fatalf("%+v", p)
			}
		}},
		{"two placeholders for one family: the surplus goes", pview(stampedClaim(ipamv1.IPv4), func(v *provisionView) {
			a, b := provisioning("claim-uid", ipamv1.IPv4), provisioning("claim-uid", ipamv1.IPv4)
			b.Name = ProvisioningName("claim-uid", ipamv1.IPv4, 1)
			v.placeholders = []*corev1.Service{b, a}
		}), func(t *testing.T, p provisionPlan) {
			if len(p.delete) != 1 || p.delete[0].Name != ProvisioningName("claim-uid", ipamv1.IPv4, 1) || len(p.create) != 0 {
				t.Fatalf("%+v", p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, planProvision(tc.view)) })
	}
}
