package e2e

// MetalLB's own behaviour, on MetalLB alone: each test below shows, on the MetalLB version the
// suite runs (METALLB_VERSION, the one Cozystack ships by default), a behaviour that one of the
// driver's workarounds answers. metallb-iad/README.md's table of workarounds names each test.
// When a MetalLB release changes a behaviour, its test here fails, and the workaround that
// answers it can be re-examined (and removed when nothing needs it any more).
//
// The Services here live in namespaces that are not tenants' and draw from pools that no class
// names, so neither of the project's controllers acts on them.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/cozystack/reserved-ips/tools/controlplane"
)

const autoClaimOff = "local.sdn.cozystack.io/auto-claim"

// metallbComponent is the source of MetalLB's controller's events (its process name).
const metallbComponent = "metallb-controller"

// plainNamespace creates a namespace that is not a tenant's (no admission policy of the
// project applies there), deleted at the end.
func plainNamespace(ctx context.Context, t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}

// metallbService is a LoadBalancer Service with the given MetalLB annotations and auto-claim
// off, created at once.
func metallbService(ctx context.Context, t *testing.T, c client.Client, ns, name string, annotations map[string]string) *corev1.Service {
	t.Helper()
	a := map[string]string{autoClaimOff: "false"}
	for k, v := range annotations {
		a[k] = v
	}
	svc := lbService(ns, name, a, false)
	svc.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

// metallbEvent waits for MetalLB's event of that reason on the Service whose message contains
// text, and returns it.
func metallbEvent(ctx context.Context, t *testing.T, c client.Client, ns, name, reason, text string) corev1.Event {
	t.Helper()
	return metallbEventWithin(ctx, t, c, 60*time.Second, ns, name, reason, text)
}

func metallbEventWithin(ctx context.Context, t *testing.T, c client.Client, timeout time.Duration, ns, name, reason, text string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(ctx, t, timeout, fmt.Sprintf("MetalLB's %s on %s/%s saying %q", reason, ns, name, text), func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, text) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	// The filter of TestMetalLBIgnoresAnotherLoadBalancerClass counts on this source.
	if found.Source.Component != metallbComponent {
		t.Errorf("MetalLB's %s event comes from %q, not %q", reason, found.Source.Component, metallbComponent)
	}
	return found
}

// unserved says, for d, that the Service shows no address.
func unserved(ctx context.Context, t *testing.T, c client.Client, svc *corev1.Service, d time.Duration) {
	t.Helper()
	consistently(ctx, t, d, fmt.Sprintf("%s/%s to stay without an address", svc.Namespace, svc.Name), func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		return len(s.Status.LoadBalancer.Ingress) == 0, nil
	})
}

// fullPass makes MetalLB pass over every Service: it does after an allocated Service is deleted.
func fullPass(ctx context.Context, t *testing.T, c client.Client, ns, pool string) {
	t.Helper()
	trigger := metallbService(ctx, t, c, ns, "pass-trigger", map[string]string{poolAnnotation: pool})
	waitServed(ctx, t, c, trigger)
	if err := c.Delete(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, trigger)
}

// waitServed waits until the Service shows an address and returns it.
func waitServed(ctx context.Context, t *testing.T, c client.Client, svc *corev1.Service) string {
	t.Helper()
	var ip string
	eventually(ctx, t, 60*time.Second, fmt.Sprintf("%s/%s to be served", svc.Namespace, svc.Name), func(ctx context.Context) (bool, error) {
		var s corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		if got := ingressOf(&s); len(got) > 0 {
			ip = got[0]
			return true, nil
		}
		return false, nil
	})
	return ip
}

// Parking: with a pool that hands out addresses unasked (autoAssign, the default), MetalLB gives
// a new LoadBalancer Service one at once, before any other controller could pin it — a Service
// that names a claim would show a foreign address for a moment.
func TestMetalLBAssignsUnaskedFromAnAutoAssignPool(t *testing.T) {
	f := features.New("MetalLB, an auto-assign pool").
		Assess("serves a Service that asks for nothing", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := plainNamespace(ctx, t, c, "metallb-autoassign")
			// The pool serves this namespace only, so it hands nothing to the other tests.
			u := newPoolObject("metallb-autoassign", nil, "203.0.113.224/30")
			u.Object["spec"].(map[string]any)["serviceAllocation"] = map[string]any{"namespaces": []any{ns}}
			createPool(ctx, t, c, u)
			svc := metallbService(ctx, t, c, ns, "asks-nothing", nil)
			if ip := waitServed(ctx, t, c, svc); !mustPrefix("203.0.113.224/30").Contains(mustAddr(ip)) {
				t.Fatalf("served %s, not from the auto-assign pool", ip)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// The parking-events policy: MetalLB reports a Service that asks for a pool that does not exist
// with AllocationFailed "unknown pool" — and again on each of its passes over every Service. (The
// parking pool itself is not used here: the chart's policy refuses that very report, and the
// driver takes the parking annotation off a Service that names no claim.)
func TestMetalLBReportsAnUnknownPoolOnEveryPass(t *testing.T) {
	f := features.New("MetalLB, a Service asking for a pool that does not exist").
		Assess("is reported when MetalLB looks at it, and on every full pass", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := plainNamespace(ctx, t, c, "metallb-unknown-pool")
			newPool(ctx, t, c, "metallb-unknown-pool", ptrTo(false), "203.0.113.228/30")
			asks := metallbService(ctx, t, c, ns, "asks", map[string]string{poolAnnotation: "e2e-no-such-pool"})
			first := metallbEvent(ctx, t, c, ns, asks.Name, "AllocationFailed", `unknown pool "e2e-no-such-pool"`)
			fullPass(ctx, t, c, ns, "metallb-unknown-pool")
			eventually(ctx, t, 60*time.Second, "the report to repeat on the full pass", func(ctx context.Context) (bool, error) {
				var e corev1.Event
				err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, &e)
				return e.Count > first.Count, err
			})
			unserved(ctx, t, c, asks, time.Second)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// The hand-over-events policy and the placeholder nudges: MetalLB refuses a Service that asks
// for an address another Service holds ("address also in use by"), and when the holder moves to
// another address without going away, MetalLB never tries the refused Service again on its own;
// any write to it (the driver's nudge) makes MetalLB serve it at once.
func TestMetalLBDoesNotRetryARefusedService(t *testing.T) {
	f := features.New("MetalLB, a Service asking for an address in use").
		Assess("is refused, not retried when the address is free, and served once touched", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := plainNamespace(ctx, t, c, "metallb-no-retry")
			newPool(ctx, t, c, "metallb-no-retry", ptrTo(false), "203.0.113.232/30")
			const ip, other = "203.0.113.232", "203.0.113.233"
			holder := metallbService(ctx, t, c, ns, "holder", map[string]string{pinAnnotation: ip})
			waitIngress(ctx, t, c, ns, holder.Name, []string{ip})
			wants := metallbService(ctx, t, c, ns, "wants", map[string]string{pinAnnotation: ip})
			metallbEvent(ctx, t, c, ns, wants.Name, "AllocationFailed", "address also in use by "+ns+"/"+holder.Name)

			// The holder moves to another address: the IP is free, and MetalLB makes no pass.
			patchAnnotations(ctx, t, c, holder, map[string]*string{pinAnnotation: ptrTo(other)})
			waitIngress(ctx, t, c, ns, holder.Name, []string{other})
			unserved(ctx, t, c, wants, 20*time.Second)

			patchAnnotations(ctx, t, c, wants, map[string]*string{"e2e.reserved-ips.cozystack.io/touch": ptrTo("1")})
			waitIngress(ctx, t, c, ns, wants.Name, []string{ip})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// The detach's status clear and the stale-holder clear: MetalLB keeps a Service's address after
// the request for it is gone (a pin removed), for as long as the address stays valid for it;
// only clearing the Service's load-balancer status makes MetalLB let go.
func TestMetalLBKeepsAnAddressNothingRequests(t *testing.T) {
	f := features.New("MetalLB, a Service whose pin is removed").
		Assess("keeps its address until its status is cleared", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := plainNamespace(ctx, t, c, "metallb-keeps")
			newPool(ctx, t, c, "metallb-keeps", ptrTo(false), "203.0.113.236/30")
			const ip = "203.0.113.237"
			svc := metallbService(ctx, t, c, ns, "unpinned", map[string]string{pinAnnotation: ip})
			waitIngress(ctx, t, c, ns, svc.Name, []string{ip})
			patchAnnotations(ctx, t, c, svc, map[string]*string{pinAnnotation: nil})
			consistently(ctx, t, 15*time.Second, "the unpinned Service to keep "+ip, func(ctx context.Context) (bool, error) {
				var s corev1.Service
				err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s)
				return slices.Equal(ingressOf(&s), []string{ip}), err
			})
			eventually(ctx, t, 30*time.Second, "the status to be cleared", func(ctx context.Context) (bool, error) {
				var s corev1.Service
				if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
					return false, err
				}
				s.Status.LoadBalancer = corev1.LoadBalancerStatus{}
				return c.Status().Update(ctx, &s) == nil, nil
			})
			// MetalLB lets go: the address serves another Service that asks for it.
			next := metallbService(ctx, t, c, ns, "next", map[string]string{pinAnnotation: ip})
			waitIngress(ctx, t, c, ns, next.Name, []string{ip})
			unserved(ctx, t, c, svc, 3*time.Second)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// The release Services (and the NotServed report for a name the driver cannot release): after a
// restart, MetalLB handles no Service event until one pass over every Service succeeds. A Service
// it assigned in a failed pass and that is deleted meanwhile keeps its address in MetalLB's
// memory: a Service asking for it later is refused, "in use by" one that no longer exists.
// MetalLB forgets the name when it handles a Service of that name that is not a LoadBalancer;
// after a touch (MetalLB does not retry by itself) the refused Service is served. On the patched
// build (patch 0002) MetalLB handles the deletion in that window and keeps nothing.
func TestMetalLBKeepsADeletedServicesAddressAfterARestart(t *testing.T) {
	f := features.New("MetalLB, a Service deleted in its restart window").
		Assess("keeps its address until a Service of its name that is no LoadBalancer is seen", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			local := localCluster(t, "it makes MetalLB's passes fail after a restart and reads its log")
			var metallbLog string
			for _, p := range local.Processes() {
				if p.Spec.Name == "metallb-controller" {
					metallbLog = p.LogPath
				}
			}
			ns := plainNamespace(ctx, t, c, "metallb-restart-window")
			newPool(ctx, t, c, "metallb-restart-window", ptrTo(false), "203.0.113.240/30")
			const ip = "203.0.113.241"
			blocker := denyMetalLBStatusWrites(ctx, t, c, "metallb-window-blocker", "203.0.113.244/30")
			metallbFailingAfterRestart(ctx, t, metallbLog, blocker)

			// Assigned by a failing pass (its own status write goes through), then deleted:
			// MetalLB drops the deletion.
			gone := metallbService(ctx, t, c, ns, "gone", map[string]string{pinAnnotation: ip})
			waitIngress(ctx, t, c, ns, gone.Name, []string{ip})
			if err := c.Delete(ctx, gone); err != nil {
				t.Fatal(err)
			}
			waitGone(ctx, t, c, gone)
			// The next pass succeeds (its back-off may have grown to a minute or two by then):
			// it refuses a Service asking for the address.
			wants := metallbService(ctx, t, c, ns, "wants", map[string]string{pinAnnotation: ip})
			allowMetalLBStatusWrites(ctx, t, c)
			if patchedMetalLB() {
				// The patched MetalLB handled the deletion in its restart window: the next pass
				// (its back-off may have grown to a minute or two) serves the Service asking for
				// the address, with no release and no touch.
				eventually(ctx, t, 4*time.Minute, "the Service asking for the address to be served", func(ctx context.Context) (bool, error) {
					var s corev1.Service
					err := c.Get(ctx, client.ObjectKeyFromObject(wants), &s)
					return slices.Equal(ingressOf(&s), []string{ip}), err
				})
				noRefusalNaming(ctx, t, c, ns, ns+"/gone")
				return ctx
			}
			metallbEventWithin(ctx, t, c, 4*time.Minute, ns, wants.Name, "AllocationFailed", "address also in use by "+ns+"/gone")
			unserved(ctx, t, c, wants, 5*time.Second)

			// A Service of the deleted name that is no LoadBalancer: MetalLB forgets the name.
			release := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone,
					Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			}
			if err := c.Create(ctx, release); err != nil {
				t.Fatal(err)
			}
			unserved(ctx, t, c, wants, 5*time.Second)
			patchAnnotations(ctx, t, c, wants, map[string]*string{"e2e.reserved-ips.cozystack.io/touch": ptrTo("1")})
			waitIngress(ctx, t, c, ns, wants.Name, []string{ip})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// Why a pass costs one write per served Service: MetalLB rebuilds each Service's ingress without
// the ipMode the apiserver fills in, so its comparison never finds a served Service unchanged, and
// every pass over all Services writes every served Service's status again, unchanged. On the
// patched build (patch 0001) the pass writes nothing.
func TestMetalLBRewritesServedServicesOnEveryPass(t *testing.T) {
	f := features.New("MetalLB, a settled Service").
		Assess("gets its status written again, unchanged, on a full pass", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			local := localCluster(t, "it counts MetalLB's writes in the apiserver's audit log")
			ns := plainNamespace(ctx, t, c, "metallb-rewrites")
			newPool(ctx, t, c, "metallb-rewrites", ptrTo(false), "203.0.113.248/30")
			settled := metallbService(ctx, t, c, ns, "settled", map[string]string{poolAnnotation: "metallb-rewrites"})
			ip := waitServed(ctx, t, c, settled)
			var before corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(settled), &before); err != nil {
				t.Fatal(err)
			}
			if in := before.Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IPMode == nil {
				t.Fatalf("the apiserver did not fill in the ingress's ipMode: %+v", in)
			}
			since := time.Now()
			// The trigger's deletion sets off a pass over every Service; the wait takes only a
			// pass that started after the settled Service was served.
			trigger := metallbService(ctx, t, c, ns, "pass-trigger", map[string]string{poolAnnotation: "metallb-rewrites"})
			waitServed(ctx, t, c, trigger)
			logPath, offset := metallbLog(t)
			if err := c.Delete(ctx, trigger); err != nil {
				t.Fatal(err)
			}
			waitGone(ctx, t, c, trigger)
			waitMetalLBPass(ctx, t, logPath, offset)
			user := controlplane.MetalLBUser(local.MetalLBNamespace)
			writes := func() ([]controlplane.AuditEvent, error) {
				return controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
					return e.User.Username == user && e.ObjectRef != nil && e.ObjectRef.Resource == "services" &&
						e.ObjectRef.Subresource == "status" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == settled.Name &&
						!e.Stamp.Before(since)
				})
			}
			if patchedMetalLB() {
				// The patched MetalLB keeps the ipMode the apiserver filled in: the pass found the
				// settled Service unchanged and wrote nothing.
				evs, err := writes()
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) > 0 {
					t.Fatalf("the patched MetalLB wrote the settled Service's status %d times on a pass", len(evs))
				}
			} else {
				eventually(ctx, t, 30*time.Second, "MetalLB to write the settled Service's status on the pass", func(context.Context) (bool, error) {
					evs, err := writes()
					return slices.ContainsFunc(evs, func(e controlplane.AuditEvent) bool {
						return e.ResponseStatus != nil && e.ResponseStatus.Code == 200
					}), err
				})
			}
			var after corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(settled), &after); err != nil {
				t.Fatal(err)
			}
			if got := ingressOf(&after); !slices.Equal(got, []string{ip}) {
				t.Fatalf("the settled Service now serves %v, not %s", got, ip)
			}
			// The write changed nothing: the apiserver, having filled the ipMode in again, stored
			// nothing new (a write that changed the object would have moved its resourceVersion).
			if after.ResourceVersion != before.ResourceVersion {
				t.Fatalf("MetalLB's write changed the Service (resourceVersion %s → %s): %+v → %+v",
					before.ResourceVersion, after.ResourceVersion, before.Status, after.Status)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// Only Services MetalLB will serve are attached: MetalLB skips a Service of another
// loadBalancerClass without a word, even one that pins an address.
func TestMetalLBIgnoresAnotherLoadBalancerClass(t *testing.T) {
	f := features.New("MetalLB, a Service of another loadBalancerClass").
		Assess("is never served nor reported", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			ns := plainNamespace(ctx, t, c, "metallb-other-class")
			newPool(ctx, t, c, "metallb-other-class", ptrTo(false), "203.0.113.252/30")
			const ip = "203.0.113.252"
			a := map[string]string{autoClaimOff: "false", pinAnnotation: ip}
			foreign := lbService(ns, "foreign", a, false)
			foreign.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
			foreign.Spec.LoadBalancerClass = ptrTo("example.org/other")
			if err := c.Create(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			// The address stays free: a Service of MetalLB's gets it.
			other := metallbService(ctx, t, c, ns, "metallbs", map[string]string{pinAnnotation: ip})
			waitIngress(ctx, t, c, ns, other.Name, []string{ip})
			unserved(ctx, t, c, foreign, 3*time.Second)
			var evs corev1.EventList
			if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			// Only MetalLB's own reports count: kube-apiserver's ClusterIP repair may write one
			// on any new Service.
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == foreign.Name && e.Source.Component == metallbComponent {
					t.Errorf("MetalLB reported the foreign Service: %s %s", e.Reason, e.Message)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
