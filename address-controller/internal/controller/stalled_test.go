package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A claim that waits for something only a person can do (here: the address it names does not
// exist) says Stalled, as kstatus reads it; once it recovers the condition is gone.
func TestClaimStalledForTerminalReasons(t *testing.T) {
	ns := newNamespace(t)
	cls := newClass(t, "stalled", noDriver)
	t.Cleanup(func() { del(t, cls) })
	claim := newClaim(t, ns, "named", cls.Name, ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = "ip-203-0-113-98" })
	t.Cleanup(func() { del(t, claim) })
	c := waitClaimReason(t, ns, "named", ipamv1.ReasonAddressNotFound)
	cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionStalled)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ipamv1.ReasonAddressNotFound {
		t.Fatalf("Stalled is %+v, want True with reason %s", cond, ipamv1.ReasonAddressNotFound)
	}
	addr := newAddress(t, "203.0.113.98", cls.Name, nil)
	t.Cleanup(func() { del(t, addr) })
	c = waitClaimPhase(t, ns, "named", ipamv1.ClaimBound)
	if cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionStalled); cond != nil {
		t.Fatalf("a Bound claim still says Stalled: %+v", cond)
	}
}
