package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// deleteNamespace deletes a namespace as a cluster does: its claims go first (envtest runs no
// namespace controller, so the test deletes them and the core releases their addresses), then
// the namespace itself once its finalizer is cleared.
func deleteNamespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	del(t, ns)
	var claims ipamv1.IPAddressClaimList
	if err := admin.List(ctx, &claims, client.InNamespace(name)); err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		del(t, &claims.Items[i])
		waitGone(t, &claims.Items[i])
	}
	cs, err := kubernetes.NewForConfig(testEnv.Config)
	if err != nil {
		t.Fatal(err)
	}
	live, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	live.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(ctx, live, metav1.UpdateOptions{}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	waitGone(t, ns)
}

// A tenant namespace deleted and created again under the same name is a new tenant (issue 31,
// item 2): a claim of the old name that names the old tenant's retained address does not take
// it back. The address keeps the old claim's uid and stays Released; the claim says
// AddressUnusable, on its condition and in a Warning, and tells the tenant to ask an admin. Once
// an admin frees the address, the claim binds it.
func TestReleasedAddressIsNotInheritedByARecreatedNamespace(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "inherit", driverName)
	old := newClaim(t, ns, "web", "inherit", ipamv1.IPv4)
	name := waitClaimPhase(t, ns, "web", ipamv1.ClaimBound).Status.Addresses[0].Name

	deleteNamespace(t, ns)
	waitAddressPhase(t, name, ipamv1.AddressReleased)
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	newClaim(t, ns, "web", "inherit", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = name })

	c := waitClaimReason(t, ns, "web", ipamv1.ReasonAddressUnusable)
	msg := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound).Message
	if !strings.Contains(msg, "admin") {
		t.Errorf("the claim's message %q does not tell the tenant to ask an admin", msg)
	}
	if e := waitEvent(t, ns, "web", ipamv1.ReasonAddressUnusable); e.Type != corev1.EventTypeWarning {
		t.Errorf("AddressUnusable event of type %s, want Warning", e.Type)
	}
	consistently(t, "the retained address to stay the old claim's", 2*time.Second, func() (bool, error) {
		a := getAddress(t, name)
		return a.Spec.ClaimRef != nil && a.Spec.ClaimRef.UID == old.UID && a.Status.Phase == ipamv1.AddressReleased &&
			getClaim(t, ns, "web").Status.Phase == ipamv1.ClaimPending, nil
	})

	// An admin frees it: the claim that names it binds it.
	a := getAddress(t, name)
	patch := client.MergeFrom(a.DeepCopy())
	a.Spec.ClaimRef = nil
	if err := admin.Patch(context.Background(), a, patch); err != nil {
		t.Fatal(err)
	}
	c = waitClaimPhase(t, ns, "web", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != name || getAddress(t, name).Spec.ClaimRef.UID != c.UID {
		t.Fatalf("after the admin freed %s the claim is bound to %+v", name, c.Status.Addresses)
	}
}

// An address an admin pre-binds by namespace and name only, for a claim that does not exist yet
// (Released meanwhile, its claim being absent), goes to the claim of that name once it is
// created, whether the claim names the address or not: the core completes the uid.
func TestAddressPreBoundWithoutUIDGoesToTheClaim(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "prebound", noDriver)
	named := newAddress(t, "203.0.113.180", "prebound", &ipamv1.ClaimReference{Namespace: ns, Name: "named"})
	plain := newAddress(t, "203.0.113.181", "prebound", &ipamv1.ClaimReference{Namespace: ns, Name: "plain"})
	waitAddressPhase(t, named.Name, ipamv1.AddressReleased)
	waitAddressPhase(t, plain.Name, ipamv1.AddressReleased)

	newClaim(t, ns, "named", "prebound", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = named.Name })
	newClaim(t, ns, "plain", "prebound", ipamv1.IPv4)
	for claim, addr := range map[string]string{"named": named.Name, "plain": plain.Name} {
		c := waitClaimPhase(t, ns, claim, ipamv1.ClaimBound)
		if c.Status.Addresses[0].Name != addr {
			t.Errorf("claim %s bound %+v, want %s", claim, c.Status.Addresses, addr)
		}
		a := waitAddressPhase(t, addr, ipamv1.AddressBound)
		if a.Spec.ClaimRef.UID != c.UID {
			t.Errorf("address %s: claimRef uid %q, want the claim's %q", addr, a.Spec.ClaimRef.UID, c.UID)
		}
	}
}
