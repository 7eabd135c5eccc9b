package driver

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Issue 10, defect 10: a Service the chart's admission policy parked (MetalLB's pool annotation
// with autoclaim.ParkingPool) is attached like any other; the pin replaces the parking annotation
// in one patch (MetalLB refuses a pin with another pool), and a Service parked again while
// attached gets its parking annotation removed. The parking annotation is never a ForeignPin.
func TestParkedServiceIsAttached(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "parked", "203.0.113.224/28")
	startFakeMetalLB(t, "parked", netip.MustParsePrefix("203.0.113.224/28"))
	ns := newNamespace(t, "parked")
	const ip = "203.0.113.225"
	boundClaimWithAddress(t, ns, "c", "parked", ip)
	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c", autoclaim.ParkingAnnotation: autoclaim.ParkingPool})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pinnedUnparked := func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		_, parked := s.Annotations[autoclaim.ParkingAnnotation]
		return !parked && s.Annotations[plan.AnnotationPinned] == "true" && s.Annotations[metallb.AnnotationLoadBalancerIPs] == ip, nil
	}
	eventually(t, "the parked Service to be pinned and unparked", pinnedUnparked)
	waitServiceIngress(t, ns, "web", ip)

	// Parked again while attached (the parking value is no protected annotation): MetalLB would
	// refuse the pin with that pool, so the driver takes the parking annotation off again.
	eventually(t, "the Service to be parked again", func() (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return false, err
		}
		s.Annotations[autoclaim.ParkingAnnotation] = autoclaim.ParkingPool
		return admin.Update(ctx, &s) == nil, nil
	})
	eventually(t, "the parking annotation to be removed from the attached Service", pinnedUnparked)

	var s corev1.Service
	if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
		t.Fatal(err)
	}
	if evs := driverEvents(t, ns, string(s.UID), plan.ReasonForeignPin); len(evs) > 0 {
		t.Fatalf("the parking annotation was taken for a foreign pin: %s", evs[0].Note)
	}
}

// Issue 10 review (M2, M3): the driver parks a Service in the same write that unpins it while
// it still names a claim (so MetalLB never serves it from an auto-assigning pool meanwhile, and
// an auto-claimed Service, which the admission policy cannot tell from an old one, is covered
// too); and it takes the parking annotation off a Service that no longer qualifies (here: it
// stops naming a claim and opts out of auto-claim), which the policies never do.
func TestDriverParksOnUnpinAndUnparks(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "unpark", "203.0.113.240/28")
	startFakeMetalLB(t, "unpark", netip.MustParsePrefix("203.0.113.240/28"))
	ns := newNamespace(t, "unpark")
	const ip = "203.0.113.241"
	boundClaimWithAddress(t, ns, "c", "unpark", ip)
	svc := tenantService(ns, "web", map[string]string{ipamv1.AnnotationServiceClaim: "c"})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, "web", ip)
	annotate := func(what string, change func(map[string]string)) {
		t.Helper()
		eventually(t, what, func() (bool, error) {
			var s corev1.Service
			if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
				return false, err
			}
			change(s.Annotations)
			return admin.Update(ctx, &s) == nil, nil
		})
	}
	state := func(want string) func() (bool, error) {
		return func() (bool, error) {
			var s corev1.Service
			if err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
				return false, err
			}
			_, pin := s.Annotations[metallb.AnnotationLoadBalancerIPs]
			switch want {
			case "parked":
				return autoclaim.Parked(&s) && !pin && len(s.Status.LoadBalancer.Ingress) == 0, nil
			default:
				_, parked := s.Annotations[autoclaim.ParkingAnnotation]
				return !parked && !pin, nil
			}
		}
	}
	// Every version of the Service from here: none may be unpinned and unparked while it names a
	// claim (the parking comes in the unpin's own write).
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := watcher.Watch(wctx, &corev1.ServiceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	bare := make(chan string, 16)
	go func() {
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Service)
			if !ok || s.Name != "web" || s.Annotations[ipamv1.AnnotationServiceClaim] == "" {
				continue
			}
			if _, pin := s.Annotations[metallb.AnnotationLoadBalancerIPs]; !pin && !autoclaim.Parked(s) {
				select {
				case bare <- s.ResourceVersion:
				default:
				}
			}
		}
	}()
	// Re-linked to a claim that does not exist: unpinned, parked, the address released.
	annotate("the re-link", func(a map[string]string) { a[ipamv1.AnnotationServiceClaim] = "missing" })
	eventually(t, "the Service to be unpinned and parked", state("parked"))
	select {
	case rv := <-bare:
		t.Fatalf("version %s names a claim and is neither pinned nor parked: the parking did not come with the unpin", rv)
	default:
	}
	// No claim any more, and opted out of auto-claim: nothing parks it, so the driver unparks.
	annotate("the opt-out", func(a map[string]string) {
		delete(a, ipamv1.AnnotationServiceClaim)
		a[ipamv1.AnnotationAutoClaim] = "false"
	})
	eventually(t, "the Service to be unparked", state("unparked"))
}

// Issue 10 review (H1): a Service parked for an auto-claim class of this driver, for which no
// claim came (here no core runs), is unparked once no such class is marked any more: class
// events look at the parked Services again, so it does not wait for an event of its own.
func TestParkedServiceFollowsTheAutoClaimClass(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "markpark", "203.0.113.248/29")
	ns := newNamespace(t, "markpark")
	mark := func(on bool) {
		t.Helper()
		eventually(t, "the class mark to change", func() (bool, error) {
			var c ipamv1.IPAddressClass
			if err := admin.Get(ctx, client.ObjectKey{Name: "markpark"}, &c); err != nil {
				return false, err
			}
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			if on {
				c.Annotations[ipamv1.AnnotationAutoClaimClass] = "true"
			} else {
				delete(c.Annotations, ipamv1.AnnotationAutoClaimClass)
			}
			return admin.Update(ctx, &c) == nil, nil
		})
	}
	mark(true)
	t.Cleanup(func() { mark(false) })
	svc := tenantService(ns, "plain", map[string]string{autoclaim.ParkingAnnotation: autoclaim.ParkingPool})
	if err := admin.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	parked := func(want bool) func() (bool, error) {
		return func() (bool, error) {
			var s corev1.Service
			err := admin.Get(ctx, client.ObjectKeyFromObject(svc), &s)
			return autoclaim.Parked(&s) == want, err
		}
	}
	consistently(t, 2*time.Second, "the Service to stay parked while auto-claim may serve it", parked(true))
	mark(false)
	eventually(t, "the Service to be unparked once no class of this driver is marked", parked(false))
}

// Auto-claim makes no claim from a class for a namespace the class does not serve: a Service
// there is not parked for it. The driver takes the parking annotation off such a Service (an
// admission that parked it without reading the class's namespaceSelector), and leaves parked one
// in a namespace the class selects.
func TestServiceOfANamespaceTheClassDoesNotServeIsNotParked(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "gold-only", "203.0.113.208/29")
	var class ipamv1.IPAddressClass
	if err := admin.Get(ctx, client.ObjectKey{Name: "gold-only"}, &class); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(class.DeepCopy())
	class.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	class.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	if err := admin.Patch(ctx, &class, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var c ipamv1.IPAddressClass
		if err := admin.Get(context.Background(), client.ObjectKey{Name: "gold-only"}, &c); err == nil {
			p := client.MergeFrom(c.DeepCopy())
			delete(c.Annotations, ipamv1.AnnotationAutoClaimClass)
			_ = admin.Patch(context.Background(), &c, p)
		}
	})
	plain := newNamespace(t, "parking-plain")
	gold := newNamespace(t, "parking-gold")
	var ns corev1.Namespace
	if err := admin.Get(ctx, client.ObjectKey{Name: gold}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels["tier"] = "gold"
	if err := admin.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	parked := map[string]string{autoclaim.ParkingAnnotation: autoclaim.ParkingPool}
	for _, n := range []string{plain, gold} {
		if err := admin.Create(ctx, tenantService(n, "web", parked)); err != nil {
			t.Fatal(err)
		}
	}
	isParked := func(n string) (bool, error) {
		var s corev1.Service
		if err := admin.Get(ctx, client.ObjectKey{Namespace: n, Name: "web"}, &s); err != nil {
			return false, err
		}
		_, ok := s.Annotations[autoclaim.ParkingAnnotation]
		return ok, nil
	}
	eventually(t, "the Service of the namespace the class does not serve to be unparked", func() (bool, error) {
		p, err := isParked(plain)
		return !p, err
	})
	settled(t, gold)
	if p, err := isParked(gold); err != nil || !p {
		t.Fatalf("the Service of the namespace the class serves was unparked (%v)", err)
	}
}
