package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// The ranges of this test: the class's pool (1,024 addresses) and an autoAssign: true pool as
// large, which would give every LoadBalancer Service that requests nothing an address at once.
var (
	scaleClassRange = "198.18.32.0/22"
	scaleAutoRange  = "198.18.40.0/22"
)

// scaleServices is how many Services TestNoForeignAddressAtScale makes: E2E_PARKING_N, else 1,000
// where the apiserver has no MutatingAdmissionPolicy (the driver's webhook parks, and this is its
// proof at scale) and 200 where the chart's policies park inside the apiserver.
func scaleServices(ctx context.Context, t *testing.T) int {
	if v := os.Getenv("E2E_PARKING_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("E2E_PARKING_N=%q: want a number of at least 10", v)
		}
		return n
	}
	cs, err := kubernetes.NewForConfig(cluster.Config())
	if err != nil {
		t.Fatal(err)
	}
	served, err := controlplane.ServesMutatingAdmissionPolicy(cs.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	if served {
		return 200
	}
	return 1000
}

// docs/design.md#never-a-foreign-address at scale, with an autoAssign: true pool present: a watch
// that starts before the first Service records every state of N LoadBalancer Services, nine in ten
// naming a claim that is Bound beforehand, one in ten auto-claimed through the class annotation;
// one in ten of the first and half of the others are created as ClusterIP and turned into a
// LoadBalancer that names its claim or class by an update.
// The driver is killed a third of the way through and comes back while Services keep arriving.
// No Service ever shows an address other than its claim's; every one ends serving exactly its
// claim's; the time from create to that address is reported (p50, p99, max). Below Kubernetes
// 1.36 the driver's parking webhook does the parking: while the driver is down, a write it must
// see is refused (failurePolicy Fail) and retried here, as any client retries.
func TestNoForeignAddressAtScale(t *testing.T) {
	f := features.New("no Service that uses a claim ever shows a foreign address, at scale and through a driver restart").
		Assess("N Services against an autoAssign pool", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			n := scaleServices(ctx, t)
			// A client without client-go's default limit (5 requests a second), which would make the
			// test, not the cluster, the bottleneck, for the writes and for the cleanup.
			fast := rest.CopyConfig(cluster.Config())
			fast.QPS, fast.Burst = 100, 200
			c, err := client.New(fast, client.Options{Scheme: ipamClient(t).Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			w := c
			ns := tenantNamespace(ctx, t, c, "tenant-scale-park")
			poolWithClass(ctx, t, c, "e2e-scale", ipamv1.ReclaimDelete, scaleClassRange)
			scaleAutoPool(ctx, t, c, ns)

			// The claims the Services name, Bound before any Service exists; one Service in ten is
			// auto-claimed instead (its claim is made for it, named after it).
			autoClaimed := func(i int) bool { return i%10 == 7 }
			named := 0
			claimsStart := time.Now()
			for i := range n {
				if !autoClaimed(i) {
					newTenantClaim(ctx, t, c, ns, fmt.Sprintf("c-%04d", i), "e2e-scale", ipamv1.IPv4)
					named++
				}
			}
			eventually(ctx, t, 10*time.Minute, fmt.Sprintf("%d claims to be Bound", named), func(ctx context.Context) (bool, error) {
				var list ipamv1.IPAddressClaimList
				if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
					return false, err
				}
				bound := 0
				for _, cl := range list.Items {
					if cl.Status.Phase == ipamv1.ClaimBound {
						bound++
					}
				}
				return bound == named, nil
			})
			t.Logf("%d claims Bound in %s", named, time.Since(claimsStart).Round(time.Second))

			rec := recordIngress(ctx, t, ns)
			// The control: a Service that opted out of auto-claim gets an address of the
			// autoAssign pool, so the pool is live and what keeps the others from it is parking.
			control := lbService(ns, "control", map[string]string{ipamv1.AnnotationAutoClaim: "false"}, false)
			if err := c.Create(ctx, control); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 2*time.Minute, "the control Service to get an address of the autoAssign pool", func(ctx context.Context) (bool, error) {
				var s corev1.Service
				err := c.Get(ctx, client.ObjectKeyFromObject(control), &s)
				ips := ingressOf(&s)
				return len(ips) == 1 && inRanges(ips[0], []string{scaleAutoRange}), err
			})
			created := make([]time.Time, n)
			var refused atomic.Int64
			var lastRefusal atomic.Value
			create := func(ctx context.Context, i int) error {
				name := fmt.Sprintf("s-%04d", i)
				ann := map[string]string{claimAnnotation: fmt.Sprintf("c-%04d", i)}
				if autoClaimed(i) {
					ann = map[string]string{classAnnotation: "e2e-scale"}
				}
				viaUpdate := i%10 == 3 || i%20 == 7
				svc := lbService(ns, name, ann, false)
				svc.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
				if viaUpdate {
					svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
						Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: svc.Spec.Ports}}
				}
				// A client retries a write refused while the parking webhook cannot answer, as the
				// tenant cluster's cloud provider does.
				retry := func(op func() error) error {
					deadline := time.Now().Add(3 * time.Minute)
					for {
						err := op()
						if err == nil || apierrors.IsAlreadyExists(err) && !viaUpdate || time.Now().After(deadline) || ctx.Err() != nil {
							return err
						}
						refused.Add(1)
						lastRefusal.Store(err.Error())
						time.Sleep(500 * time.Millisecond)
					}
				}
				created[i] = time.Now()
				if err := retry(func() error { return w.Create(ctx, svc.DeepCopy()) }); err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("creating %s: %w", name, err)
				}
				if !viaUpdate {
					return nil
				}
				return retry(func() error {
					var cur corev1.Service
					if err := w.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cur); err != nil {
						return err
					}
					cur.Spec.Type = corev1.ServiceTypeLoadBalancer
					cur.Spec.AllocateLoadBalancerNodePorts = ptrTo(false)
					if cur.Annotations == nil {
						cur.Annotations = map[string]string{}
					}
					for k, v := range ann {
						cur.Annotations[k] = v
					}
					return w.Update(ctx, &cur)
				})
			}

			// Eight writers; the driver is killed once a third of the Services exist.
			start := time.Now()
			next := make(chan int)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						if err := create(ctx, i); err != nil {
							errs <- err
						}
					}
				}()
			}
			var restarted <-chan error
			for i := range n {
				if i == n/3 {
					restarted = killInBackground(ctx, "metallb-iad")
				}
				next <- i
			}
			close(next)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if err := <-restarted; err != nil {
				t.Fatalf("restarting metallb-iad: %v", err)
			}
			t.Logf("%d Services created in %s; %d writes refused and retried while the driver was down (last: %v)",
				n, time.Since(start).Round(time.Second), refused.Load(), lastRefusal.Load())
			if webhook, err := usesParkingWebhook(kubernetes.NewForConfigOrDie(cluster.Config())); err != nil {
				t.Fatal(err)
			} else if webhook && refused.Load() == 0 {
				t.Error("the webhook parks here, yet no write was refused while the driver was down: the restart did not overlap the writes, and this run proves nothing of the restart")
			}

			// Every Service ends serving exactly its claim's address.
			claimOf := func(i int) string {
				if autoClaimed(i) {
					return fmt.Sprintf("s-%04d", i) // auto-claim: the claim is named after the Service
				}
				return fmt.Sprintf("c-%04d", i)
			}
			want := map[string][]string{}
			eventually(ctx, t, 15*time.Minute, fmt.Sprintf("all %d Services to serve their claim's address", n), func(ctx context.Context) (bool, error) {
				var claims ipamv1.IPAddressClaimList
				if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
					return false, err
				}
				ips := map[string][]string{}
				for _, cl := range claims.Items {
					if cl.Status.Phase == ipamv1.ClaimBound {
						ips[cl.Name] = claimIPs(&cl)
					}
				}
				var svcs corev1.ServiceList
				if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
					return false, err
				}
				served := 0
				for _, s := range svcs.Items {
					i, err := strconv.Atoi(s.Name[2:])
					if err != nil {
						continue
					}
					if w := ips[claimOf(i)]; len(w) > 0 && slices.Equal(ingressOf(&s), sorted(w)) {
						want[s.Name] = w
						served++
					}
				}
				return served == n, nil
			})

			// What the watch saw: never a foreign address; the time to the claim's address.
			var lat []time.Duration
			for i := range n {
				name := fmt.Sprintf("s-%04d", i)
				final := rec.caughtUp(ctx, t, w, ns, name)
				first := time.Time{}
				for _, o := range rec.of(name) {
					if foreign := notIn(o.ips, want[name]); len(foreign) > 0 {
						t.Errorf("%s showed %v (foreign: %v; its claim's: %v) at %s, %s event, rv %s, annotations %v",
							name, o.ips, foreign, want[name], o.at.Format("15:04:05.000"), o.event, o.rv, o.annotations)
						break
					}
					if first.IsZero() && len(o.ips) > 0 {
						first = o.at
					}
				}
				if first.IsZero() {
					t.Errorf("%s: the watch never saw its address (final %v)", name, ingressOf(final))
					continue
				}
				lat = append(lat, first.Sub(created[i]))
			}
			if len(lat) > 0 {
				slices.Sort(lat)
				pct := func(p float64) time.Duration {
					return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Millisecond)
				}
				t.Logf("create to its claim's address over %d Services: p50 %s, p99 %s, max %s", len(lat), pct(0.50), pct(0.99), lat[len(lat)-1].Round(10*time.Millisecond))
			}
			noParkingWarnings(ctx, t, c, ns, start, scaleNames(n))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func scaleNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s-%04d", i)
	}
	return out
}

// scaleAutoPool creates this test's autoAssign: true pool, and at the end deletes the namespace's
// Services before it and waits until MetalLB's pool is gone.
func scaleAutoPool(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	t.Cleanup(func() {
		bg := context.Background()
		_ = c.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		pool := &metav1.PartialObjectMetadata{}
		pool.SetGroupVersionKind(poolGVK)
		eventually(bg, t, 60*time.Second, "the autoAssign pool to be gone", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: metallbNamespace, Name: "e2e-scale-auto"}, pool)
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
	})
	newPool(ctx, t, c, "e2e-scale-auto", nil, scaleAutoRange)
	t.Cleanup(func() {
		// The claims first (their addresses go with them, the class's policy being Delete), so
		// that the driver does not hold again, with a placeholder each, the addresses of the
		// Services deleted next. Services have no collection delete: one by one.
		bg := context.Background()
		// One by one: a collection delete of a thousand claims outlasts the apiserver's request
		// timeout.
		var claims ipamv1.IPAddressClaimList
		if err := c.List(bg, &claims, client.InNamespace(ns)); err != nil {
			t.Errorf("listing the test's claims: %v", err)
		}
		for i := range claims.Items {
			if err := c.Delete(bg, &claims.Items[i]); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting claim %s: %v", claims.Items[i].Name, err)
			}
		}
		var list corev1.ServiceList
		if err := c.List(bg, &list, client.InNamespace(ns)); err != nil {
			t.Errorf("listing the test's Services: %v", err)
		}
		for i := range list.Items {
			if err := c.Delete(bg, &list.Items[i]); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting %s: %v", list.Items[i].Name, err)
			}
		}
		eventually(bg, t, 10*time.Minute, "the test's Services and claims to be gone", func(ctx context.Context) (bool, error) {
			var svcs corev1.ServiceList
			var claims ipamv1.IPAddressClaimList
			if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
				return false, err
			}
			err := c.List(ctx, &claims, client.InNamespace(ns))
			return len(svcs.Items)+len(claims.Items) == 0, err
		})
	})
}

// killInBackground kills a component as a crash would (SIGKILL on the local provider, its pods
// deleted without grace on kind) and, in the background, waits until it is ready again.
func killInBackground(ctx context.Context, name string) <-chan error {
	done := make(chan error, 1)
	if r, ok := cluster.(provider.Restarter); ok {
		go func() { done <- r.Restart(ctx, name) }()
		return done
	}
	local, ok := cluster.(*provider.LocalCluster)
	if !ok {
		done <- errors.New("killing a component needs the local or the kind provider")
		return done
	}
	var p *controlplane.Process
	for _, q := range local.Processes() {
		if q.Spec.Name == name {
			p = q
		}
	}
	if p == nil {
		done <- fmt.Errorf("no process %s", name)
		return done
	}
	before := p.Restarts()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		done <- err
		return done
	}
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		done <- p.WaitReady(wctx, before+1)
	}()
	return done
}
