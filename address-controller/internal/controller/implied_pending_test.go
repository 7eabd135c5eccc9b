package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestImpliedPending(t *testing.T) {
	waitingForDriver := ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "c",
		Conditions: []metav1.Condition{{Type: ipamv1.ConditionBound, Status: metav1.ConditionFalse, Reason: ipamv1.ReasonWaitingForAddress}}}
	classMissing := *waitingForDriver.DeepCopy()
	classMissing.Conditions[0].Reason = ipamv1.ReasonClassNotFound
	halfBound := *waitingForDriver.DeepCopy()
	halfBound.Addresses = []ipamv1.ClaimedAddress{{Name: "ip-203-0-113-1", Address: "203.0.113.1", Family: ipamv1.IPv4}}
	for _, tc := range []struct {
		name    string
		current ipamv1.IPAddressClaimStatus
		decided ipamv1.IPAddressClaimStatus
		want    bool
	}{
		{"no status yet, waiting for the driver", ipamv1.IPAddressClaimStatus{}, waitingForDriver, true},
		{"the CRD's default phase, waiting for the driver", ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending}, waitingForDriver, true},
		{"a status written before stays written", waitingForDriver, waitingForDriver, false},
		{"a class missing is said", ipamv1.IPAddressClaimStatus{}, classMissing, false},
		{"a half-bound Dual claim is said", ipamv1.IPAddressClaimStatus{}, halfBound, false},
		{"Bound is written", ipamv1.IPAddressClaimStatus{}, ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound}, false},
		{"a Bound claim is not Pending", ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound}, waitingForDriver, false},
	} {
		claim := &ipamv1.IPAddressClaim{Status: tc.current}
		if got := impliedPending(claim, &tc.decided); got != tc.want {
			t.Errorf("%s: implied=%v, want %v", tc.name, got, tc.want)
		}
	}
}

// A claim waiting for the driver of an accepted class costs the core one write (the finalizer
// with the provisioner and the resolved class) and reads Pending by the CRD's default; anything
// worth saying is still written (here the class losing its driver's acceptance).
func TestClaimWaitingForAnAcceptedDriverIsImpliedPending(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	const provisioner = "accepting-nobody.drivers.example.org"
	class := newClass(t, "implied", provisioner)
	setAccepted := func(status metav1.ConditionStatus) {
		t.Helper()
		c := &ipamv1.IPAddressClass{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(class), c); err != nil {
			t.Fatal(err)
		}
		orig := c.DeepCopy()
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionAccepted, Status: status, Reason: "Test", Message: "the test plays the driver"})
		if err := admin.Status().Patch(ctx, c, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	setAccepted(metav1.ConditionTrue)
	since := time.Now()
	newClaim(t, ns, "c", "implied", ipamv1.IPv4)
	var c *ipamv1.IPAddressClaim
	eventually(t, "the provisioner and the resolved class on the claim", func() (bool, error) {
		c = getClaim(t, ns, "c")
		return c.Annotations[ipamv1.AnnotationProvisioner] == provisioner && c.Annotations[ipamv1.AnnotationResolvedClass] == "implied", nil
	})
	consistently(t, "the claim to stay Pending without a status write", 2*time.Second, func() (bool, error) {
		c := getClaim(t, ns, "c")
		if c.Status.Phase != ipamv1.ClaimPending || len(c.Status.Conditions) > 0 {
			return false, fmt.Errorf("status %+v", c.Status)
		}
		for _, w := range auditedRecords(t, coreUser, since) {
			if w.Namespace == ns && w.Resource == "ipaddressclaims" && w.URI != "" && slices.Contains([]string{"patch", "update"}, w.Verb) &&
				len(w.URI) > 7 && w.URI[len(w.URI)-7:] == "/status" {
				return false, fmt.Errorf("the core wrote the claim's status: %s %s", w.Verb, w.URI)
			}
		}
		return true, nil
	})
	setAccepted(metav1.ConditionFalse)
	waitClaimReason(t, ns, "c", ipamv1.ReasonClassNotAccepted)
}
