package driver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// A claim that names no class, stamped by the core with the default class it resolved (and no
// status written yet: the core leaves such a claim quiet), is provisioned from that class, also
// after another class became the default: the driver follows the core's record, never a default
// of its own.
func TestProvisionsFromTheStampedClassNotTheCurrentDefault(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "stamped-old", "198.18.7.0/29")
	startFakeMetalLB(t, "stamped-old", netip.MustParsePrefix("198.18.7.0/29"))
	newPoolClass(t, "stamped-new", "198.18.7.8/29")
	startFakeMetalLB(t, "stamped-new", netip.MustParsePrefix("198.18.7.8/29"))
	// The newer default: what a driver resolving defaults itself would take.
	var newer ipamv1.IPAddressClass
	if err := admin.Get(ctx, client.ObjectKey{Name: "stamped-new"}, &newer); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(newer.DeepCopy())
	metav1.SetMetaDataAnnotation(&newer.ObjectMeta, ipamv1.AnnotationDefaultClass, "true")
	if err := admin.Patch(ctx, &newer, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var c ipamv1.IPAddressClass
		if admin.Get(context.Background(), client.ObjectKey{Name: "stamped-new"}, &c) == nil {
			p := client.MergeFrom(c.DeepCopy())
			delete(c.Annotations, ipamv1.AnnotationDefaultClass)
			_ = admin.Patch(context.Background(), &c, p)
		}
	})
	ns := newNamespace(t, "stamped")
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c",
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner, ipamv1.AnnotationResolvedClass: "stamped-old"}},
		Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	var got ipamv1.IPAddress
	eventually(t, "an address for the stamped claim", func() (bool, error) {
		var addrs ipamv1.IPAddressList
		if err := admin.List(ctx, &addrs); err != nil {
			return false, err
		}
		for _, a := range addrs.Items {
			if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == ns && ref.Name == "c" {
				got = a
				return true, nil
			}
		}
		return false, nil
	})
	if got.Spec.ClassName != "stamped-old" || !netip.MustParsePrefix("198.18.7.0/29").Contains(netip.MustParseAddr(got.Spec.Address)) {
		t.Fatalf("provisioned %s of class %s, want an address of the stamped class stamped-old (198.18.7.0/29)", got.Spec.Address, got.Spec.ClassName)
	}
}

// The periodic sweep brings back the claim of a provisioning placeholder older than a sweep
// period (here one whose claim does not exist, as if its deletion's event had been missed), and
// the claim's pass retires it.
func TestPeriodicSweepRetiresAPlaceholderWhoseClaimEventWasMissed(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "nowhere", Name: "gone", UID: "gone-uid"},
		Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.IPv4}}
	s := plan.ProvisioningService(testDriverNS, plan.ProvisioningName("gone-uid", ipamv1.IPv4, 0), claim, ipamv1.IPv4, "nowhere", "")
	// Its own events are lost: every pass of its claim is dropped until the placeholder is
	// older than a sweep period, so that only the sweep can bring the claim back.
	found := lostEvents.lose(t, "metallb-iad-claim", reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "nowhere", Name: "gone"}})
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	consistently(t, min(2*sweepEvery(), 5*time.Second), "the placeholder to stay while its claim's pass is held back", func() (bool, error) {
		return true, admin.Get(ctx, client.ObjectKeyFromObject(s), s)
	})
	found()
	eventually(t, "the periodic sweep to bring the claim back and its pass to retire the placeholder", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKeyFromObject(s), s)
		return err != nil && client.IgnoreNotFound(err) == nil, nil
	})
}
