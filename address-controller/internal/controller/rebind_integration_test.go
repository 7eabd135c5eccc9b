package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Found by FuzzDecideClaim: an address older than a Bound claim's own that is given a claimRef
// to the claim afterwards (an admin's edit without the uid, or a driver's late pre-bind with it)
// won the family by age, so the core unbound the claim's address and rebound the claim to the
// other one: the tenant's IP changed. A Bound claim keeps its address; the newcomer is the
// surplus, and is unbound.
func TestBoundClaimIsNotReboundToAnOlderAddress(t *testing.T) {
	for i, withUID := range []bool{false, true} {
		t.Run(fmt.Sprintf("uid=%v", withUID), func(t *testing.T) {
			ns := newNamespace(t)
			otherClass, class := fmt.Sprintf("rebind-other-%d", i), fmt.Sprintf("rebind-%d", i)
			newClass(t, otherClass, noDriver)
			older := newAddress(t, fmt.Sprintf("203.0.113.%d", 81+2*i), otherClass, nil)
			waitAddressPhase(t, older.Name, ipamv1.AddressAvailable)
			time.Sleep(1100 * time.Millisecond) // creation times have a one-second resolution: make it strictly older

			newClass(t, class, noDriver)
			own := newAddress(t, fmt.Sprintf("203.0.113.%d", 82+2*i), class, nil)
			newClaim(t, ns, "c", class, ipamv1.IPv4)
			c := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)
			if len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != own.Name {
				t.Fatalf("bound %+v, want %s", c.Status.Addresses, own.Name)
			}

			// The older address is pointed at the Bound claim.
			ref := fmt.Sprintf(`{"namespace":%q,"name":"c"}`, ns)
			if withUID {
				ref = fmt.Sprintf(`{"namespace":%q,"name":"c","uid":%q}`, ns, c.UID)
			}
			if err := patchAddressSpec(context.Background(), older.Name, `{"spec":{"claimRef":`+ref+`}}`); err != nil {
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
		})
	}
}
