package driver

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A release Service under the name the driver wants for a hold (a release in flight when the
// address needs holding again) is never taken for the hold: it goes, and a real hold is made
// under the name and served.
func TestReleaseServiceIsNeverTakenForAHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "release", "203.0.113.176/28")
	startFakeMetalLB(t, "release", netip.MustParsePrefix("203.0.113.176/28"))
	const ip = "203.0.113.180"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))
	rel := ReleaseService(testDriverNS, HoldName(name), name)
	if err := admin.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	boundClaimWithAddress(t, "tenant", "release", "release", ip)
	waitHeldByPlaceholder(t, name, ip)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: HoldName(name)}, &s); err != nil {
		t.Fatal(err)
	}
	if s.UID == rel.UID || s.Labels[LabelRole] != RoleHold || s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Fatalf("the hold is the release Service or not a hold: %+v", s.ObjectMeta)
	}
}

// A release Service nobody looks after any more (its address gone, or left by a driver that
// restarted) is deleted by the periodic sweep once older than ReleaseFor.
func TestLeftoverReleaseServiceIsSwept(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	testDriver.eventSweepOff.Store(true)
	t.Cleanup(func() { testDriver.eventSweepOff.Store(false) })
	rel := ReleaseService(testDriverNS, "claim-000000000000-v4", "ip-203-0-113-254")
	if err := admin.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	// MetalLB must get to see it: it lives for ReleaseFor.
	consistently(t, testDriver.ReleaseFor/2, "the young release Service to stay", func() (bool, error) {
		return true, admin.Get(ctx, client.ObjectKeyFromObject(rel), &corev1.Service{})
	})
	eventually(t, "the sweep to delete the leftover release Service", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(rel), &corev1.Service{})
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}
