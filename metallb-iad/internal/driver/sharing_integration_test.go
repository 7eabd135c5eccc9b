package driver

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The hold shares its IP (plan/sharing.go): a Service that can share it is pinned with the
// driver's sharing key and gets the IP while the hold keeps it; the hold is neither deleted on
// attach nor made again on detach.

func TestAttachSharesTheHoldsIPAndDetachKeepsTheHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "share", "198.18.50.1"
	ns := fakeMetalLBClass(t, class, "198.18.50.0/28")
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	hold, err := getHold(t, addr.Name)
	if err != nil {
		t.Fatal(err)
	}
	claimKey := plan.SharingKey(addr.Spec.ClaimRef.UID)
	if plan.DriverKey(hold) != claimKey {
		t.Fatalf("the hold does not carry its claim's sharing key %s: %v", claimKey, hold.Annotations)
	}

	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	got := waitServiceIngress(t, ns, "web", ip)
	if got.Annotations[metallb.AnnotationAllowSharedIP] != claimKey || got.Annotations[plan.AnnotationPinned] != "true" {
		t.Fatalf("the Service is not pinned with its claim's sharing key: %v", got.Annotations)
	}
	eventually(t, "the address to say Attached", func() (bool, error) {
		c, err := addressCondition(addr.Name, ipamv1.ConditionHeld)
		return c != nil && c.Reason == plan.ReasonAttached, err
	})
	settled(t, ns)
	after, err := getHold(t, addr.Name)
	if err != nil || after.UID != hold.UID || after.DeletionTimestamp != nil || !slices.Contains(ingress(after), ip) {
		t.Fatalf("the hold did not stay while the Service shares its IP: %v %+v", err, after)
	}

	// Detach by unlinking: the pin goes with the sharing key, in one write; the hold stays.
	unlinked := got.DeepCopy()
	patch := client.MergeFrom(got.DeepCopy())
	delete(unlinked.Annotations, ipamv1.AnnotationServiceClaim)
	if err := admin.Patch(ctx, unlinked, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service to be unpinned, its sharing key gone", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		_, keyed := s.Annotations[metallb.AnnotationAllowSharedIP]
		_, pinned := s.Annotations[metallb.AnnotationLoadBalancerIPs]
		return !keyed && !pinned && len(ingress(&s)) == 0, nil
	})
	eventually(t, "the address to be held by the same hold", func() (bool, error) {
		a := getAddress(t, addr.Name)
		c := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld)
		h, err := getHold(t, addr.Name)
		return a.Status.AttachedTo == nil && c != nil && c.Reason == plan.ReasonHeld && err == nil && h.UID == hold.UID, client.IgnoreNotFound(err)
	})
	// Linked again: attached again, sharing the same hold.
	relinked := unlinked.DeepCopy()
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), relinked); err != nil {
		t.Fatal(err)
	}
	patch = client.MergeFrom(relinked.DeepCopy())
	if relinked.Annotations == nil {
		relinked.Annotations = map[string]string{}
	}
	relinked.Annotations[ipamv1.AnnotationServiceClaim] = "c"
	if err := admin.Patch(ctx, relinked, patch); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, "web", ip)

	// Detach by deleting the Service: the same hold holds the IP, no new one is made.
	if err := admin.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the address to be held by its placeholder again", func() (bool, error) {
		a := getAddress(t, addr.Name)
		c := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld)
		return a.Status.AttachedTo == nil && c != nil && c.Status == "True" && c.Reason == plan.ReasonHeld, nil
	})
	if again, err := getHold(t, addr.Name); err != nil || again.UID != hold.UID {
		t.Fatalf("the hold was made again on detach: %v (uid %s, was %s)", err, again.UID, hold.UID)
	}
}

// A Service that uses the hold's port cannot share the IP: the hold goes first, the Service is
// pinned without the key, and once it is gone the address is held by a new hold.
func TestAServiceOnTheHoldsPortGetsTheHandOverThatDeletesTheHold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "share-port", "198.18.50.17"
	ns := fakeMetalLBClass(t, class, "198.18.50.16/28")
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	hold, err := getHold(t, addr.Name)
	if err != nil {
		t.Fatal(err)
	}

	svc := tenantService(ns, "tcpmux", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	svc.Spec.Ports = []corev1.ServicePort{{Name: "tcpmux", Port: plan.HoldPort, Protocol: corev1.ProtocolTCP}}
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	got := waitServiceIngress(t, ns, "tcpmux", ip)
	if _, ok := got.Annotations[metallb.AnnotationAllowSharedIP]; ok {
		t.Fatalf("a Service that cannot share carries a sharing key: %v", got.Annotations)
	}
	eventually(t, "the hold to be gone", func() (bool, error) {
		s, err := getHold(t, addr.Name)
		return err != nil || s.UID != hold.UID, client.IgnoreNotFound(err)
	})

	if err := admin.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitHeldByPlaceholder(t, addr.Name, ip)
}

// A hold made before holds shared their IP gets the driver's sharing key, in place.
func TestAHoldWithoutTheSharingKeyGetsIt(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const class, ip = "share-upgrade", "198.18.50.33"
	ns := fakeMetalLBClass(t, class, "198.18.50.32/28")
	_, addr := boundClaimWithAddress(t, ns, "c", class, ip)
	waitHeldByPlaceholder(t, addr.Name, ip)
	hold, err := getHold(t, addr.Name)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(hold.DeepCopy())
	delete(hold.Annotations, metallb.AnnotationAllowSharedIP)
	if err := admin.Patch(ctx, hold, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hold to carry the driver's sharing key again", func() (bool, error) {
		s, err := getHold(t, addr.Name)
		return err == nil && s.UID == hold.UID && plan.DriverKey(s) == plan.HoldKey(addr) && slices.Contains(ingress(s), ip), err
	})
	settled(t, ns)
}
