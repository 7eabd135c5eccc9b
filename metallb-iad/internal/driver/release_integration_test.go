package driver

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
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
	rel := plan.ReleaseService(testDriverNS, plan.HoldName(name), name)
	if err := admin.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	boundClaimWithAddress(t, "tenant", "release", "release", ip)
	waitHeldByPlaceholder(t, name, ip)
	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(name)}, &s); err != nil {
		t.Fatal(err)
	}
	if s.UID == rel.UID || s.Labels[plan.LabelRole] != plan.RoleHold || s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Fatalf("the hold is the release Service or not a hold: %+v", s.ObjectMeta)
	}
	// Made because the pass deleted the release first, not because the release expired (or was
	// swept) after ReleaseFor: the apiserver's own clock says when each was created.
	if gap := s.CreationTimestamp.Sub(rel.CreationTimestamp.Time); gap >= testDriver.ReleaseFor {
		t.Fatalf("the hold came %s after the release Service, not before it would have expired (%s)", gap, testDriver.ReleaseFor)
	}
}

// A release Service nobody looks after any more (its address gone, or left by a driver that
// restarted) is deleted by the periodic sweep once older than ReleaseFor.
func TestLeftoverReleaseServiceIsSwept(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	// Its address's events are lost (no pass of the address, which would sweep it, runs).
	lostEvents.lose(t, "metallb-iad-address", reconcile.Request{NamespacedName: types.NamespacedName{Name: "ip-203-0-113-254"}})
	rel := plan.ReleaseService(testDriverNS, "claim-000000000000-v4", "ip-203-0-113-254")
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

// A release Service under the name of a claim's first provisioning placeholder (a release of
// the claim's earlier address, in flight) is never taken for that placeholder: the claim gets
// one under its next name, and the release Service is left as it is.
func TestReleaseServiceIsNeverTakenForAProvisioningPlaceholder(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	// The class comes after the release Service: until it exists the driver provisions nothing,
	// and cannot take the first name itself before the test gives it to the release.
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "relprov",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: "relprov", Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	rel := plan.ReleaseService(testDriverNS, plan.ProvisioningName(string(claim.UID), ipamv1.IPv4, 0), "ip-198-51-100-225")
	if err := admin.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	newPoolClass(t, "relprov", "198.51.100.224/28")
	claim.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending, ClassName: "relprov"}
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	next := client.ObjectKey{Namespace: testDriverNS, Name: plan.ProvisioningName(string(claim.UID), ipamv1.IPv4, 1)}
	eventually(t, "a provisioning placeholder under the claim's next name", func() (bool, error) {
		var p corev1.Service
		err := admin.Get(ctx, next, &p)
		return err == nil && p.Labels[plan.LabelRole] == plan.RoleProvisioning && p.Labels[plan.LabelClaimUID] == string(claim.UID), client.IgnoreNotFound(err)
	})
	var r corev1.Service
	err := admin.Get(ctx, client.ObjectKeyFromObject(rel), &r)
	if err == nil && (r.UID != rel.UID || r.Labels[plan.LabelRole] != plan.RoleRelease || r.Spec.Type != corev1.ServiceTypeClusterIP) {
		t.Fatalf("the release Service was taken over: %+v", r.ObjectMeta)
	}
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	_ = admin.Delete(ctx, claim)
}
