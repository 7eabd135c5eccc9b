package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// noDriver is a provisioner nobody implements: classes of it only bind pre-provisioned
// addresses.
const noDriver = "nobody.drivers.example.org"

func markDefault(c *ipamv1.IPAddressClass) {
	c.Annotations = map[string]string{ipamv1.AnnotationDefaultClass: "true"}
}

func withDelete(c *ipamv1.IPAddressClass) { c.Spec.ReclaimPolicy = ipamv1.ReclaimDelete }

func TestClaimBindsThroughDriverForEachFamily(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "families", driverName)
	for _, tc := range []struct {
		family ipamv1.IPFamily
		want   []ipamv1.IPFamily
	}{
		{ipamv1.IPv4, []ipamv1.IPFamily{ipamv1.IPv4}},
		{ipamv1.IPv6, []ipamv1.IPFamily{ipamv1.IPv6}},
		{ipamv1.Dual, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			name := strings.ToLower(string(tc.family))
			newClaim(t, ns, name, "families", tc.family)
			c := waitClaimPhase(t, ns, name, ipamv1.ClaimBound)
			if len(c.Status.Addresses) != len(tc.want) {
				t.Fatalf("addresses = %+v, want families %v", c.Status.Addresses, tc.want)
			}
			for i, fam := range tc.want {
				got := c.Status.Addresses[i]
				if got.Family != fam {
					t.Fatalf("address %d is %s, want %s", i, got.Family, fam)
				}
				a := getAddress(t, got.Name)
				if a.Spec.ClaimRef == nil || a.Spec.ClaimRef.UID != c.UID || a.Spec.Address != got.Address {
					t.Fatalf("address %s not bound to the claim: %+v", a.Name, a.Spec)
				}
				waitAddressPhase(t, a.Name, ipamv1.AddressBound)
				if !controllerutil.ContainsFinalizer(a, ipamv1.FinalizerAddress) {
					t.Fatalf("address %s lacks the protection finalizer", a.Name)
				}
			}
			if c.Status.ClassName != "families" || c.Annotations[ipamv1.AnnotationProvisioner] != driverName {
				t.Fatalf("status.className=%q provisioner annotation=%q", c.Status.ClassName, c.Annotations[ipamv1.AnnotationProvisioner])
			}
			if !controllerutil.ContainsFinalizer(c, ipamv1.FinalizerClaim) {
				t.Fatal("claim lacks the protection finalizer")
			}
			cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != c.Generation {
				t.Fatalf("Bound condition = %+v", cond)
			}
			// The way to Bound costs no event (docs/design.md#the-write-budget): the status says
			// it.
			if ev := eventsFor(t, ns, name, ""); len(ev) != 0 {
				t.Fatalf("events on the way to Bound: %+v", ev)
			}
		})
	}
}

func TestDefaultClass(t *testing.T) {
	ns := newNamespace(t)

	// None marked: the claim waits and says why.
	newClaim(t, ns, "nodefault", "", ipamv1.IPv4)
	waitClaimReason(t, ns, "nodefault", ipamv1.ReasonNoDefaultClass)
	waitEvent(t, ns, "nodefault", ipamv1.ReasonNoDefaultClass)

	// One marked: the waiting claim binds through it, and keeps it (sticky).
	first := newClass(t, "default-a", driverName, markDefault)
	c := waitClaimPhase(t, ns, "nodefault", ipamv1.ClaimBound)
	if c.Status.ClassName != "default-a" {
		t.Fatalf("resolved class %q, want default-a", c.Status.ClassName)
	}

	// Several marked: the newest wins and a Warning says so.
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision
	second := newClass(t, "default-b", driverName, markDefault)
	t.Cleanup(func() {
		for _, cls := range []*ipamv1.IPAddressClass{first, second} {
			patch := client.MergeFrom(cls.DeepCopy())
			cls.Annotations = nil
			_ = admin.Patch(context.Background(), cls, patch)
		}
	})
	newClaim(t, ns, "several", "", ipamv1.IPv4)
	c = waitClaimPhase(t, ns, "several", ipamv1.ClaimBound)
	if c.Status.ClassName != "default-b" {
		t.Fatalf("with two defaults the claim used %q, want the newest, default-b", c.Status.ClassName)
	}
	ev := waitEvent(t, ns, "several", "MultipleDefaultClasses")
	if !strings.Contains(ev.Note, "default-a") || !strings.Contains(ev.Note, "default-b") {
		t.Fatalf("event does not name both classes: %q", ev.Note)
	}
	if got := getClaim(t, ns, "nodefault").Status.ClassName; got != "default-a" {
		t.Fatalf("an already resolved claim moved to class %q", got)
	}
}

func TestClaimForMissingClassBindsWhenClassAppears(t *testing.T) {
	ns := newNamespace(t)
	newClaim(t, ns, "early", "late-class", ipamv1.IPv4)
	c := waitClaimReason(t, ns, "early", ipamv1.ReasonClassNotFound)
	if c.Status.Phase != ipamv1.ClaimPending {
		t.Fatalf("phase %s, want Pending", c.Status.Phase)
	}
	newClass(t, "late-class", driverName)
	waitClaimPhase(t, ns, "early", ipamv1.ClaimBound)
}

func TestRefusedClassKeepsClaimsPending(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "refused", driverName, func(c *ipamv1.IPAddressClass) {
		c.Spec.Parameters = map[string]string{"accept": "false"}
	})
	newClaim(t, ns, "c", "refused", ipamv1.IPv4)
	c := waitClaimReason(t, ns, "c", ipamv1.ReasonClassNotAccepted)
	cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
	if !strings.Contains(cond.Message, "Refused") {
		t.Fatalf("message does not carry the driver's reason: %q", cond.Message)
	}
	consistently(t, "the claim to stay Pending", time.Second, func() (bool, error) {
		return getClaim(t, ns, "c").Status.Phase == ipamv1.ClaimPending, nil
	})
}

func TestPreProvisionedAvailableAddressIsMatched(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "manual", noDriver)
	v6 := newAddress(t, "2001:db8:2::5", "manual", nil)
	v4 := newAddress(t, "203.0.113.5", "manual", nil)
	waitAddressPhase(t, v4.Name, ipamv1.AddressAvailable)
	waitAddressPhase(t, v6.Name, ipamv1.AddressAvailable)

	newClaim(t, ns, "dual", "manual", ipamv1.Dual)
	c := waitClaimPhase(t, ns, "dual", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != v4.Name || c.Status.Addresses[1].Name != v6.Name {
		t.Fatalf("bound %+v, want %s and %s", c.Status.Addresses, v4.Name, v6.Name)
	}
	waitAddressPhase(t, v4.Name, ipamv1.AddressBound)

	// Nothing left: a second claim asks the (absent) driver and waits.
	newClaim(t, ns, "more", "manual", ipamv1.IPv4)
	c = waitClaimReason(t, ns, "more", ipamv1.ReasonWaitingForAddress)
	if c.Annotations[ipamv1.AnnotationProvisioner] != noDriver {
		t.Fatalf("provisioner annotation %q, want %q", c.Annotations[ipamv1.AnnotationProvisioner], noDriver)
	}
}

func TestAddressName(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "byname", noDriver)
	newAddress(t, "203.0.113.20", "byname", nil)
	want := newAddress(t, "203.0.113.21", "byname", nil)

	newClaim(t, ns, "exact", "", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = want.Name })
	c := waitClaimPhase(t, ns, "exact", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != want.Name || c.Status.ClassName != "byname" {
		t.Fatalf("bound %+v in class %q, want %s in byname", c.Status.Addresses, c.Status.ClassName, want.Name)
	}

	// Naming an address that is taken, or missing, waits with a reason.
	newClaim(t, ns, "taken", "byname", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = want.Name })
	waitClaimReason(t, ns, "taken", ipamv1.ReasonAddressUnusable)
	newClaim(t, ns, "missing", "byname", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) { c.Spec.AddressName = "ip-203-0-113-99" })
	waitClaimReason(t, ns, "missing", ipamv1.ReasonAddressNotFound)
	newAddress(t, "203.0.113.99", "byname", nil)
	waitClaimPhase(t, ns, "missing", ipamv1.ClaimBound)
}

func TestTwoClaimsRaceForOneAddress(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "race", noDriver)
	a := newAddress(t, "203.0.113.30", "race", nil)
	waitAddressPhase(t, a.Name, ipamv1.AddressAvailable)

	var wg sync.WaitGroup
	for _, name := range []string{"left", "right"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = admin.Create(context.Background(), &ipamv1.IPAddressClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       ipamv1.IPAddressClaimSpec{ClassName: "race"},
			})
		}()
	}
	wg.Wait()
	var bound, pending int
	eventually(t, "one claim Bound and the other waiting", func() (bool, error) {
		bound, pending = 0, 0
		for _, name := range []string{"left", "right"} {
			c := getClaim(t, ns, name)
			switch {
			case c.Status.Phase == ipamv1.ClaimBound:
				bound++
			case c.Status.Phase == ipamv1.ClaimPending && c.Annotations[ipamv1.AnnotationProvisioner] != "":
				pending++
			}
		}
		return bound == 1 && pending == 1, nil
	})
	consistently(t, "exactly one winner", time.Second, func() (bool, error) {
		n := 0
		for _, name := range []string{"left", "right"} {
			if getClaim(t, ns, name).Status.Phase == ipamv1.ClaimBound {
				n++
			}
		}
		return n == 1, nil
	})
	ref := getAddress(t, a.Name).Spec.ClaimRef
	winner := getClaim(t, ns, ref.Name)
	if winner.Status.Phase != ipamv1.ClaimBound || ref.UID != winner.UID {
		t.Fatalf("the address is bound to %s/%s but that claim is %s", ref.Namespace, ref.Name, winner.Status.Phase)
	}
}

func TestRetainReleaseDelayAndRebind(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "retain-delay", driverName, func(c *ipamv1.IPAddressClass) {
		c.Spec.ReleaseDelay = &metav1.Duration{Duration: 3 * time.Second}
	})
	claim := newClaim(t, ns, "first", "retain-delay", ipamv1.IPv4)
	name := waitClaimPhase(t, ns, "first", ipamv1.ClaimBound).Status.Addresses[0].Name

	del(t, claim)
	waitGone(t, claim)
	a := waitAddressPhase(t, name, ipamv1.AddressReleased)
	if a.Status.ReleasedAt == nil || a.Spec.ClaimRef == nil {
		t.Fatalf("a Released address keeps its claimRef and records releasedAt: %+v %+v", a.Spec, a.Status)
	}
	a = waitAddressPhase(t, name, ipamv1.AddressAvailable)
	if a.Spec.ClaimRef != nil || a.Status.ReleasedAt != nil {
		t.Fatalf("after releaseDelay the address should be free: %+v %+v", a.Spec, a.Status)
	}
	waitEvent(t, "", name, "ReleaseDelayPassed")

	provisioned := driver.Provisioned()
	newClaim(t, ns, "second", "retain-delay", ipamv1.IPv4)
	c := waitClaimPhase(t, ns, "second", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != name {
		t.Fatalf("the new claim got %s, want the freed %s", c.Status.Addresses[0].Name, name)
	}
	if driver.Provisioned() != provisioned {
		t.Fatal("the driver provisioned although an Available address existed")
	}
}

func TestRetainWithoutDelayStaysReleasedUntilAdminClearsClaimRef(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "retain", driverName)
	claim := newClaim(t, ns, "c", "retain", ipamv1.IPv4)
	name := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound).Status.Addresses[0].Name
	del(t, claim)
	waitAddressPhase(t, name, ipamv1.AddressReleased)
	consistently(t, "the address to stay Released", 2*time.Second, func() (bool, error) {
		return getAddress(t, name).Status.Phase == ipamv1.AddressReleased, nil
	})
	a := getAddress(t, name)
	patch := client.MergeFrom(a.DeepCopy())
	a.Spec.ClaimRef = nil
	if err := admin.Patch(context.Background(), a, patch); err != nil {
		t.Fatal(err)
	}
	waitAddressPhase(t, name, ipamv1.AddressAvailable)
}

func TestDeletePolicyDeletesAddressWithClaim(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "delete", driverName, withDelete)
	claim := newClaim(t, ns, "c", "delete", ipamv1.Dual)
	c := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)
	for _, ca := range c.Status.Addresses {
		if got := getAddress(t, ca.Name).Spec.ReclaimPolicy; got != ipamv1.ReclaimDelete {
			t.Fatalf("address reclaimPolicy %q, want Delete (copied from the class)", got)
		}
	}
	del(t, claim)
	for _, ca := range c.Status.Addresses {
		waitGone(t, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ca.Name}})
	}
	waitGone(t, claim)
}

func TestClaimFinalizerRemovedByHand(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "safety", driverName)
	newClass(t, "safety-delete", driverName, withDelete)
	for _, tc := range []struct {
		class string
		check func(t *testing.T, name string)
	}{
		{"safety", func(t *testing.T, name string) { waitAddressPhase(t, name, ipamv1.AddressReleased) }},
		{"safety-delete", func(t *testing.T, name string) {
			waitGone(t, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}},
	} {
		t.Run(tc.class, func(t *testing.T) {
			newClaim(t, ns, tc.class, tc.class, ipamv1.IPv4)
			c := waitClaimPhase(t, ns, tc.class, ipamv1.ClaimBound)
			name := c.Status.Addresses[0].Name
			// Stop the core so the finalizer is gone before it can act, as after a crash.
			if err := core.stop(); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(c.DeepCopy())
			c.Finalizers = nil
			if err := admin.Patch(context.Background(), c, patch); err != nil {
				t.Fatal(err)
			}
			del(t, c)
			waitGone(t, c)
			var err error
			if core, err = startCore(coreCfg); err != nil {
				t.Fatal(err)
			}
			tc.check(t, name)
		})
	}
}

func TestAddressDeletedWhileBoundWaits(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "protected", driverName)
	claim := newClaim(t, ns, "c", "protected", ipamv1.IPv4)
	name := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound).Status.Addresses[0].Name
	a := getAddress(t, name)
	del(t, a)
	waitEvent(t, "", name, "DeletionBlocked")
	consistently(t, "the bound address to stay", time.Second, func() (bool, error) {
		a := getAddress(t, name)
		return a.DeletionTimestamp != nil, nil
	})
	if got := getClaim(t, ns, "c").Status.Phase; got != ipamv1.ClaimBound {
		t.Fatalf("claim is %s while its address waits for deletion", got)
	}
	del(t, claim)
	waitGone(t, a)
	waitGone(t, claim)
	if n := len(eventsFor(t, "", name, "DeletionBlocked")); n != 1 {
		t.Fatalf("DeletionBlocked emitted %d times, want once", n)
	}
}

func TestLostAddressAndRecovery(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "lossy", driverName)
	newClaim(t, ns, "c", "lossy", ipamv1.IPv4)
	name := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound).Status.Addresses[0].Name

	setLost := func(status metav1.ConditionStatus) {
		a := getAddress(t, name)
		patch := client.MergeFrom(a.DeepCopy())
		meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionLost, Status: status, Reason: "Test", Message: "set by the test as the driver"})
		if err := admin.Status().Patch(context.Background(), a, patch); err != nil {
			t.Fatal(err)
		}
	}
	setLost(metav1.ConditionTrue)
	waitAddressPhase(t, name, ipamv1.AddressLost)
	c := waitClaimPhase(t, ns, "c", ipamv1.ClaimLost)
	if cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound); cond.Reason != ipamv1.ReasonAddressLost {
		t.Fatalf("reason %q, want AddressLost", cond.Reason)
	}
	waitEvent(t, ns, "c", "AddressLost")

	setLost(metav1.ConditionFalse)
	waitAddressPhase(t, name, ipamv1.AddressBound)
	c = waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)
	if c.Status.Addresses[0].Name != name {
		t.Fatalf("recovered claim has %s, want %s", c.Status.Addresses[0].Name, name)
	}
}

func TestClassDeletionHeldByAddresses(t *testing.T) {
	ns := newNamespace(t)
	class := newClass(t, "held", driverName)
	eventually(t, "the class finalizer", func() (bool, error) {
		var c ipamv1.IPAddressClass
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(class), &c)
		return controllerutil.ContainsFinalizer(&c, ipamv1.FinalizerClass), err
	})
	claim := newClaim(t, ns, "c", "held", ipamv1.Dual)
	c := waitClaimPhase(t, ns, "c", ipamv1.ClaimBound)

	del(t, class)
	ev := waitEvent(t, "", "held", "ClassInUse")
	for _, a := range c.Status.Addresses {
		if !strings.Contains(ev.Note, a.Name) {
			t.Fatalf("ClassInUse does not name %s: %q", a.Name, ev.Note)
		}
	}
	// Deleting the claim leaves Released addresses, which still hold the class.
	del(t, claim)
	for _, a := range c.Status.Addresses {
		waitAddressPhase(t, a.Name, ipamv1.AddressReleased)
	}
	consistently(t, "the class to be held", time.Second, func() (bool, error) {
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(class), &ipamv1.IPAddressClass{})
		return err == nil, err
	})
	var rest ipamv1.IPAddressList
	if err := admin.List(context.Background(), &rest); err != nil {
		t.Fatal(err)
	}
	for _, a := range rest.Items {
		if a.Spec.ClassName == "held" {
			del(t, &a)
		}
	}
	waitGone(t, class)
}

func TestZeroWritesAfterRestartOverSettledObjects(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "settled", driverName)
	newClass(t, "settled-manual", noDriver)
	newAddress(t, "203.0.113.40", "settled-manual", nil)
	for _, n := range []string{"a", "b", "c"} {
		newClaim(t, ns, n, "settled", ipamv1.Dual)
	}
	released := newClaim(t, ns, "gone", "settled", ipamv1.IPv4)
	for _, n := range []string{"a", "b", "c", "gone"} {
		waitClaimPhase(t, ns, n, ipamv1.ClaimBound)
	}
	del(t, released)
	waitGone(t, released)
	waitAddressPhase(t, "ip-203-0-113-40", ipamv1.AddressAvailable)
	// Settled: the core has stopped writing.
	quiet := time.Now()
	eventually(t, "the core to stop writing", func() (bool, error) {
		if len(auditedWrites(t, coreUser, quiet)) > 0 {
			quiet = time.Now()
			return false, nil
		}
		return time.Since(quiet) > 2*time.Second, nil
	})

	if err := core.stop(); err != nil {
		t.Fatal(err)
	}
	core = nil
	// What the restarted core must look at: every object of each kind in the cluster.
	var claims ipamv1.IPAddressClaimList
	var addrs ipamv1.IPAddressList
	var classes ipamv1.IPAddressClassList
	var svcs corev1.ServiceList
	for _, l := range []client.ObjectList{&claims, &addrs, &classes, &svcs} {
		if err := admin.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// Services a driver marks as its own are not in the core's cache.
	svcs.Items = slices.DeleteFunc(svcs.Items, func(s corev1.Service) bool {
		_, mine := s.Labels[ipamv1.LabelDriverService]
		return mine
	})
	want := map[string]int{"ipaddressclaim": len(claims.Items), "ipaddress": len(addrs.Items),
		"ipaddressclass": len(classes.Items), "autoclaim": len(svcs.Items)}
	before := map[string]int{}
	for c := range want {
		before[c] = reconciles(t, c)
	}
	since := time.Now()
	restartCore(t)
	// The restarted controllers ran: each reconciled at least as many objects as exist.
	for c, n := range want {
		eventually(t, fmt.Sprintf("the restarted %s controller to reconcile %d objects", c, n), func() (bool, error) {
			return reconciles(t, c)-before[c] >= n, nil
		})
	}
	consistently(t, "the restarted core to write nothing", 2*time.Second, func() (bool, error) {
		if writes := auditedWrites(t, coreUser, since); len(writes) != 0 {
			return false, fmt.Errorf("the restarted core wrote %d times over settled objects:\n%s", len(writes), strings.Join(writes, "\n"))
		}
		return true, nil
	})
}

func TestCRDValidationRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "valid", noDriver)
	newClaim(t, ns, "valid", "valid", ipamv1.IPv4)
	newAddress(t, "203.0.113.50", "valid", nil)

	expectInvalid := func(t *testing.T, err error, want string) {
		t.Helper()
		if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
			t.Fatalf("want a validation error mentioning %q, got %v", want, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
	addr := func(name, ip string) *ipamv1.IPAddress {
		return &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "valid"}}
	}
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"address not an IP", func() error { return admin.Create(ctx, addr("ip-300-1-1-1", "300.1.1.1")) }, "canonical form"},
		{"IPv4 not canonical", func() error { return admin.Create(ctx, addr("ip-192-168-1-1", "192.168.001.1")) }, "canonical form"},
		{"IPv6 not canonical", func() error {
			return admin.Create(ctx, addr("ip-2001-0db8-0000-0000-0000-0000-0000-0007", "2001:0db8::7"))
		}, "canonical form"},
		{"name not derived from the address", func() error { return admin.Create(ctx, addr("ip-203-0-113-1", "203.0.113.2")) }, "metadata.name must be derived"},
		{"IPv6 name not expanded", func() error { return admin.Create(ctx, addr("ip-2001-db8--7", "2001:db8::7")) }, "metadata.name must be derived"},
		{"address changed", func() error {
			return patchAddressSpec(ctx, "ip-203-0-113-50", `{"spec":{"address":"203.0.113.51"}}`)
		}, "address is immutable"},
		{"address className changed", func() error {
			return patchAddressSpec(ctx, "ip-203-0-113-50", `{"spec":{"className":"other"}}`)
		}, "className is immutable"},
		{"unknown reclaimPolicy", func() error {
			return admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "bad-policy"},
				Spec: ipamv1.IPAddressClassSpec{Provisioner: "x", ReclaimPolicy: "Recycle"}})
		}, "Unsupported value"},
		{"negative releaseDelay", func() error {
			return admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "bad-delay"},
				Spec: ipamv1.IPAddressClassSpec{Provisioner: "x", ReleaseDelay: &metav1.Duration{Duration: -time.Hour}}})
		}, "releaseDelay must not be negative"},
		{"provisioner changed", func() error {
			var c ipamv1.IPAddressClass
			if err := admin.Get(ctx, client.ObjectKey{Name: "valid"}, &c); err != nil {
				return err
			}
			return admin.Patch(ctx, &c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"provisioner":"other"}}`)))
		}, "provisioner is immutable"},
		{"unknown family", func() error {
			return admin.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-family"},
				Spec: ipamv1.IPAddressClaimSpec{Family: "IPv5"}})
		}, "Unsupported value"},
		{"addressName with Dual", func() error {
			return admin.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-dual"},
				Spec: ipamv1.IPAddressClaimSpec{Family: ipamv1.Dual, AddressName: "ip-203-0-113-50"}})
		}, "cannot be used with family Dual"},
		{"family changed", func() error {
			return admin.Patch(ctx, getClaim(t, ns, "valid"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"family":"IPv6"}}`)))
		}, "family is immutable"},
		{"claim className changed", func() error {
			return admin.Patch(ctx, getClaim(t, ns, "valid"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"className":"other"}}`)))
		}, "className is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectInvalid(t, tc.run(), tc.want) })
	}

	// Defaults.
	c := getClaim(t, ns, "valid")
	if c.Spec.Family != ipamv1.IPv4 {
		t.Fatalf("family defaulted to %q, want IPv4", c.Spec.Family)
	}
	var cls ipamv1.IPAddressClass
	if err := admin.Get(ctx, client.ObjectKey{Name: "valid"}, &cls); err != nil {
		t.Fatal(err)
	}
	if cls.Spec.ReclaimPolicy != ipamv1.ReclaimRetain {
		t.Fatalf("reclaimPolicy defaulted to %q, want Retain", cls.Spec.ReclaimPolicy)
	}
	// A valid IPv6 name is accepted.
	if err := admin.Create(ctx, addr("ip-2001-0db8-0000-0000-0000-0000-0000-0007", "2001:db8::7")); err != nil {
		t.Fatalf("a well-formed IPv6 address was rejected: %v", err)
	}
}

// patchAddressSpec merge-patches an address (no resourceVersion: the controllers may write it
// concurrently, and validation is what the tests look at).
func patchAddressSpec(ctx context.Context, name, patch string) error {
	a := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return admin.Patch(ctx, a, client.RawPatch(types.MergePatchType, []byte(patch)))
}
