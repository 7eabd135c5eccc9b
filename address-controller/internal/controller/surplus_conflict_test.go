package controller

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Found by the chaos test (seeds 123529108 and 225280293): unbinding a claim's surplus address
// lost an optimistic-lock race (the driver had just written the address's status) and the pass
// took the 409 for success. The winner's write is a status write, which the claim controller's
// predicates do not wake it for, and a Bound claim has no scheduled re-check: the second
// address stayed bound to the claim for good. A pass whose unbind conflicts must come back.
func TestSurplusUnbindThatConflictsIsRetried(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "surplus-409", noDriver)
	own := newAddress(t, "203.0.113.91", "surplus-409", nil)
	newClaim(t, ns, "c", "surplus-409", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver}
	})
	live := liveClient(t)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}
	if _, err := claimReconciler(frozenClient(t), live, NewMetrics(nil)).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	c := getClaim(t, ns, "c")
	if c.Status.Phase != ipamv1.ClaimBound || len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != own.Name {
		t.Fatalf("first pass: %+v", c.Status)
	}

	// A second address of the family names the Bound claim: the surplus.
	extra := newAddress(t, "203.0.113.92", "surplus-409", nil)
	if err := patchAddressSpec(ctx, extra.Name, fmt.Sprintf(`{"spec":{"claimRef":{"namespace":%q,"name":"c","uid":%q}}}`, ns, c.UID)); err != nil {
		t.Fatal(err)
	}

	// The unbind patch loses the race once.
	conflicts := 0
	racing := &conflictOnce{Client: frozenClient(t), name: extra.Name, conflicts: &conflicts}
	res, err := claimReconciler(racing, live, NewMetrics(nil)).Reconcile(ctx, req)
	if conflicts != 1 {
		t.Fatalf("the pass did not try to unbind the surplus address (%d conflicts)", conflicts)
	}
	if err == nil && res.RequeueAfter <= 0 && !res.Requeue { //nolint:staticcheck // Requeue is what older passes may set
		t.Fatalf("an unbind that lost a race ended the pass without a retry (result %+v): the surplus stays bound", res)
	}
	if ref := getAddress(t, extra.Name).Spec.ClaimRef; ref == nil {
		t.Fatal("the surplus was unbound although its patch failed")
	}

	// The retry unbinds it, and the claim keeps its own address.
	if _, err := claimReconciler(frozenClient(t), live, NewMetrics(nil)).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ref := getAddress(t, extra.Name).Spec.ClaimRef; ref != nil {
		t.Fatalf("the retry left the surplus bound to %s/%s", ref.Namespace, ref.Name)
	}
	if c := getClaim(t, ns, "c"); len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != own.Name {
		t.Fatalf("the claim's addresses changed to %+v", c.Status.Addresses)
	}
}

// conflictOnce answers the first patch of the named IPAddress with 409 Conflict, as the
// apiserver does when another writer changed the address since it was read.
type conflictOnce struct {
	client.Client
	name      string
	conflicts *int
}

func (c *conflictOnce) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if a, ok := obj.(*ipamv1.IPAddress); ok && a.Name == c.name && *c.conflicts == 0 {
		*c.conflicts++
		return apierrors.NewConflict(schema.GroupResource{Group: ipamv1.GroupVersion.Group, Resource: "ipaddresses"}, a.Name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}
