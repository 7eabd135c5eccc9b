package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// Killing the driver, MetalLB's controller, or both, in the middle of provisioning, attach or
// detach loses nothing: claims stay Bound to the same addresses, every address is held exactly
// once, and no IP is served twice.
func TestDriverSurvivesRestarts(t *testing.T) {
	f := features.New("restarts lose nothing").
		Assess("kill during provisioning, attach and detach", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-restarts")
			poolWithClass(ctx, t, c, "e2e-restart", ipamv1.ReclaimDelete, "198.51.100.160/27", "2001:db8:20::/120")
			rounds := []struct {
				victims []string
				delay   time.Duration
			}{
				{[]string{"metallb-iad"}, 0},
				{[]string{"metallb-controller"}, 150 * time.Millisecond},
				{[]string{"metallb-iad", "metallb-controller"}, 400 * time.Millisecond},
			}
			for r, round := range rounds {
				t.Logf("round %d: killing %v after %s", r, round.victims, round.delay)
				names := []string{fmt.Sprintf("r%d-a", r), fmt.Sprintf("r%d-b", r), fmt.Sprintf("r%d-c", r)}
				fams := []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6, ipamv1.Dual}

				// Provisioning.
				for i, n := range names {
					newTenantClaim(ctx, t, c, ns, n, "e2e-restart", fams[i])
				}
				time.Sleep(round.delay)
				restart(ctx, t, round.victims...)
				bound := map[string][]string{}
				for _, n := range names {
					bound[n] = claimIPs(waitClaimBound(ctx, t, c, ns, n))
				}
				checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-restart"}, Namespaces: []string{ns}})

				// Attach.
				for i, n := range names {
					if err := throughWebhook(ctx, func() error { return c.Create(ctx, lbServiceFor(ns, n, fams[i])) }); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(round.delay)
				restart(ctx, t, round.victims...)
				for _, n := range names {
					waitIngress(ctx, t, c, ns, n, bound[n])
				}
				checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-restart"}, Namespaces: []string{ns}})

				// Detach.
				for _, n := range names {
					patchAnnotations(ctx, t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}},
						map[string]*string{claimAnnotation: nil})
				}
				time.Sleep(round.delay)
				restart(ctx, t, round.victims...)
				for _, n := range names {
					waitIngress(ctx, t, c, ns, n, nil)
				}
				checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-restart"}, Namespaces: []string{ns}})
				for _, n := range names {
					if got := claimIPs(waitClaimBound(ctx, t, c, ns, n)); !slices.Equal(got, bound[n]) {
						t.Fatalf("claim %s moved from %v to %v", n, bound[n], got)
					}
					if err := c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}); err != nil {
						t.Fatal(err)
					}
				}
			}

			// A restart over settled objects writes nothing.
			local := localCluster(t, "it counts the driver's writes in the apiserver audit log")
			sa := "system:serviceaccount:cozy-metallb-iad:metallb-iad"
			driverWrites := func(since time.Time) ([]controlplane.AuditEvent, error) {
				return controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
					return e.User.Username == sa && e.Stamp.After(since) && !leaderElection(e)
				})
			}
			// Settled: every address is held by MetalLB (a hold MetalLB has yet to serve is still
			// moving, and the driver rightly writes when it is served), and the driver has been
			// quiet for longer than its nudge-after (3s).
			quiet := time.Now()
			eventually(ctx, t, 120*time.Second, "every address held and the driver quiet", func(ctx context.Context) (bool, error) {
				w, err := driverWrites(quiet)
				if err != nil || len(w) > 0 {
					quiet = time.Now()
					return false, err
				}
				var addrs ipamv1.IPAddressList
				if err := c.List(ctx, &addrs); err != nil {
					return false, err
				}
				for _, a := range addrs.Items {
					if a.Spec.ClassName == "e2e-restart" && !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionHeld) {
						quiet = time.Now()
						return false, fmt.Errorf("%s is not held yet", a.Name)
					}
				}
				// A release Service (after MetalLB's restart kept an allocation) lives 10s past a
				// quiet driver; its deletion is a write still to come, not one over settled objects.
				var releases corev1.ServiceList
				if err := c.List(ctx, &releases, client.InNamespace(driverNamespace),
					client.MatchingLabels{roleLabel: "release"}); err != nil {
					return false, err
				}
				if len(releases.Items) > 0 {
					quiet = time.Now()
					return false, fmt.Errorf("release Service %s still lives", releases.Items[0].Name)
				}
				return time.Since(quiet) > 5*time.Second, nil
			})
			since := time.Now()
			restart(ctx, t, "metallb-iad")
			// The restarted driver ran: each of its controllers reconciled every object of its kind
			// (its own placeholders do not reach the Service controller).
			waitEveryObjectReconciled(ctx, t, c, local, "metallb-iad", 90*time.Second, map[string]objectsOf{
				"metallb-iad-address": {list: ipamv1.GroupVersion.WithKind("IPAddressList")},
				"metallb-iad-claim":   {list: ipamv1.GroupVersion.WithKind("IPAddressClaimList")},
				"metallb-iad-class":   {list: ipamv1.GroupVersion.WithKind("IPAddressClassList")},
				"metallb-iad-service": {list: corev1.SchemeGroupVersion.WithKind("ServiceList"), skip: func(o metav1.PartialObjectMetadata) bool {
					return o.Namespace == driverNamespace && o.Labels[roleLabel] != ""
				}},
			})
			consistently(ctx, t, 3*time.Second, "the restarted driver to write nothing", func(ctx context.Context) (bool, error) {
				w, err := driverWrites(since)
				if len(w) > 0 {
					var lines []string
					for _, e := range w {
						lines = append(lines, e.Verb+" "+e.RequestURI)
					}
					return false, fmt.Errorf("%d writes:\n%s", len(w), strings.Join(lines, "\n"))
				}
				return true, err
			})
			writes, err := driverWrites(since)
			if err != nil {
				t.Fatal(err)
			}
			all, _ := controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
				return e.User.Username == sa && !e.Stamp.IsZero()
			})
			if len(all) == 0 {
				t.Fatalf("the audit log has no writes by %s at all: the count above proves nothing", sa)
			}
			if len(writes) != 0 {
				var lines []string
				for _, w := range writes {
					lines = append(lines, w.Verb+" "+w.RequestURI)
				}
				t.Fatalf("the restarted driver wrote %d times over settled objects:\n%s", len(writes), strings.Join(lines, "\n"))
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func lbServiceFor(ns, claim string, fam ipamv1.IPFamily) *corev1.Service {
	svc := lbService(ns, claim, map[string]string{claimAnnotation: claim}, fam == ipamv1.Dual)
	if fam == ipamv1.IPv6 {
		p := corev1.IPFamilyPolicySingleStack
		svc.Spec.IPFamilyPolicy = &p
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	}
	return svc
}

// Adoption: an admin pinned a reserved-pool address on a Service by hand; the documented
// procedure turns it into a claim without the Service ever losing the address.
func TestDriverAdoptsAnAdminPin(t *testing.T) {
	f := features.New("adopting an address a Service already holds").
		Assess("the documented procedure", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-adopt")
			poolWithClass(ctx, t, c, "e2e-adopt", ipamv1.ReclaimRetain, "198.51.100.196/30")
			const ip = "198.51.100.197"
			legacy := lbService(ns, "legacy", map[string]string{pinAnnotation: ip}, false)
			if err := c.Create(ctx, legacy); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, ns, "legacy", []string{ip})

			// Watch the Service throughout: it must never lose the address.
			stop := make(chan struct{})
			var lost []string
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					var s corev1.Service
					if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), &s); err == nil && !slices.Equal(ingressOf(&s), []string{ip}) {
						lost = append(lost, fmt.Sprint(ingressOf(&s)))
					}
				}
			}()

			// 1. Name the claim on the Service. 2. Create the claim for exactly that address.
			// 3. Create the IPAddress, pre-bound to the claim.
			patchAnnotations(ctx, t, c, legacy, map[string]*string{claimAnnotation: ptrTo("legacy")})
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: "e2e-adopt", AddressName: "ip-198-51-100-197"}}
			if err := c.Create(ctx, claim); err != nil {
				t.Fatal(err)
			}
			addr := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "ip-198-51-100-197"},
				Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "e2e-adopt",
					ClaimRef: &ipamv1.ClaimReference{Namespace: ns, Name: "legacy"}}}
			if err := c.Create(ctx, addr); err != nil {
				t.Fatal(err)
			}
			waitClaimBound(ctx, t, c, ns, "legacy")
			eventually(ctx, t, 30*time.Second, "the address to be attached to the Service", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(addr), addr)
				return addr.Status.AttachedTo != nil && addr.Status.AttachedTo.Name == "legacy", err
			})
			time.Sleep(time.Second)
			close(stop)
			wg.Wait()
			if len(lost) > 0 {
				t.Fatalf("the Service lost its address during adoption: %v", lost)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
				t.Fatal(err)
			}
			if legacy.Annotations[pinnedMarker] != "true" {
				t.Fatal("the adopted pin does not carry the driver's marker")
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(addr), addr); err != nil {
				t.Fatal(err)
			}
			if meta.IsStatusConditionTrue(addr.Status.Conditions, ipamv1.ConditionConflict) {
				t.Fatal("adoption raised a Conflict")
			}
			checkInvariants(ctx, t, c, invariantScope{Classes: []string{"e2e-adopt"}, Namespaces: []string{ns}})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// leaderElection reports the writes of leader election itself: its Lease, and the event a new
// leader emits about the Lease (named after it). They are not reconciles of settled objects.
func leaderElection(e controlplane.AuditEvent) bool {
	if e.ObjectRef == nil {
		return false
	}
	return e.ObjectRef.Resource == "leases" ||
		(e.ObjectRef.Resource == "events" && strings.HasPrefix(e.ObjectRef.Name, "metallb-iad.local.sdn.cozystack.io."))
}
