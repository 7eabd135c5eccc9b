package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Found by FuzzDecideClaim: an address older than a Bound claim's own that is given a claimRef
// to the claim afterwards (an admin's edit, or any racing writer) won the family by age, so the
// core unbound the claim's address and rebound the claim to the other one: the tenant's IP
// changed. A Bound claim keeps its address; the newcomer is the surplus, and is unbound.
func TestBoundClaimIsNotReboundToAnOlderAddress(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "rebind-other", noDriver)
	older := newAddress(t, "203.0.113.81", "rebind-other", nil)
	waitAddressPhase(t, older.Name, ipamv1.AddressAvailable)
	time.Sleep(1100 * time.Millisecond) // creation times have a one-second resolution: make it strictly older

	newClass(t, "rebind", noDriver)
	own := newAddress(t, "203.0.113.82", "rebind", nil)
	newClaim(t, ns, "c", "rebind", ipamv1.IPv4)
	c := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)
	if len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != own.Name {
		t.Fatalf("bound %+v, want %s", c.Status.Addresses, own.Name)
	}

	// The older address is pointed at the Bound claim.
	if err := patchAddressSpec(context.Background(), older.Name,
		fmt.Sprintf(`{"spec":{"claimRef":{"namespace":%q,"name":"c"}}}`, ns)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the newcomer unbound", func() (bool, error) {
		return getAddress(t, older.Name).Spec.ClaimRef == nil, nil
	})
	consistently(t, "the claim keeping its address", 2*time.Second, func() (bool, error) {
		c := getClaim(t, ns, "c")
		a := getAddress(t, own.Name)
		return c.Status.Phase == ipamv1.ClaimBound && len(c.Status.Addresses) == 1 && c.Status.Addresses[0].Name == own.Name &&
			a.Spec.ClaimRef != nil && a.Spec.ClaimRef.Name == "c" && a.Spec.ClaimRef.UID == c.UID, nil
	})
}
