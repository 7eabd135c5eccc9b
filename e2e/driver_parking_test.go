package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// The ranges of this test, used by no other test: the class's pool, a one-address pool that a
// filler claim exhausts, and an autoAssign: true pool that would hand any LoadBalancer Service
// of the cluster an address at once (v4 and v6, so that a dual-stack Service could get both).
var (
	parkingClassRanges = []string{"203.0.113.128/28", "2001:db8:40::/124"}
	parkingTinyRange   = "203.0.113.144/32"
	parkingAutoRanges  = []string{"203.0.113.160/28", "2001:db8:41::/124"}
)

// driverReportingController is the name the driver's events carry as their reporting controller.
const driverReportingController = "metallb-iad"

// docs/design.md#never-a-foreign-address, with an autoAssign: true MetalLB pool present: every
// Service that names a claim, or will be auto-claimed, shows in its load-balancer status its
// claim's addresses and nothing else — not for a moment — as recorded by a watch that started
// before any of them was created. The cases:
//
//	a. a Service naming a claim that is already Bound (IPv4, and Dual on a dual-stack Service);
//	b. a Service auto-claimed through the class annotation;
//	c. a Service naming a claim that does not exist yet, and one naming a claim that waits for
//	   its exhausted pool: no address while the claim is not Bound, then exactly the claim's;
//	d. a Service re-linked from a Bound claim to one that is not Bound: it ends with nothing;
//	e. a Service whose claim is deleted while the Service still names it: it ends with nothing.
//
// A plain Service in the same namespace is the control: MetalLB does serve it from the
// autoAssign pool (so the pool is live, and what keeps the others from it is not a broken pool),
// and it is never parked.
func TestDriverNeverShowsAForeignAddress(t *testing.T) {
	f := features.New("a Service that uses a claim never shows an address other than its claim's").
		Assess("with an autoAssign: true pool present", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			started := time.Now()
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-never-foreign")
			poolWithClass(ctx, t, c, "e2e-park", ipamv1.ReclaimDelete, parkingClassRanges...)
			poolWithClass(ctx, t, c, "e2e-park-tiny", ipamv1.ReclaimDelete, parkingTinyRange)
			rec := recordIngress(ctx, t, ns)

			// The claims of cases a, d and e, and the filler that takes the tiny pool's only IP.
			for _, cl := range []struct {
				name, class string
				fam         ipamv1.IPFamily
			}{
				{"bound-v4", "e2e-park", ipamv1.IPv4}, {"bound-dual", "e2e-park", ipamv1.Dual},
				{"relink-from", "e2e-park", ipamv1.IPv4}, {"deleted", "e2e-park", ipamv1.IPv4},
				{"filler", "e2e-park-tiny", ipamv1.IPv4},
			} {
				newTenantClaim(ctx, t, c, ns, cl.name, cl.class, cl.fam)
			}
			claims := map[string]*ipamv1.IPAddressClaim{}
			for _, n := range []string{"bound-v4", "bound-dual", "relink-from", "deleted", "filler"} {
				claims[n] = waitClaimBound(ctx, t, c, ns, n)
			}
			// The claim case c waits for: Pending while the filler holds the tiny pool's IP.
			newTenantClaim(ctx, t, c, ns, "waiter", "e2e-park-tiny", ipamv1.IPv4)
			// The claim case d moves to: its class does not exist, so it is never Bound.
			newTenantClaim(ctx, t, c, ns, "relink-to", "e2e-park-missing", ipamv1.IPv4)

			// Only now the autoAssign pool: from here on MetalLB hands any Service that requests
			// nothing an address at once; at the end it goes after the namespace's Services.
			autoPool(ctx, t, c, ns)

			// The control, and the Services of every case, one after the other.
			services := map[string]*corev1.Service{
				"plain":       lbService(ns, "plain", nil, false),
				"a-v4":        lbService(ns, "a-v4", map[string]string{claimAnnotation: "bound-v4"}, false),
				"a-dual":      lbService(ns, "a-dual", map[string]string{claimAnnotation: "bound-dual"}, true),
				"b-auto":      lbService(ns, "b-auto", map[string]string{classAnnotation: "e2e-park"}, false),
				"c-late":      lbService(ns, "c-late", map[string]string{claimAnnotation: "c-late"}, false),
				"c-exhausted": lbService(ns, "c-exhausted", map[string]string{claimAnnotation: "waiter"}, false),
				"d-relink":    lbService(ns, "d-relink", map[string]string{claimAnnotation: "relink-from"}, false),
				"e-deleted":   lbService(ns, "e-deleted", map[string]string{claimAnnotation: "deleted"}, false),
			}
			for _, name := range []string{"plain", "a-v4", "a-dual", "b-auto", "c-late", "c-exhausted", "d-relink", "e-deleted"} {
				if err := c.Create(ctx, services[name]); err != nil {
					t.Fatal(err)
				}
			}

			// The control gets an address of the autoAssign pool.
			if err := await(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
				var s corev1.Service
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "plain"}, &s)
				ips := ingressOf(&s)
				return len(ips) == 1 && inRanges(ips[0], parkingAutoRanges), err
			}); err != nil {
				t.Fatalf("the plain Service got no address of the autoAssign pool, so the pool does not prove anything: %v", err)
			}

			// Case a and b, and the starting point of d and e: each ends serving its claim's
			// addresses. (Case b's claim is the core's, of the Service's name.)
			attached := map[string]string{"a-v4": "bound-v4", "a-dual": "bound-dual", "b-auto": "b-auto",
				"d-relink": "relink-from", "e-deleted": "deleted"}
			// The driver says ClaimNotReady about a Service whose claim is still Pending 15 s after
			// it was made (a loaded machine), never before: a warning on b-auto is allowed only
			// from then on.
			if err := await(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
				var cl ipamv1.IPAddressClaim
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b-auto"}, &cl)
				if err == nil && cl.Status.Phase == ipamv1.ClaimBound {
					claims["b-auto"] = &cl
					return true, nil
				}
				return false, client.IgnoreNotFound(err)
			}); err != nil {
				t.Errorf("case b: the auto-claimed Service's claim never became Bound: %v", err)
				delete(attached, "b-auto")
			}
			for _, svc := range sortedKeys(attached) {
				if !serves(ctx, t, c, ns, svc, claimIPs(claims[attached[svc]])) {
					delete(attached, svc)
				}
			}

			// Case c: while the claims are not Bound, nothing, for a while.
			if err := holds(ctx, 5*time.Second, func(ctx context.Context) (bool, error) {
				for _, name := range []string{"c-late", "c-exhausted"} {
					var s corev1.Service
					if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
						return false, err
					}
					if ips := ingressOf(&s); len(ips) > 0 {
						return false, fmt.Errorf("%s shows %v while its claim is not Bound", name, ips)
					}
				}
				return true, nil
			}); err != nil {
				t.Errorf("case c: %v", err)
			}
			// Each observation of case c so far, however brief, was empty.
			pendingUntil := time.Now()

			// Now the changes, all at once: c's claims get Bound (one created, the other's pool
			// freed), d moves to the claim that is never Bound, e's claim is deleted.
			newTenantClaim(ctx, t, c, ns, "c-late", "e2e-park", ipamv1.IPv4)
			if err := c.Delete(ctx, claims["filler"]); err != nil {
				t.Fatal(err)
			}
			patchAnnotations(ctx, t, c, services["d-relink"], map[string]*string{claimAnnotation: ptrTo("relink-to")})
			if err := c.Delete(ctx, claims["deleted"]); err != nil {
				t.Fatal(err)
			}

			claims["c-late"] = waitClaimBound(ctx, t, c, ns, "c-late")
			claims["waiter"] = waitClaimBound(ctx, t, c, ns, "waiter")
			for svc, claim := range map[string]string{"c-late": "c-late", "c-exhausted": "waiter"} {
				if serves(ctx, t, c, ns, svc, claimIPs(claims[claim])) {
					attached[svc] = claim
				}
			}
			delete(attached, "d-relink")
			delete(attached, "e-deleted")
			// d and e end with nothing, and keep it.
			ended := []string{"d-relink", "e-deleted"}
			shown := map[string][]string{}
			showNothing := func(ctx context.Context) (bool, error) {
				for _, name := range ended {
					var s corev1.Service
					if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
						return false, err
					}
					shown[name] = ingressOf(&s)
				}
				return len(shown["d-relink"])+len(shown["e-deleted"]) == 0, nil
			}
			if err := await(ctx, 60*time.Second, showNothing); err != nil {
				t.Errorf("d and e: want both to end with nothing; they show %v (%v)", shown, err)
			} else if err := holds(ctx, 5*time.Second, showNothing); err != nil || len(shown["d-relink"])+len(shown["e-deleted"]) > 0 {
				t.Errorf("d and e: after they lost their claims' addresses, they show %v (%v)", shown, err)
			}
			waitHeld(ctx, t, c, claims["relink-from"].Status.Addresses[0].Name, claimIPs(claims["relink-from"])[0])

			// Everything the watch saw, up to each Service's current state.
			final := map[string]*corev1.Service{}
			for name := range services {
				final[name] = rec.caughtUp(ctx, t, c, ns, name)
			}
			allowed := map[string][]string{
				"a-v4": claimIPs(claims["bound-v4"]), "a-dual": claimIPs(claims["bound-dual"]),
				"c-late": claimIPs(claims["c-late"]), "c-exhausted": claimIPs(claims["waiter"]),
				"d-relink": claimIPs(claims["relink-from"]), "e-deleted": claimIPs(claims["deleted"]),
			}
			if cl := claims["b-auto"]; cl != nil {
				allowed["b-auto"] = claimIPs(cl)
			}
			for _, name := range sortedKeys(allowed) {
				for _, o := range rec.of(name) {
					if foreign := notIn(o.ips, allowed[name]); len(foreign) > 0 {
						t.Errorf("%s showed %v (foreign: %v; its claim's: %v) at %s, %s event, rv %s, annotations %v",
							name, o.ips, foreign, allowed[name], o.at.Format("15:04:05.000"), o.event, o.rv, o.annotations)
						break
					}
				}
				t.Logf("%s: %s", name, rec.timeline(name))
			}
			if _, ok := allowed["b-auto"]; !ok {
				// Without a claim nothing is allowed: any address was foreign.
				for _, o := range rec.of("b-auto") {
					if len(o.ips) > 0 {
						t.Errorf("b-auto showed %v and has no Bound claim", o.ips)
						break
					}
				}
			}
			for _, name := range []string{"c-late", "c-exhausted"} {
				for _, o := range rec.of(name) {
					if o.at.Before(pendingUntil) && len(o.ips) > 0 {
						t.Errorf("%s showed %v at %s, while its claim was not Bound", name, o.ips, o.at.Format("15:04:05.000"))
						break
					}
				}
			}

			// Attached Services: pinned to their claim's addresses, no longer parked.
			for _, name := range sortedKeys(attached) {
				s := final[name]
				if s.Annotations[poolAnnotation] == autoclaim.ParkingPool {
					t.Errorf("%s is attached and still parked: %s=%s", name, poolAnnotation, autoclaim.ParkingPool)
				}
				if s.Annotations[pinnedMarker] != "true" {
					t.Errorf("%s is attached without the pinned marker: %v", name, s.Annotations)
				}
			}
			// The control is never parked.
			for _, o := range rec.of("plain") {
				if o.annotations[poolAnnotation] != "" {
					t.Errorf("the plain Service was given %s=%s", poolAnnotation, o.annotations[poolAnnotation])
					break
				}
			}
			for _, name := range sortedKeys(services) {
				t.Logf("%s: parked at some point: %v; now: %s=%q", name, rec.wasParked(name), poolAnnotation, final[name].Annotations[poolAnnotation])
			}

			// No driver Warning about a Service whose claim was Bound all along (a, and b before its
			// auto-claim is 15 s old); about
			// the others, none but ClaimNotReady, which says why a Service waits.
			warnings := driverWarnings(ctx, t, c, ns)
			for _, name := range sortedKeys(services) {
				for _, e := range warnings[name] {
					waits := strings.HasPrefix(name, "c-") || strings.HasPrefix(name, "d-") || strings.HasPrefix(name, "e-") ||
						name == "b-auto" && claims["b-auto"] != nil && warnedAt(e).Sub(claims["b-auto"].CreationTimestamp.Time) >= 14*time.Second // (one-second timestamps)
					switch {
					case !waits:
						t.Errorf("driver Warning on %s, whose claim was Bound or made Bound for it at once: %s: %s", name, e.Reason, e.Note)
					case e.Reason != "ClaimNotReady":
						t.Errorf("driver Warning on %s other than ClaimNotReady: %s: %s", name, e.Reason, e.Note)
					default:
						t.Logf("driver Warning on %s while it waited: %s: %s", name, e.Reason, e.Note)
					}
				}
			}
			// No Warning from MetalLB either about a Service on its way to its claim's address:
			// it looked at the parked Services (case c waited parked for seconds) and refused
			// the parking pool, but the chart's parking-events policy keeps that report from
			// being recorded, and its hand-over-events policy MetalLB's report of an IP still in
			// use by the hold the driver deleted for an attach. (d and e lose their address; what
			// MetalLB says about them is logged, not judged.)
			noParkingWarnings(ctx, t, c, ns, started, []string{"a-v4", "a-dual", "b-auto", "c-late", "c-exhausted"}, "c-late", "c-exhausted")
			var evs eventsv1.EventList
			if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.Reason == "AllocationFailed" && slices.Contains(ended, e.Regarding.Name) {
					t.Logf("while %s lost its address, MetalLB said: %s", e.Regarding.Name, e.Note)
				}
			}
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-park", "e2e-park-tiny"}, Namespaces: []string{ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// noParkingWarnings fails the test for any AllocationFailed event, whoever reported it, about the
// named Services since `since`: a Service that waits parked for its claim, or is attached to it,
// gets no Warning (docs/design.md#never-a-foreign-address: no foreign address and no
// AllocationFailed first). That includes MetalLB's report of the claim's IP as still in use by
// the hold the driver deleted for the attach, which a pass of MetalLB's over every Service makes
// when several Services attach at once (the chart's hand-over-events policy refuses it).
// On the local provider it also proves the check is not vacuous: MetalLB did try to record its
// refusal of the parking pool about each Service of refusedFor, and the apiserver's policy
// refused the write (the audit log).
func noParkingWarnings(ctx context.Context, t *testing.T, c client.Client, ns string, since time.Time, names []string, refusedFor ...string) {
	t.Helper()
	if local, ok := cluster.(*provider.LocalCluster); ok {
		// MetalLB records events in the background, and the audit log is written behind requests.
		var refused map[string]int
		err := await(ctx, 30*time.Second, func(context.Context) (bool, error) {
			refused = metallbRefusedEvents(t, local.AuditLog, ns, since)
			return !slices.ContainsFunc(refusedFor, func(n string) bool { return refused[n] == 0 }), nil
		})
		if err != nil {
			t.Errorf("MetalLB never tried to record a refusal about one of %v (its refused event writes: %v): the check below proves nothing", refusedFor, refused)
		}
		t.Logf("MetalLB's event writes refused by the apiserver, by Service: %v", refused)
	} else {
		t.Logf("%s provider: MetalLB's refused event writes are not counted (the local provider's audit log)", providerName())
	}
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Kind != "Service" || !slices.Contains(names, e.Regarding.Name) || e.Reason != "AllocationFailed" || warnedAt(e).Before(since.Truncate(time.Second)) {
			continue
		}
		t.Errorf("%s got a Warning %s from %s%s: %s", e.Regarding.Name, e.Reason, e.ReportingController, e.DeprecatedSource.Component, e.Note)
	}
}

// metallbRefusedEvents counts, by Service name, MetalLB's event writes in ns since `since` that
// an admission policy refused (403; an event is named after the object it is about:
// <name>.<suffix>).
func metallbRefusedEvents(t *testing.T, auditLog, ns string, since time.Time) map[string]int {
	t.Helper()
	evs, err := controlplane.AuditWrites(auditLog, func(e controlplane.AuditEvent) bool {
		return e.User.Username == controlplane.MetalLBUser(controlplane.DefaultMetalLBNamespace) && e.ObjectRef != nil && e.ObjectRef.Resource == "events" &&
			e.ObjectRef.Namespace == ns && e.ResponseStatus != nil && e.ResponseStatus.Code == 403 && !e.Stamp.Before(since)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs {
		name, _, _ := strings.Cut(e.ObjectRef.Name, ".")
		out[name]++
	}
	return out
}

// autoPool creates this test's autoAssign: true pool. At the end, before the pool goes, the
// namespace's Services are deleted (so that no Service keeps an address of a pool that is gone),
// and the test waits until MetalLB's pool is gone, so that later tests find no autoAssign pool.
func autoPool(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	// Cleanups run last-registered first: the Services go, then the pool, then the wait for it.
	t.Cleanup(func() {
		bg := context.Background()
		_ = c.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		pool := &metav1.PartialObjectMetadata{}
		pool.SetGroupVersionKind(poolGVK)
		eventually(bg, t, 30*time.Second, "the autoAssign pool to be gone", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: metallbNamespace, Name: "e2e-park-auto"}, pool)
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
	newPool(ctx, t, c, "e2e-park-auto", nil, parkingAutoRanges...)
	t.Cleanup(func() {
		bg := context.Background()
		var list corev1.ServiceList
		_ = c.List(bg, &list, client.InNamespace(ns))
		for i := range list.Items {
			_ = c.Delete(bg, &list.Items[i])
		}
		eventually(bg, t, 60*time.Second, "the test's Services to be gone", func(ctx context.Context) (bool, error) {
			var list corev1.ServiceList
			err := c.List(ctx, &list, client.InNamespace(ns))
			return len(list.Items) == 0, err
		})
	})
}

// serves waits until the Service shows exactly want (nil: nothing); it reports a failure and
// returns false instead of ending the test, so that the other cases are still judged.
func serves(ctx context.Context, t *testing.T, c client.Client, ns, name string, want []string) bool {
	t.Helper()
	want = sorted(want)
	var got []string
	err := await(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return false, err
		}
		got = ingressOf(&s)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Errorf("%s: want it to serve %v, it serves %v (%v)", name, want, got, err)
		return false
	}
	return true
}

// await polls cond until it holds, and says why not after timeout.
func await(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok && err == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// holds checks cond at every poll for d and says the first time it did not hold.
func holds(ctx context.Context, d time.Duration, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the condition stopped holding")
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ingressRecord is every state of the namespace's Services that a watch delivered, in order.
type ingressRecord struct {
	mu   sync.Mutex
	seen map[string][]observation
}

type observation struct {
	at          time.Time
	event       watch.EventType
	rv          string
	uid         types.UID
	ips         []string
	annotations map[string]string
}

// recordIngress starts watching the (still empty) namespace's Services from the resource
// version of a list, so that every later change of every Service there is delivered; the
// watch resumes from the last version it saw if the apiserver closes it.
func recordIngress(ctx context.Context, t *testing.T, ns string) *ingressRecord {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) > 0 {
		t.Fatalf("namespace %s has Services before the watch starts", ns)
	}
	wctx, cancel := context.WithCancel(context.Background())
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cs.CoreV1().Services(ns).Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, lw)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rec := &ingressRecord{seen: map[string][]observation{}}
	go func() {
		for ev := range rw.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok {
				continue // a bookmark or an error the retry watcher recovers from
			}
			rec.mu.Lock()
			rec.seen[svc.Name] = append(rec.seen[svc.Name], observation{at: time.Now(), event: ev.Type,
				rv: svc.ResourceVersion, uid: svc.UID, ips: ingressOf(svc), annotations: svc.Annotations})
			rec.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		rw.Stop()
		<-rw.Done()
	})
	return rec
}

func (r *ingressRecord) of(name string) []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen[name])
}

func (r *ingressRecord) wasParked(name string) bool {
	return slices.ContainsFunc(r.of(name), func(o observation) bool {
		return o.annotations[poolAnnotation] == autoclaim.ParkingPool
	})
}

// timeline is the Service's distinct ingress states in order, for the log.
func (r *ingressRecord) timeline(name string) string {
	var parts []string
	var last string
	for _, o := range r.of(name) {
		s := fmt.Sprintf("%v", o.ips)
		if o.annotations[poolAnnotation] == autoclaim.ParkingPool {
			s += "(parked)"
		}
		if s != last {
			parts = append(parts, o.at.Format("15:04:05.000")+" "+s)
			last = s
		}
	}
	return strings.Join(parts, " -> ")
}

// caughtUp reads the Service and waits until the watch has delivered that version of it, so that
// the record holds everything up to now.
func (r *ingressRecord) caughtUp(ctx context.Context, t *testing.T, c client.Client, ns, name string) *corev1.Service {
	t.Helper()
	var s corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, 30*time.Second, "the watch to deliver "+name+" at "+s.ResourceVersion, func(context.Context) (bool, error) {
		return slices.ContainsFunc(r.of(name), func(o observation) bool { return o.rv == s.ResourceVersion }), nil
	})
	return &s
}

// driverWarnings are the Warning events the driver reported about the namespace's Services, by
// Service name.
func driverWarnings(ctx context.Context, t *testing.T, c client.Client, ns string) map[string][]eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Service" && e.Type == corev1.EventTypeWarning && e.ReportingController == driverReportingController {
			out[e.Regarding.Name] = append(out[e.Regarding.Name], e)
		}
	}
	return out
}

// warnedAt is when an event was first said.
func warnedAt(e eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.DeprecatedFirstTimestamp.Time
}

// notIn is the IPs of got that are not in allowed.
func notIn(got, allowed []string) []string {
	var out []string
	for _, ip := range got {
		if !slices.Contains(allowed, ip) {
			out = append(out, ip)
		}
	}
	return out
}

func inRanges(ip string, ranges []string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ranges, func(r string) bool { return netip.MustParsePrefix(r).Contains(a) })
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
