package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func withLimit(n int32) func(*ipamv1.IPAddressClass) {
	return func(c *ipamv1.IPAddressClass) { c.Spec.MaxAddressesPerNamespace = ptr(n) }
}

// held lists the addresses of class whose claimRef names namespace: what the namespace holds.
func held(t *testing.T, namespace, class string) []string {
	t.Helper()
	var list ipamv1.IPAddressList
	if err := admin.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range list.Items {
		if a.Spec.ClassName == class && a.Spec.ClaimRef != nil && a.Spec.ClaimRef.Namespace == namespace {
			out = append(out, a.Name+" ("+string(a.Status.Phase)+")")
		}
	}
	return out
}

// waitSettled waits until the claim is Bound or says reason.
func waitSettled(t *testing.T, ns, name, reason string) *ipamv1.IPAddressClaim {
	t.Helper()
	var c ipamv1.IPAddressClaim
	eventually(t, fmt.Sprintf("claim %s/%s to be Bound or to report %s", ns, name, reason), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
		return c.Status.Phase == ipamv1.ClaimBound || cond != nil && cond.Reason == reason, nil
	})
	return &c
}

// The limit counts what a namespace holds, not its claims (issue 31, item 1): with one address
// per namespace under Retain, a tenant that creates a claim, waits for it to bind and deletes it,
// three times over, never holds more than one address. The first loop's address stays Released
// and counts; the later claims neither bind an Available address of the class nor ask the driver
// for one. The next claim is told why it waits, on its condition and in a Warning, and binds once
// an admin frees the Released address.
func TestNamespaceLimitHoldsUnderCreateBindDeleteLoops(t *testing.T) {
	ns := newNamespace(t)
	const class = "limited"
	newClass(t, class, driverName, withLimit(1))
	var spare *ipamv1.IPAddress
	checkHeld := func(when string) {
		t.Helper()
		if h := held(t, ns, class); len(h) > 1 {
			t.Fatalf("%s: namespace %s holds %d addresses of class %s (%s), limit 1", when, ns, len(h), class, strings.Join(h, ", "))
		}
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("loop-%d", i)
		claim := newClaim(t, ns, name, class, ipamv1.IPv4)
		c := waitSettled(t, ns, name, ipamv1.ReasonAddressLimitReached)
		checkHeld(name)
		if i == 1 {
			if c.Status.Phase != ipamv1.ClaimBound {
				t.Fatalf("the first claim is %s, want Bound", c.Status.Phase)
			}
		} else {
			if c.Status.Phase == ipamv1.ClaimBound {
				t.Fatalf("%s is Bound to %+v over the limit", name, c.Status.Addresses)
			}
			consistently(t, name+" to stay Pending, unstamped, within the limit", 2*time.Second, func() (bool, error) {
				c := getClaim(t, ns, name)
				return c.Status.Phase == ipamv1.ClaimPending && c.Annotations[ipamv1.AnnotationProvisioner] == "" &&
					len(held(t, ns, class)) <= 1 && getAddress(t, spare.Name).Spec.ClaimRef == nil, nil
			})
		}
		del(t, claim)
		waitGone(t, claim)
		checkHeld(name + " deleted")
		if i == 1 {
			waitAddressPhase(t, c.Status.Addresses[0].Name, ipamv1.AddressReleased)
			// From now on an Available address of the class is there to take.
			spare = newAddress(t, "203.0.113.190", class, nil)
			waitAddressPhase(t, spare.Name, ipamv1.AddressAvailable)
		}
	}

	newClaim(t, ns, "next", class, ipamv1.IPv4)
	c := waitClaimReason(t, ns, "next", ipamv1.ReasonAddressLimitReached)
	msg := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound).Message
	for _, want := range []string{class, "1", "Released", "admin"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the claim's message %q does not mention %q", msg, want)
		}
	}
	if e := waitEvent(t, ns, "next", ipamv1.ReasonAddressLimitReached); e.Type != corev1.EventTypeWarning || e.Note != msg {
		t.Errorf("event %s %q, want a Warning saying %q", e.Type, e.Note, msg)
	}
	checkHeld("next")

	// An admin frees the Released address: the waiting claim binds, and the namespace holds one.
	var list ipamv1.IPAddressList
	if err := admin.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		if a.Spec.ClassName == class && a.Spec.ClaimRef != nil && a.Spec.ClaimRef.Namespace == ns {
			patch := client.MergeFrom(a.DeepCopy())
			a.Spec.ClaimRef = nil
			if err := admin.Patch(context.Background(), a, patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitClaimPhase(t, ns, "next", ipamv1.ClaimBound)
	checkHeld("next bound")
}

// Claims created at once are counted against the limit one at a time: with a limit of two, two
// of six bind and the others wait, and no more than two are ever stamped for the driver. The
// limit is per namespace (another namespace's claim binds), and raising it lets one more bind.
func TestNamespaceLimitHoldsForClaimsCreatedAtOnce(t *testing.T) {
	ns := newNamespace(t)
	const class = "limited-burst"
	newClass(t, class, driverName, withLimit(2))
	var wg sync.WaitGroup
	names := []string{"a", "b", "c", "d", "e", "f"}
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = admin.Create(context.Background(), &ipamv1.IPAddressClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       ipamv1.IPAddressClaimSpec{ClassName: class},
			})
		}()
	}
	wg.Wait()
	count := func() (bound, limited, stamped int) {
		for _, name := range names {
			c := getClaim(t, ns, name)
			cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
			switch {
			case c.Status.Phase == ipamv1.ClaimBound:
				bound++
			case cond != nil && cond.Reason == ipamv1.ReasonAddressLimitReached:
				limited++
			}
			if c.Annotations[ipamv1.AnnotationProvisioner] != "" {
				stamped++
			}
		}
		return bound, limited, stamped
	}
	eventually(t, "two claims Bound and four at the limit", func() (bool, error) {
		bound, limited, _ := count()
		return bound == 2 && limited == 4, nil
	})
	consistently(t, "two addresses held and two claims stamped", 2*time.Second, func() (bool, error) {
		bound, _, stamped := count()
		return bound == 2 && stamped == 2 && len(held(t, ns, class)) == 2, nil
	})

	other := newNamespace(t)
	newClaim(t, other, "a", class, ipamv1.IPv4)
	waitClaimPhase(t, other, "a", ipamv1.ClaimBound)

	var cl ipamv1.IPAddressClass
	if err := admin.Get(context.Background(), client.ObjectKey{Name: class}, &cl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.MaxAddressesPerNamespace = ptr[int32](3)
	if err := admin.Patch(context.Background(), &cl, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a third claim Bound", func() (bool, error) {
		bound, limited, _ := count()
		return bound == 3 && limited == 3, nil
	})
	consistently(t, "three addresses held", time.Second, func() (bool, error) {
		bound, _, stamped := count()
		return bound == 3 && stamped == 3 && len(held(t, ns, class)) == 3, nil
	})
}
