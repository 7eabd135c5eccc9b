package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
)

// With auto-claim on, a large number of Services that a skip rule excludes costs the core no
// write at all; one eligible Service beside them gets its claim (so the core did look).
func TestAutoClaimSkippedServicesCauseNoWrites(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "auto-skip", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	lbClass := "example.org/other"
	skipped := func(i int) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("skip-%d", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
		switch i % 4 {
		case 0:
			s.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "false"}
		case 1:
			s.Spec.LoadBalancerClass = &lbClass
		case 2:
			s.Annotations = map[string]string{"metallb.io/address-pool": "elsewhere"}
		case 3:
			s.Spec.Type = corev1.ServiceTypeClusterIP
		}
		return s
	}
	since := time.Now()
	reconciledBefore := reconciles(t, "autoclaim")
	const n = 1000
	if err := parallel(n, func(i int) error { return admin.Create(ctx, skipped(i)) }); err != nil {
		t.Fatalf("creating the skipped Services: %v", err)
	}
	var created corev1.ServiceList
	if err := admin.List(ctx, &created, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(created.Items) != n {
		t.Fatalf("%d Services exist, want %d", len(created.Items), n)
	}
	newSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "eligible"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	create(t, newSvc)
	eventually(t, "the eligible Service's claim", func() (bool, error) {
		var c ipamv1.IPAddressClaim
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "eligible"}, &c)
		return err == nil, client.IgnoreNotFound(err)
	})
	// The core saw every Service: each one was reconciled (the Services of earlier tests too).
	eventually(t, "the core to have reconciled every Service", func() (bool, error) {
		return reconciles(t, "autoclaim")-reconciledBefore >= n+1, nil
	})
	var others []string
	for _, w := range auditedWrites(t, coreUser, since) {
		// The eligible Service's claim: its creation (a POST to the collection, counted by the
		// claim list below), its finalizer and status, and the class's finalizer.
		if !strings.Contains(w, "/eligible") && !strings.Contains(w, "/events") && !strings.Contains(w, "auto-skip") &&
			w != "create /apis/local.sdn.cozystack.io/v1alpha1/namespaces/"+ns+"/ipaddressclaims" {
			others = append(others, w)
		}
	}
	if len(others) != 0 {
		t.Fatalf("the core wrote %d times for %d skipped Services:\n%s", len(others), n, strings.Join(others, "\n"))
	}
	// Events are writes too: none by the core about a skipped Service. Others may report on
	// them: the apiserver's ClusterIP repair loop can say ClusterIPNotAllocated about a Service
	// it saw half-created among a thousand.
	for i := 0; i < n; i += 97 {
		for _, e := range eventsFor(t, ns, fmt.Sprintf("skip-%d", i), "") {
			if e.ReportingController == coreReportingController {
				t.Fatalf("the core reported on a skipped Service: %+v", e)
			}
		}
	}
	var list ipamv1.IPAddressClaimList
	if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d claims in the namespace (%v), want only the eligible Service's", len(list.Items), err)
	}
}

// Services a driver marks as its own (LabelDriverService; MetalLB's placeholders, one per
// reserved address) never reach the core: it does not cache them, so it never reconciles them
// and never auto-claims them, even with nothing else marking them as skipped. A Service created
// after them without the mark gets its claim (so the core did look).
func TestAutoClaimNeverSeesADriversServices(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "auto-driver-svcs", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	eventually(t, "the class's auto-claim stamp", func() (bool, error) {
		var c ipamv1.IPAddressClass
		err := admin.Get(ctx, client.ObjectKeyFromObject(cls), &c)
		return err == nil && c.Annotations[ipamv1.AnnotationAutoClaimEnabledAt] != "", err
	})
	reconciledBefore := reconciles(t, "autoclaim")
	const n = 200
	if err := parallel(n, func(i int) error {
		s := lbService(ns, fmt.Sprintf("driver-%d", i), nil)
		s.Labels = map[string]string{ipamv1.LabelDriverService: "driver.example.org"}
		return admin.Create(ctx, s)
	}); err != nil {
		t.Fatalf("creating the driver's Services: %v", err)
	}
	create(t, lbService(ns, "tenant", nil))
	eventually(t, "the tenant Service's claim", func() (bool, error) {
		var c ipamv1.IPAddressClaim
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tenant"}, &c)
		return err == nil, client.IgnoreNotFound(err)
	})
	// Had the core cached them, each of the n Services would have been reconciled once, nearly
	// all before the tenant Service (one watch, in order; a few may still be in the workers).
	if got := reconciles(t, "autoclaim") - reconciledBefore; got >= n/2 {
		t.Fatalf("the core reconciled %d Services for %d driver Services and one tenant Service: it watches the driver's", got, n)
	}
	var list ipamv1.IPAddressClaimList
	if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d claims in the namespace (%v), want only the tenant Service's", len(list.Items), err)
	}
}

func lbService(ns, name string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
}

func claimOwner(t *testing.T, ns, name string) (types.UID, error) {
	t.Helper()
	var c ipamv1.IPAddressClaim
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		return "", err
	}
	if ref := metav1.GetControllerOf(&c); ref != nil {
		return ref.UID, nil
	}
	return "", nil
}

// A Service deleted and created again under the same name gets a claim of its own once the
// old Service's claim is gone (here the test deletes it, as the garbage collector would).
func TestAutoClaimRecreatedServiceGetsItsOwnClaim(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "ac-recreate", noDriver)
	ann := map[string]string{ipamv1.AnnotationServiceClass: "ac-recreate"}
	old := lbService(ns, "web", ann)
	create(t, old)
	eventually(t, "the first Service's claim", func() (bool, error) {
		uid, err := claimOwner(t, ns, "web")
		return uid == old.UID, client.IgnoreNotFound(err)
	})
	del(t, old)
	waitGone(t, old)
	before := reconciles(t, "autoclaim")
	again := lbService(ns, "web", ann)
	create(t, again)
	// The core looks at the new Service while the old claim still exists.
	eventually(t, "a pass over the new Service", func() (bool, error) {
		return reconciles(t, "autoclaim") > before, nil
	})
	var oldClaim ipamv1.IPAddressClaim
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &oldClaim); err != nil {
		t.Fatal(err)
	}
	// The new Service does not take the old claim for its own (the owner uids differ): it
	// looks again on a schedule until the old claim goes, also if the claim's deletion event
	// were lost. (Removing the owner-uid comparison fails here; the end of the test alone would
	// pass, woken by the deletion event.)
	staged := &AutoClaimReconciler{Client: frozenClient(t), Reader: liveClient(t), Recorder: events.NewFakeRecorder(100)}
	res, err := staged.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(again)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("the new Service looks again after %s while the old Service's claim exists, want within a minute", res.RequeueAfter)
	}
	del(t, &oldClaim)
	eventually(t, "a claim owned by the new Service", func() (bool, error) {
		uid, err := claimOwner(t, ns, "web")
		return uid == again.UID, client.IgnoreNotFound(err)
	})
}

// MetalLB may give a new Service an address from an auto-assign pool before auto-claim acts:
// that does not make it skip the Service. A Service that had its address before auto-claim was
// enabled keeps it.
func TestAutoClaimIsNotSkippedForAnAddressWonInARace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	optOut := map[string]string{ipamv1.AnnotationAutoClaim: "false"}
	// The Services get their address while opted out, as if MetalLB had been faster than the
	// core; then the opt-out goes and the core first looks at them with an address.
	withAddress := func(svc *corev1.Service, ip string) {
		t.Helper()
		create(t, svc)
		t.Cleanup(func() { del(t, svc) })
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		if err := admin.Status().Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	optIn := func(svc *corev1.Service) {
		t.Helper()
		if err := admin.Patch(ctx, svc, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+ipamv1.AnnotationAutoClaim+`":null}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	legacy := lbService(ns, "legacy", maps.Clone(optOut))
	withAddress(legacy, "198.51.100.250")
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision

	cls := newClass(t, "ac-race", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	time.Sleep(1100 * time.Millisecond) // a clock step, not a wait: raced and guest are created a later second than the class
	raced := lbService(ns, "raced", maps.Clone(optOut))
	withAddress(raced, "198.51.100.251")
	guestAnn := maps.Clone(optOut)
	guestAnn[ipamv1.AnnotationServiceClass] = "ac-race"
	guest := lbService(ns, "guest", guestAnn)
	withAddress(guest, "198.51.100.252")
	for _, svc := range []*corev1.Service{legacy, raced, guest} {
		optIn(svc)
	}

	for _, name := range []string{"raced", "guest"} {
		eventually(t, "a claim for "+name, func() (bool, error) {
			_, err := claimOwner(t, ns, name)
			return err == nil, client.IgnoreNotFound(err)
		})
	}
	consistently(t, "no claim for the Service that had its address first", 2*time.Second, func() (bool, error) {
		_, err := claimOwner(t, ns, "legacy")
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// refuseClaims makes the apiserver refuse every claim created in ns (an admission policy), so
// that auto-claim's passes over a Service there repeat.
func refuseClaims(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-claims-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{ipamv1.GroupVersion.Group},
						APIVersions: []string{ipamv1.GroupVersion.Version}, Resources: []string{"ipaddressclaims"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "claims are refused in this namespace (test)"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}
	create(t, policy)
	create(t, binding)
	t.Cleanup(func() { del(t, binding); del(t, policy) })
	eventually(t, "the policy to refuse claims", func() (bool, error) {
		probe := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}}
		err := admin.Create(ctx, probe)
		if err == nil {
			del(t, probe)
			return false, nil
		}
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	})
}

// Several auto-claim classes: the Service hears about it once, however many passes see it
// (here the claim cannot be created, so the passes repeat).
func TestMultipleAutoClaimClassesIsSaidOnce(t *testing.T) {
	ns := newNamespace(t)
	refuseClaims(t, ns)
	mark := func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	}
	a := newClass(t, "ac-twin-a", noDriver, mark)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision
	b := newClass(t, "ac-twin-b", noDriver, mark)
	t.Cleanup(func() { del(t, a); del(t, b) })
	before := reconciles(t, "autoclaim")
	svc := lbService(ns, "twin", nil)
	create(t, svc)
	t.Cleanup(func() { del(t, svc) })
	// The core's events name it as their reporting controller (TestAutoClaimSkippedServicesCauseNoWrites
	// tells the core's events from others' by it).
	if ev := waitEvent(t, ns, "twin", "MultipleAutoClaimClasses"); ev.ReportingController != coreReportingController {
		t.Fatalf("the core's event names %q as its reporting controller, want %q", ev.ReportingController, coreReportingController)
	}
	eventually(t, "several passes over the Service", func() (bool, error) {
		return reconciles(t, "autoclaim")-before >= 3, nil
	})
	consistently(t, "MultipleAutoClaimClasses to be said once", 2*time.Second, func() (bool, error) {
		if n := timesSaidFor(t, ns, "twin", "MultipleAutoClaimClasses"); n != 1 {
			return false, fmt.Errorf("said %d times", n)
		}
		return true, nil
	})

	// Resolved (one class unmarked), then back: the recurrence is said again.
	setMark := func(value string) {
		c := &ipamv1.IPAddressClass{}
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(b), c); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Annotations[ipamv1.AnnotationAutoClaimClass] = value
		if err := admin.Patch(context.Background(), c, patch); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(i int) {
		s := &corev1.Service{}
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(svc), s); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(s.DeepCopy())
		s.Labels = map[string]string{"touch": fmt.Sprint(i)}
		if err := admin.Patch(context.Background(), s, patch); err != nil {
			t.Fatal(err)
		}
	}
	setMark("false")
	for i := range 2 {
		n := reconciles(t, "autoclaim")
		touch(i)
		eventually(t, "a pass over the Service with one auto-claim class", func() (bool, error) {
			return reconciles(t, "autoclaim") > n, nil
		})
	}
	setMark("true")
	eventually(t, "MultipleAutoClaimClasses to be said again when it recurs", func() (bool, error) {
		return timesSaidFor(t, ns, "twin", "MultipleAutoClaimClasses") == 2, nil
	})
}

// Updating an auto-claim class in ways that do not turn auto-claim on costs no pass over the
// Services waiting for an address.
func TestAutoClaimClassUpdateDoesNotWakeEveryService(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "ac-busy", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	const n = 50
	if err := parallel(n, func(i int) error { return admin.Create(ctx, lbService(ns, fmt.Sprintf("s%d", i), nil)) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var svcs corev1.ServiceList
		_ = admin.List(context.Background(), &svcs, client.InNamespace(ns))
		for i := range svcs.Items {
			del(t, &svcs.Items[i])
		}
		var claims ipamv1.IPAddressClaimList
		_ = admin.List(context.Background(), &claims, client.InNamespace(ns))
		for i := range claims.Items {
			del(t, &claims.Items[i])
		}
		del(t, cls)
	})
	eventually(t, "a claim for every Service", func() (bool, error) {
		var claims ipamv1.IPAddressClaimList
		err := admin.List(ctx, &claims, client.InNamespace(ns))
		return len(claims.Items) == n, err
	})
	before := reconciles(t, "autoclaim")
	for i := range 5 {
		var cur ipamv1.IPAddressClass
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cls), &cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Labels = map[string]string{"touch": fmt.Sprint(i)}
		if err := admin.Patch(ctx, &cur, patch); err != nil {
			t.Fatal(err)
		}
	}
	consistently(t, "class updates not to wake the waiting Services", 2*time.Second, func() (bool, error) {
		if got := reconciles(t, "autoclaim") - before; got >= n {
			return false, fmt.Errorf("%d Service passes after 5 class updates", got)
		}
		return true, nil
	})
}

// Issue 10, defect 10: a Service parked by the driver chart's admission policy (MetalLB's pool
// annotation with autoclaim.ParkingPool) is parked because it will use an auto-claim: the core
// claims for it. Any other pool value is an admin's choice and still skips it.
func TestAutoClaimServesAParkedService(t *testing.T) {
	ns := newNamespace(t)
	cls := newClass(t, "ac-parked", noDriver)
	t.Cleanup(func() { del(t, cls) })
	parked := lbService(ns, "parked", map[string]string{ipamv1.AnnotationServiceClass: "ac-parked",
		autoclaim.ParkingAnnotation: autoclaim.ParkingPool})
	pooled := lbService(ns, "pooled", map[string]string{ipamv1.AnnotationServiceClass: "ac-parked",
		autoclaim.ParkingAnnotation: "some-pool"})
	for _, s := range []*corev1.Service{parked, pooled} {
		create(t, s)
		t.Cleanup(func() { del(t, s) })
	}
	eventually(t, "a claim for the parked Service", func() (bool, error) {
		_, err := claimOwner(t, ns, "parked")
		return err == nil, client.IgnoreNotFound(err)
	})
	consistently(t, "no claim for the Service that names a pool", 2*time.Second, func() (bool, error) {
		_, err := claimOwner(t, ns, "pooled")
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// An auto-claim's address is deleted when the claim goes, under Retain too, also when the claim
// vanishes without the core seeing it go (its finalizer removed by hand): the core marks the
// address while the claim lives.
func TestAddressOfAVanishedAutoClaimIsDeletedUnderRetain(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newClass(t, "ac-vanish", noDriver)
	a := newAddress(t, "203.0.113.97", "ac-vanish", nil)
	claim := newClaim(t, ns, "web", "ac-vanish", ipamv1.IPv4, autoClaimOf("web"))
	waitClaimPhase(t, ns, "web", ipamv1.ClaimBound)
	eventually(t, "the address to carry the auto-claim mark", func() (bool, error) {
		return markedAutoClaim(getAddress(t, a.Name)), nil
	})
	stopCore(t)
	c := getClaim(t, ns, "web")
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, ipamv1.FinalizerClaim)
	if err := admin.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	del(t, claim)
	waitGone(t, claim)
	restartCore(t)
	waitGone(t, a)
}

// An address a driver pre-binds to an auto-claim after the claim is gone (the driver copies
// the claim's mark, driverkit.MarkAutoClaim) is deleted, not Released, under Retain.
func TestLatePreBoundAddressOfAGoneAutoClaimIsDeleted(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "ac-late", noDriver)
	claim := newClaim(t, ns, "web", "ac-late", ipamv1.IPv4, autoClaimOf("web"))
	waitClaimReason(t, ns, "web", ipamv1.ReasonWaitingForAddress)
	del(t, claim)
	waitGone(t, claim)
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-203-0-113-98", Annotations: map[string]string{ipamv1.AnnotationAutoClaim: "true"}},
		Spec: ipamv1.IPAddressSpec{Address: "203.0.113.98", ClassName: "ac-late", ReclaimPolicy: ipamv1.ReclaimRetain,
			ClaimRef: &ipamv1.ClaimReference{Namespace: ns, Name: "web", UID: claim.UID}},
	}
	create(t, a)
	waitGone(t, a)
}

// Auto-claim creates a Service's claim once, also when a second pass runs before its cache
// shows the claim the first pass created.
func TestAutoClaimCreatesTheClaimOnce(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "ac-once", noDriver)
	svc := lbService(ns, "web", map[string]string{ipamv1.AnnotationServiceClass: "ac-once"})
	create(t, svc)
	stale := frozenClient(t) // shows the Service, and no claim
	r := &AutoClaimReconciler{Client: stale, Reader: liveClient(t), Recorder: events.NewFakeRecorder(100)}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)}
	since := time.Now()
	for range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var creates []string
	for _, w := range auditedRecords(t, coreUser, since) {
		if w.Verb == "create" && w.Resource == "ipaddressclaims" && w.Namespace == ns {
			creates = append(creates, w.URI)
		}
	}
	if len(creates) != 1 {
		t.Fatalf("%d creates of the Service's claim, want 1:\n%s", len(creates), strings.Join(creates, "\n"))
	}
	if uid, err := claimOwner(t, ns, "web"); err != nil || uid != svc.UID {
		t.Fatalf("the claim's owner is %q (%v), want the Service %q", uid, err, svc.UID)
	}
}

// A new Service of the name of an old Service's auto-claim looks again on a schedule until the
// old claim goes: it does not take the old claim for its own (owner uids differ).
func TestAutoClaimOfAnOlderServiceIsWaitedOut(t *testing.T) {
	ctx := context.Background()
	stopCore(t)
	ns := newNamespace(t)
	newClass(t, "ac-older", noDriver)
	svc := lbService(ns, "web", map[string]string{ipamv1.AnnotationServiceClass: "ac-older"})
	create(t, svc)
	yes := true
	newClaim(t, ns, "web", "ac-older", ipamv1.IPv4, func(c *ipamv1.IPAddressClaim) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaim: "true"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web",
			UID: "00000000-0000-0000-0000-0000000000bb", Controller: &yes}}
	})
	r := &AutoClaimReconciler{Client: frozenClient(t), Reader: liveClient(t), Recorder: events.NewFakeRecorder(100)}
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("a Service waiting for an older Service's claim to go looks again after %s, want within a minute", res.RequeueAfter)
	}
	// Its own claim: nothing to wait for.
	c := getClaim(t, ns, "web")
	patch := client.MergeFrom(c.DeepCopy())
	c.OwnerReferences[0].UID = svc.UID
	if err := admin.Patch(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	r.Client = frozenClient(t)
	if res, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(svc)}); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("a Service with its own claim: %+v, %v", res, err)
	}
}

// When auto-claim was enabled is stored, not remembered: a Service created while the core was
// down, after the class was marked, that shows an address (won from an auto-assigning pool in
// the race before its claim) still gets a claim after the core restarts.
func TestAutoClaimEnabledAtSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cls := newClass(t, "ac-restart", noDriver, func(c *ipamv1.IPAddressClass) {
		c.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	})
	t.Cleanup(func() { del(t, cls) })
	eventually(t, "the core to see the class", func() (bool, error) {
		c := &ipamv1.IPAddressClass{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cls), c); err != nil {
			return false, err
		}
		return controllerutil.ContainsFinalizer(c, ipamv1.FinalizerClass), nil
	})
	stopCore(t)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has one-second precision: a later second
	svc := lbService(ns, "raced", nil)
	create(t, svc)
	t.Cleanup(func() { del(t, svc) })
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.249"}}
	if err := admin.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	restartCore(t)
	eventually(t, "a claim for the Service created after auto-claim was enabled", func() (bool, error) {
		uid, err := claimOwner(t, ns, "raced")
		return uid == svc.UID, client.IgnoreNotFound(err)
	})
}
