package plan

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Whole-plan tables: each case states the complete plan a planner must return, so an extra
// write, event or re-check fails the test as surely as a missing one (the table tests beside
// them check chosen fields of many more cases).
// A condition's transition time is the clock's (meta.SetStatusCondition), and an empty list is
// no list.
var wholePlan = cmp.Options{
	cmp.AllowUnexported(AttachPlan{}, AddressPlan{}, ProvisionPlan{}, ingressClear{}, settlement{}, Event{}, Unsay{}),
	cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
	cmpopts.EquateEmpty(),
}

// heldStatus is an address status with only the Held condition.
func heldStatus(ok bool, reason, message string) *ipamv1.IPAddressStatus {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return &ipamv1.IPAddressStatus{Conditions: []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: status, Reason: reason, Message: message}}}
}

func TestPlanProvisionWholePlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		view ProvisionView
		want ProvisionPlan
	}{
		{"a stamped IPv4 claim: one placeholder, looked at again", pview(stampedClaim(ipamv1.IPv4)), ProvisionPlan{
			Create:  []*corev1.Service{ProvisioningService(testDriverNS, ProvisioningName("claim-uid", ipamv1.IPv4, 0), stampedClaim(ipamv1.IPv4), ipamv1.IPv4, "p", "")},
			Requeue: 3 * time.Second, // NudgeAfter: MetalLB is given that long before a look
		}},
		{"a stamped IPv4 claim, the pool's window full: nothing but a look a minute later", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.MayCreate[ipamv1.IPv4] = false
		}), ProvisionPlan{WaitForSlot: []ipamv1.IPFamily{ipamv1.IPv4}, Requeue: time.Minute}},
		{"a placeholder MetalLB refused on a full pool, an hour on: nothing but a look a minute later", pview(stampedClaim(ipamv1.IPv4), func(v *ProvisionView) {
			v.Placeholders = []*corev1.Service{provisioning("claim-uid", ipamv1.IPv4)}
			v.Placeholders[0].Annotations[AnnotationPoolState] = "1/0"
			v.Now = t0.Add(time.Hour)
			v.Pool[ipamv1.IPv4] = PoolState{Stamp: "1/0", Full: true}
		}), ProvisionPlan{Requeue: time.Minute}},
	} {
		if diff := cmp.Diff(tc.want, PlanProvision(tc.view), wholePlan); diff != "" {
			t.Errorf("%s: plan (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPlanAttachWholePlan(t *testing.T) {
	const ip = "203.0.113.5"
	for _, tc := range []struct {
		name string
		view AttachView
		want AttachPlan
	}{
		{"a Bound claim: record the attachment, pin with the driver's sharing key; the hold stays", func() AttachView {
			v := attachViewOf(tenantSvc(), boundClaim(ipamv1.ClaimBound, ip), testAddress(ip, Finalizer))
			v.Holds = []*corev1.Service{hold(testAddress(ip).Name, ip, true)}
			return v
		}(), AttachPlan{
			Attach: []*ipamv1.IPAddress{testAddress(ip, Finalizer)},
			Pin:    ip,
			Key:    testKey,
			// Every lasting warning about the Service ends: nothing stands in the way.
			Clear: []string{ReasonClaimNotReady, ReasonFamilyMismatch, ReasonForeignPin, ReasonClaimInUse, ReasonAddressNotServable,
				ReasonReservedAddressRequested, ReasonForeignLoadBalancerClass, ReasonPoolExcludesService},
		}},
		// Detach is "end any attachment": the applier unpins only a pin carrying the driver's
		// marker, of which there is none, so it writes nothing; the Service stays unparked.
		{"a Service that links to no claim and requests nothing: detached, not parked", attachViewOf(svc("t", "plain", "plain-uid"), nil),
			AttachPlan{Detach: true, Parked: new(bool), Clear: []string{ReasonClaimNotReady, ReasonFamilyMismatch, ReasonForeignPin, ReasonClaimInUse, ReasonAddressNotServable,
				ReasonReservedAddressRequested, ReasonForeignLoadBalancerClass, ReasonPoolExcludesService}}},
	} {
		if diff := cmp.Diff(tc.want, PlanAttach(tc.view), wholePlan); diff != "" {
			t.Errorf("%s: plan (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPlanAddressWholePlan(t *testing.T) {
	const ip = "203.0.113.5"
	name := testAddress(ip).Name
	for _, tc := range []struct {
		name string
		view AddressView
		want AddressPlan
	}{
		{"a served hold: Held, nothing else", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{hold(name, ip, true)}
		}), AddressPlan{Status: heldStatus(true, ReasonHeld, "held by placeholder cozy-metallb-iad/"+HoldName(name))}},
		{"a served hold made before holds shared their IP: it gets the driver's sharing key", view(testAddress(ip, Finalizer), func(v *AddressView) {
			v.Holds = []*corev1.Service{unkeyed(hold(name, ip, true))}
		}), AddressPlan{
			PinHold: unkeyed(hold(name, ip, true)),
			Status:  heldStatus(true, ReasonHeld, "held by placeholder cozy-metallb-iad/"+HoldName(name)),
		}},
		{"no hold: one is made, waiting for MetalLB", view(testAddress(ip, Finalizer)), AddressPlan{
			CreateHold: HoldService(testDriverNS, name, netip.MustParseAddr(ip), "p", testKey),
			Status:     heldStatus(false, ReasonWaitingForMetalLB, "waiting for MetalLB to assign "+ip+" to placeholder cozy-metallb-iad/"+HoldName(name)),
			Requeue:    3 * time.Second,
		}},
		{"an address of another driver's class: left alone", view(testAddress(ip), func(v *AddressView) {
			v.Class.Spec.Provisioner = "other.example.com"
		}), AddressPlan{}},
	} {
		if diff := cmp.Diff(tc.want, PlanAddress(tc.view), wholePlan); diff != "" {
			t.Errorf("%s: plan (-want +got):\n%s", tc.name, diff)
		}
	}
}
