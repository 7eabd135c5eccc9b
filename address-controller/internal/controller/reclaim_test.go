package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// autoClaimOf marks a claim as made by auto-claim for a Service (no garbage collector runs
// here, so the owner need not exist).
func autoClaimOf(service string) func(*ipamv1.IPAddressClaim) {
	return func(c *ipamv1.IPAddressClaim) {
		yes := true
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "true"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: service,
			UID: types.UID("00000000-0000-0000-0000-" + "0000000000aa"), Controller: &yes}}
	}
}

// Every address of an auto-claim is deleted with it under Retain too, including a surplus
// address the claim still had when it was deleted.
func TestAutoClaimAddressesAreDeletedUnderRetain(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "ac-retain", noDriver)
	kept := newAddress(t, "203.0.113.70", "ac-retain", nil)
	claim := newClaim(t, ns, "web", "ac-retain", ipamv1.IPv4, autoClaimOf("web"))
	c := waitClaimPhase(t, ns, "web", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != kept.Name {
		t.Fatalf("bound %+v, want %s", c.Status.Addresses, kept.Name)
	}

	// A driver's late pre-bind gives the claim a second address, and the claim is deleted
	// before the core sorts it out.
	stopCore(t)
	surplus := newAddress(t, "203.0.113.71", "ac-retain", &ipamv1.ClaimReference{Namespace: ns, Name: "web", UID: c.UID})
	del(t, claim)
	restartCore(t)

	waitGone(t, claim)
	waitGone(t, kept)
	waitGone(t, surplus)
}

// The same under Delete, and a plain (not auto-made) claim under Retain releases both.
func TestSurplusAddressOfDeletedClaimFollowsTheReclaimRule(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "plain-retain", noDriver)
	kept := newAddress(t, "203.0.113.72", "plain-retain", nil)
	claim := newClaim(t, ns, "c", "plain-retain", ipamv1.IPv4)
	c := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)

	stopCore(t)
	surplus := newAddress(t, "203.0.113.73", "plain-retain", &ipamv1.ClaimReference{Namespace: ns, Name: "c", UID: c.UID})
	del(t, claim)
	restartCore(t)

	waitGone(t, claim)
	waitAddressPhase(t, kept.Name, ipamv1.AddressReleased)
	waitAddressPhase(t, surplus.Name, ipamv1.AddressReleased)
}
