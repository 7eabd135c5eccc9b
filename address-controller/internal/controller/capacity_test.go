package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A driver's capacity writes on its class (status.capacity, at most every 30 s per class) decide
// nothing for the claims waiting for the class or its Released addresses: they wake none of them.
func TestClassCapacityUpdatesWakeNothing(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "capacity-only", noDriver)
	const n = 20
	var claims []*ipamv1.IPAddressClaim
	for i := range n {
		claims = append(claims, newClaim(t, ns, fmt.Sprintf("c%d", i), cls.Name, ipamv1.IPv4))
	}
	addr := newAddress(t, "198.51.100.77", cls.Name, &ipamv1.ClaimReference{Namespace: ns, Name: "gone"})
	t.Cleanup(func() {
		for _, c := range claims {
			del(t, c)
		}
		del(t, addr)
		del(t, cls)
	})
	eventually(t, "the address to be Released", func() (bool, error) {
		var a ipamv1.IPAddress
		err := admin.Get(ctx, client.ObjectKeyFromObject(addr), &a)
		return err == nil && a.Status.Phase == ipamv1.AddressReleased, err
	})
	eventually(t, "every claim to be reconciled", func() (bool, error) {
		for _, c := range claims {
			var got ipamv1.IPAddressClaim
			if err := admin.Get(ctx, client.ObjectKeyFromObject(c), &got); err != nil || got.Status.Phase == "" {
				return false, err
			}
		}
		return true, nil
	})
	settled(t)
	claimsBefore, addressesBefore := reconciles(t, "ipaddressclaim"), reconciles(t, "ipaddress")
	for i := range 5 {
		var cur ipamv1.IPAddressClass
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cls), &cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Status.Capacity = []ipamv1.FamilyCapacity{{Family: ipamv1.IPv4, Size: int64(100 + i)}}
		if err := admin.Status().Patch(ctx, &cur, patch); err != nil {
			t.Fatal(err)
		}
	}
	consistently(t, "capacity updates to wake no claim and no address", 2*time.Second, func() (bool, error) {
		if got := reconciles(t, "ipaddressclaim") - claimsBefore; got >= n {
			return false, fmt.Errorf("%d claim passes after 5 capacity updates", got)
		}
		if got := reconciles(t, "ipaddress") - addressesBefore; got >= 5 {
			return false, fmt.Errorf("%d address passes after 5 capacity updates", got)
		}
		return true, nil
	})
}
