package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// These tests stage the races of a controller deciding from its informer cache while the
// apiserver already holds newer state: a pass woken by its own write, or by an event that
// arrived before the cache caught up. A stale pass is run for real, against the apiserver, with
// reads from a cache frozen before the newer writes.

func claimReconciler(c, reader client.Client, m *Metrics) *ClaimReconciler {
	return &ClaimReconciler{Client: c, Reader: reader, Recorder: events.NewFakeRecorder(100), Metrics: m}
}

func addressReconciler(c, reader client.Client) *AddressReconciler {
	return &AddressReconciler{Client: c, Reader: reader, Recorder: events.NewFakeRecorder(100)}
}

// A pass that sees the claim without its Bound status and the address without its claimRef
// must neither bind a second address nor overwrite the status; the bind is counted once.
func TestStaleClaimPassNeitherRebindsNorOverwritesStatus(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "stale-claim", noDriver)
	a := newAddress(t, "203.0.113.60", "stale-claim", nil)
	b := newAddress(t, "203.0.113.61", "stale-claim", nil)
	newClaim(t, ns, "c", "stale-claim", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver}
	})
	stale := frozenClient(t)
	live := liveClient(t)
	m := NewMetrics(nil)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}

	// First pass, on fresh reads (a cache synced now): binds the lowest address.
	if _, err := claimReconciler(frozenClient(t), live, m).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	c := getClaim(t, ns, "c")
	if c.Status.Phase != ipamv1.ClaimBound || len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != a.Name {
		t.Fatalf("first pass: %+v", c.Status)
	}
	// Second pass, on the stale view.
	if _, err := claimReconciler(stale, live, m).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	c = getClaim(t, ns, "c")
	if c.Status.Phase != ipamv1.ClaimBound || len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != a.Name {
		t.Errorf("a stale pass changed the Bound status to %+v", c.Status)
	}
	if ref := getAddress(t, b.Name).Spec.ClaimRef; ref != nil {
		t.Errorf("a stale pass bound a second address, %s, to %s/%s", b.Name, ref.Namespace, ref.Name)
	}
	if n := bindsIn(t, m); n != 1 {
		t.Errorf("the bind was counted %d times, want once", n)
	}
}

// A stale pass of the address controller must not write a phase over a newer one.
func TestStaleAddressPassDoesNotOverwritePhase(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "stale-addr", noDriver)
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-203-0-113-62", Finalizers: []string{ipamv1.FinalizerAddress}},
		Spec:       ipamv1.IPAddressSpec{Address: "203.0.113.62", ClassName: "stale-addr"},
	}
	create(t, a)
	newClaim(t, ns, "c", "stale-addr", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
	})
	stale := frozenClient(t)
	live := liveClient(t)
	if _, err := claimReconciler(frozenClient(t), live, NewMetrics(nil)).Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}); err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: a.Name}}
	if _, err := addressReconciler(frozenClient(t), live).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := getAddress(t, a.Name).Status.Phase; got != ipamv1.AddressBound {
		t.Fatalf("fresh pass: phase %s, want Bound", got)
	}
	if _, err := addressReconciler(stale, live).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := getAddress(t, a.Name).Status.Phase; got != ipamv1.AddressBound {
		t.Fatalf("a stale pass wrote phase %s over Bound", got)
	}
}

// Claims hammered with tenant updates and address events while they bind: once a claim is
// Bound its addresses never change, and each bind is counted once.
//
// The staged tests above make the race deterministic; this one runs the whole core as it runs
// in production and may or may not hit the window on a given run.
func TestBoundAddressesNeverChangeUnderConcurrentUpdates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t)
	newClass(t, "hammer", driverName)
	newClass(t, "hammer-manual", noDriver)
	for i := 1; i <= 10; i++ {
		newAddress(t, fmt.Sprintf("203.0.113.%d", 100+i), "hammer-manual", nil)
	}
	watcher, err := client.NewWithWatch(coreCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(ctx, &ipamv1.IPAddressClaimList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	first := map[string][]ipamv1.ClaimedAddress{}
	var violations []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*ipamv1.IPAddressClaim)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			if prev, seen := first[c.Name]; seen {
				if c.Status.Phase != ipamv1.ClaimBound || !slices.Equal(prev, c.Status.Addresses) {
					violations = append(violations, fmt.Sprintf("%s: Bound to %v, then %s %v", c.Name, prev, c.Status.Phase, c.Status.Addresses))
				}
			} else if c.Status.Phase == ipamv1.ClaimBound {
				first[c.Name] = c.Status.Addresses
			}
			mu.Unlock()
		}
	}()

	before := bindsObserved(t)
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	// Hammer: tenant annotations on the claims, and address changes the claim controller
	// reconciles.
	var hammered atomic.Int64
	stop := make(chan struct{})
	var hammers sync.WaitGroup
	hammers.Add(2)
	go func() {
		defer hammers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := names[i%n]
			_ = admin.Patch(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"metadata":{"annotations":{"hammer":"%d"}}}`, i))))
		}
	}()
	go func() {
		defer hammers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var list ipamv1.IPAddressList
			if admin.List(ctx, &list) != nil {
				continue
			}
			for _, a := range list.Items {
				if a.Spec.ClassName != "hammer" && a.Spec.ClassName != "hammer-manual" {
					continue
				}
				// An event the claim controller acts on (addressChangedForClaims passes a change
				// of the Lost condition's status) without a reason to change the binding: the
				// condition toggles between absent and False.
				orig := a.DeepCopy()
				if meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionLost) != nil {
					meta.RemoveStatusCondition(&a.Status.Conditions, ipamv1.ConditionLost)
				} else {
					meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionLost,
						Status: metav1.ConditionFalse, Reason: "Hammer", Message: fmt.Sprint(i)})
				}
				if admin.Status().Patch(ctx, &a, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})) == nil {
					hammered.Add(1)
				}
			}
		}
	}()
	if err := parallel(n, func(i int) error {
		class := "hammer"
		if i%2 == 0 {
			class = "hammer-manual"
		}
		return admin.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]},
			Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: ipamv1.IPv4}})
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		waitClaimPhase(t, ns, name, ipamv1.ClaimBound)
	}
	// Keep hammering a while after every claim is Bound.
	consistently(t, "every claim to stay Bound", 3*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) == 0, nil
	})
	close(stop)
	hammers.Wait()
	w.Stop()
	<-watched
	if len(violations) > 0 {
		t.Fatalf("Bound claims changed addresses:\n%v", violations)
	}
	if hammered.Load() < n {
		t.Fatalf("the address hammer landed %d changes, fewer than one per claim", hammered.Load())
	}
	eventually(t, "one bind observation per claim", func() (bool, error) {
		return bindsObserved(t)-before >= n, nil
	})
	consistently(t, "no second observation of a bind", time.Second, func() (bool, error) {
		got := bindsObserved(t) - before
		if got != n {
			return false, fmt.Errorf("%d binds observed for %d claims", got, n)
		}
		return true, nil
	})
}

// A claim left Pending is looked at again on a schedule, not only when an event comes.
func TestPendingClaimIsRecheckedOnASchedule(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "recheck", noDriver)
	newClaim(t, ns, "c", "recheck", ipamv1.IPv4)
	waitClaimReason(t, ns, "c", ipamv1.ReasonWaitingForAddress)
	res, err := claimReconciler(frozenClient(t), liveClient(t), NewMetrics(nil)).Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("a Pending claim is re-checked after %s, want a delay in (0, 1m]", res.RequeueAfter)
	}
}

// A claim that waits only for its driver is left as the schema defaults it (no status write)
// until its quiet wait ends, and is looked at again when it ends, not only on the backoff; the
// stamp carries the class it resolved, so that a driver needs no status to provision it.
func TestQuietClaimIsStampedAndRecheckedWhenItsQuietEnds(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "quiet", noDriver, markDefault)
	unmarkOnCleanup(t, "quiet")
	newClaim(t, ns, "c", "", ipamv1.IPv4)
	created := getClaim(t, ns, "c").CreationTimestamp.Time
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}
	r := claimReconciler(frozenClient(t), liveClient(t), NewMetrics(nil))
	r.QuietWait = time.Hour
	r.Now = func() time.Time { return created.Add(time.Hour - 5*time.Second) }
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c := getClaim(t, ns, "c")
	if c.Annotations[ipamv1.AnnotationProvisioner] != noDriver || c.Annotations[ipamv1.AnnotationResolvedClass] != "quiet" {
		t.Fatalf("stamp %v, want provisioner %s and resolved class quiet", c.Annotations, noDriver)
	}
	if c.Status.Phase != ipamv1.ClaimPending || len(c.Status.Conditions) > 0 || c.Status.ClassName != "" {
		t.Fatalf("a quiet claim's status was written: %+v", c.Status)
	}
	// The backoff alone would look again only after a minute (its cap, at this age).
	if res.RequeueAfter <= 0 || res.RequeueAfter > 5*time.Second {
		t.Fatalf("a claim quiet for 5 s more is looked at again after %s", res.RequeueAfter)
	}
	// Another class becomes the default meanwhile: the claim keeps the class it resolved.
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision
	newClass(t, "quiet-newer", noDriver, markDefault)
	unmarkOnCleanup(t, "quiet-newer")
	r.Client = frozenClient(t) // a view with the stamp and the newer default class
	r.Now = func() time.Time { return created.Add(time.Hour + time.Second) }
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	c = getClaim(t, ns, "c")
	cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
	if cond == nil || cond.Reason != ipamv1.ReasonWaitingForAddress || c.Status.ClassName != "quiet" {
		t.Fatalf("after its quiet wait the claim says %+v, want WaitingForAddress in class quiet (the class it was stamped with, not the newer default)", c.Status)
	}
}

// A claim queued behind a driver that keeps binding other claims of its class stays quiet past
// its own quiet wait: the wait runs from the class's last bind, which the core learns both from
// a bind it writes and, after a restart, from a Bound claim's condition. Once the binds stop for
// a quiet wait, the claim says what it waits for.
func TestAClaimQueuedBehindABusyDriverStaysQuiet(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "busy", noDriver)
	newClaim(t, ns, "queued", "busy", ipamv1.IPv4)
	time.Sleep(2100 * time.Millisecond) // timestamps have one-second precision: the bind comes later
	newClaim(t, ns, "served", "busy", ipamv1.IPv4)
	newAddress(t, "203.0.113.160", "busy", &ipamv1.ClaimReference{Namespace: ns, Name: "served", UID: getClaim(t, ns, "served").UID})
	pass := func(r *ClaimReconciler, name string) {
		t.Helper()
		r.Client = frozenClient(t)
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	quiet := func(who string) {
		t.Helper()
		if c := getClaim(t, ns, "queued"); len(c.Status.Conditions) > 0 || c.Status.ClassName != "" {
			t.Fatalf("%s: the queued claim's status was written while its class's driver was binding: %+v", who, c.Status)
		}
	}

	// This process binds "served" (on the real clock).
	binder := claimReconciler(nil, liveClient(t), NewMetrics(nil))
	binder.QuietWait = time.Hour
	for i := 0; i < 3 && getClaim(t, ns, "served").Status.Phase != ipamv1.ClaimBound; i++ {
		pass(binder, "served")
	}
	served := getClaim(t, ns, "served")
	cond := meta.FindStatusCondition(served.Status.Conditions, ipamv1.ConditionBound)
	if served.Status.Phase != ipamv1.ClaimBound || cond == nil {
		t.Fatalf("served claim not Bound: %+v", served.Status)
	}
	boundAt := cond.LastTransitionTime.Time
	queuedAt := getClaim(t, ns, "queued").CreationTimestamp.Time
	if !boundAt.After(queuedAt) {
		t.Fatalf("bound at %s, not after the queued claim's creation %s", boundAt, queuedAt)
	}
	// Past the queued claim's own quiet wait, within one after the bind.
	late := boundAt.Add(time.Hour - time.Millisecond)
	binder.Now = func() time.Time { return late }
	pass(binder, "queued")
	quiet("the process that bound")

	// A new process (a restart, a new leader) learns the bind from the Bound claims in its
	// cache, before it has passed over any of them.
	fresh := claimReconciler(nil, liveClient(t), NewMetrics(nil))
	fresh.QuietWait = time.Hour
	fresh.Now = func() time.Time { return late }
	pass(fresh, "queued")
	quiet("a new process")

	// The binds stop: a quiet wait after the last one, the claim says what it waits for.
	fresh.Now = func() time.Time { return boundAt.Add(time.Hour + time.Second) }
	pass(fresh, "queued")
	c := getClaim(t, ns, "queued")
	if cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound); cond == nil || cond.Reason != ipamv1.ReasonWaitingForAddress {
		t.Fatalf("a quiet wait after the class's last bind the queued claim says %+v, want WaitingForAddress", c.Status)
	}
}

// The stamp follows what the claim already has: a Dual claim whose IPv4 address is of class A
// takes its IPv6 one from A too, whatever the resolved-class annotation said (an admin's edit, or
// a stamp from before), and the stamp is corrected even when the core binds an Available address
// and asks no driver. And a stamped class that has been deleted since, with nothing of
// it bound, is resolved afresh (the default now), instead of leaving the claim waiting for a class
// that will not come back.
func TestStampFollowsTheBoundClassAndADeletedStampedClassIsResolvedAgain(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "kept-a", noDriver)
	newClass(t, "kept-b", noDriver)
	dual := newClaim(t, ns, "dual", "", ipamv1.Dual, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver, ipamv1.AnnotationResolvedClass: "kept-b"}
	})
	newAddress(t, "203.0.113.120", "kept-a", &ipamv1.ClaimReference{Namespace: ns, Name: "dual", UID: getClaim(t, ns, "dual").UID})
	// An Available IPv6 address of kept-a: the core binds it, asks no driver, and still corrects
	// the stamp (a driver reading kept-b would provision a surplus address).
	v6 := newAddress(t, "2001:db8:77::1", "kept-a", nil)

	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision: the newest default wins
	newClass(t, "fresh-default", noDriver, markDefault)
	unmarkOnCleanup(t, "fresh-default")
	orphan := newClaim(t, ns, "orphan", "", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: "gone.drivers.example.com", ipamv1.AnnotationResolvedClass: "gone-class"}
	})

	r := claimReconciler(frozenClient(t), liveClient(t), NewMetrics(nil))
	for _, c := range []*ipamv1.IPAddressClaim{dual, orphan} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := getClaim(t, ns, "dual"); got.Annotations[ipamv1.AnnotationResolvedClass] != "kept-a" ||
		got.Status.Phase != ipamv1.ClaimBound || len(got.Status.Addresses) != 2 || got.Status.Addresses[1].Name != v6.Name {
		t.Errorf("the Dual claim with an IPv4 address of kept-a: stamped for %q, status %+v; want kept-a, Bound with %s",
			got.Annotations[ipamv1.AnnotationResolvedClass], got.Status, v6.Name)
	}
	got := getClaim(t, ns, "orphan").Annotations
	if got[ipamv1.AnnotationResolvedClass] != "fresh-default" || got[ipamv1.AnnotationProvisioner] != noDriver {
		t.Errorf("a claim stamped for a deleted class is stamped %v, want the default fresh-default and its provisioner", got)
	}
}

// unmarkOnCleanup takes the default mark off a class when the test ends, so that later tests'
// claims without a class do not resolve to it.
func unmarkOnCleanup(t *testing.T, class string) {
	t.Cleanup(func() {
		cls := &ipamv1.IPAddressClass{}
		if admin.Get(context.Background(), client.ObjectKey{Name: class}, cls) == nil {
			patch := client.MergeFrom(cls.DeepCopy())
			cls.Annotations = nil
			_ = admin.Patch(context.Background(), cls, patch)
		}
	})
}

// A pass whose bind landed but whose status write did not (refused, or the process stopped
// short of it on a later attempt) leaves the bind shown nowhere but on the address: not in the
// claim's status, and not in a cache that lags. The next pass of the same controller must still
// see it (its refresh reads the addresses it bound by name) and bind no second address.
func TestPassAfterAnUnrecordedBindSeesTheBind(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "unrecorded", noDriver)
	a := newAddress(t, "203.0.113.140", "unrecorded", nil)
	b := newAddress(t, "203.0.113.141", "unrecorded", nil)
	newClaim(t, ns, "c", "unrecorded", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver}
	})
	stale := frozenClient(t)
	r := claimReconciler(frozenClient(t), liveClient(t), NewMetrics(nil))
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ref := getAddress(t, a.Name).Spec.ClaimRef; ref == nil || ref.Name != "c" {
		t.Fatalf("first pass bound nothing to c: %+v", ref)
	}
	// The status write is lost: the claim shows no address.
	c := getClaim(t, ns, "c")
	c.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending}
	if err := admin.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	// The same controller's next pass, on a cache from before the bind.
	r.Client = stale
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ref := getAddress(t, b.Name).Spec.ClaimRef; ref != nil {
		t.Errorf("a pass that did not see its own bind bound a second address, %s, to %s/%s", b.Name, ref.Namespace, ref.Name)
	}
	if c := getClaim(t, ns, "c"); c.Status.Phase != ipamv1.ClaimBound || len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != a.Name {
		t.Errorf("the claim's status is %+v, want Bound to %s", c.Status, a.Name)
	}
}

// TestPassThatDoesNotBindStillSeesItsOwnBind: the next pass after a bind whose status write was
// lost runs on a cache from before the addresses existed, so it has nothing to bind and only
// writes (the claim's class stamp). Reading the claim's addresses by name, it finds the address it
// bound from its own memory of the bind (neither the stale cache nor the live status lists it),
// and writes the claim Bound to it — without listing every address by claimRef.
func TestPassThatDoesNotBindStillSeesItsOwnBind(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "unrecorded-nobind", noDriver)
	newClaim(t, ns, "c", "unrecorded-nobind", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver}
	})
	stale := frozenClient(t) // before the addresses exist
	a := newAddress(t, "203.0.113.146", "unrecorded-nobind", nil)
	newAddress(t, "203.0.113.147", "unrecorded-nobind", nil)
	r := claimReconciler(frozenClient(t), liveClient(t), NewMetrics(nil))
	req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ref := getAddress(t, a.Name).Spec.ClaimRef; ref == nil || ref.Name != "c" {
		t.Fatalf("first pass did not bind %s to c: %+v", a.Name, ref)
	}
	// The status write is lost: the claim shows no address.
	c := getClaim(t, ns, "c")
	c.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimPending}
	if err := admin.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	lists := claimRefLists.count(ns)
	r.Client = stale
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if c := getClaim(t, ns, "c"); c.Status.Phase != ipamv1.ClaimBound || len(c.Status.Addresses) != 1 || c.Status.Addresses[0].Name != a.Name {
		t.Errorf("the claim's status is %+v, want Bound to %s (the pass did not see its own bind)", c.Status, a.Name)
	}
	if got := claimRefLists.count(ns) - lists; got != 0 {
		t.Errorf("the pass listed addresses by claimRef %d times, want reads by name", got)
	}
}

// Found in review: a Pending claim whose cache shows an address naming it (pre-bound by a driver,
// bound by a previous leader) must not be written Bound from that cache alone: the address may
// have been unbound since (an admin's unbind, a previous leader's surplus unbind), and the claim
// would then name an address that is not its own — and, once Bound, never bind another. A fresh
// controller (no memory of its own writes: a restart or a leader change) on a cache from before
// the unbind writes no Bound status.
func TestPendingClaimIsNotBoundFromAStaleAddressCache(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "stale-prebound", noDriver)
	c := newClaim(t, ns, "c", "stale-prebound", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Finalizers = []string{ipamv1.FinalizerClaim}
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: noDriver, ipamv1.AnnotationResolvedClass: "stale-prebound"}
	})
	b := newAddress(t, "203.0.113.150", "stale-prebound", &ipamv1.ClaimReference{Namespace: ns, Name: "c", UID: c.UID})
	stale := frozenClient(t) // shows b naming the claim
	if err := patchAddressSpec(ctx, b.Name, `{"spec":{"claimRef":null}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := claimReconciler(stale, liveClient(t), NewMetrics(nil)).Reconcile(ctx,
		reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "c"}}); err != nil {
		t.Fatal(err)
	}
	got := getClaim(t, ns, "c")
	if got.Status.Phase == ipamv1.ClaimBound {
		t.Fatalf("the claim was written Bound to %+v from a cache that still showed %s naming it", got.Status.Addresses, b.Name)
	}
}
