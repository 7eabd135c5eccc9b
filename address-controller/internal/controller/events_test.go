package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A lasting situation is reported once, however many passes see it: a Dual claim resolving
// its class with several defaults marked hears about it once, not once per family and pass.
func TestMultipleDefaultClassesIsSaidOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	first := newClass(t, "twin-default-a", noDriver, markDefault)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision
	second := newClass(t, "twin-default-b", noDriver, markDefault)
	t.Cleanup(func() {
		for _, cls := range []*ipamv1.IPAddressClass{first, second} {
			patch := client.MergeFrom(cls.DeepCopy())
			cls.Annotations = nil
			_ = admin.Patch(context.Background(), cls, patch)
		}
	})
	newClaim(t, ns, "dual", "", ipamv1.Dual)
	waitClaimReason(t, ns, "dual", ipamv1.ReasonWaitingForAddress)
	waitEvent(t, ns, "dual", "MultipleDefaultClasses")
	// More passes: tenant updates of the claim.
	for i := range 3 {
		c := getClaim(t, ns, "dual")
		patch := client.MergeFrom(c.DeepCopy())
		c.Labels = map[string]string{"touch": string(rune('a' + i))}
		if err := admin.Patch(ctx, c, patch); err != nil {
			t.Fatal(err)
		}
	}
	consistently(t, "MultipleDefaultClasses to be said once", 2*time.Second, func() (bool, error) {
		if n := timesSaidFor(t, ns, "dual", "MultipleDefaultClasses"); n != 1 {
			return false, fmt.Errorf("said %d times", n)
		}
		return true, nil
	})
}
