package driver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Helpers for the integration tests: they play the core (claims' status, the address-protection
// finalizer) and MetalLB (fakeMetalLB: assigns pinned IPs and first-free IPs of a pool to the
// Services of one test's pool, as MetalLB's controller does, refusing an IP another Service
// holds). The driver under test is the real one, on a real apiserver.

// newPoolClass creates a manual pool and an accepted class of the driver naming it.
func newPoolClass(t *testing.T, name string, addresses ...string) {
	t.Helper()
	ctx := context.Background()
	no := false
	if err := admin.Create(ctx, &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: name},
		Spec: metallb.IPAddressPoolSpec{Addresses: addresses, AutoAssign: &no}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: name}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "class "+name+" to be accepted", func() (bool, error) {
		c := acceptance(t, name)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
}

// boundClaimWithAddress plays the core after a provisioning: an IPAddress bound to a Bound claim,
// protected by the core's finalizer (and the driver's, as the driver creates them).
func boundClaimWithAddress(t *testing.T, ns, name, class, ip string) (*ipamv1.IPAddressClaim, *ipamv1.IPAddress) {
	t.Helper()
	ctx := context.Background()
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: ipamv1.FamilyOf(netip.MustParseAddr(ip))}}
	if err := admin.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	addr := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip)),
		Finalizers: []string{ipamv1.FinalizerAddress, plan.Finalizer}},
		Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: class, ReclaimPolicy: ipamv1.ReclaimRetain,
			ClaimRef: &ipamv1.ClaimReference{Namespace: ns, Name: name, UID: claim.UID}}}
	if err := admin.Create(ctx, addr); err != nil {
		t.Fatal(err)
	}
	claim.Status = ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound, ClassName: class,
		Addresses: []ipamv1.ClaimedAddress{{Name: addr.Name, Address: ip, Family: ipamv1.FamilyOf(netip.MustParseAddr(ip))}}}
	if err := admin.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return claim, addr
}

// releaseByCore removes the core's finalizer, as the core does once the address is not bound to
// a live claim.
func releaseByCore(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "the core's finalizer to go from "+name, func() (bool, error) {
		var a ipamv1.IPAddress
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &a); err != nil {
			return client.IgnoreNotFound(err) == nil, nil
		}
		a.Finalizers = slices.DeleteFunc(a.Finalizers, func(f string) bool { return f == ipamv1.FinalizerAddress })
		return true, admin.Update(ctx, &a)
	})
}

func getAddress(t *testing.T, name string) *ipamv1.IPAddress {
	t.Helper()
	var a ipamv1.IPAddress
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

func addressCondition(name, typ string) (*metav1.Condition, error) {
	var a ipamv1.IPAddress
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &a); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(a.Status.Conditions, typ), nil
}

// waitHeldByPlaceholder waits until the address is held (Held=True) by a placeholder serving ip.
func waitHeldByPlaceholder(t *testing.T, name, ip string) {
	t.Helper()
	eventually(t, name+" to be held by a placeholder", func() (bool, error) {
		a := getAddress(t, name)
		if a.Status.AttachedTo != nil || !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionHeld) {
			return false, nil
		}
		s, err := getHold(t, name)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return slices.Contains(ingress(s), ip), nil
	})
}

// getHold reads the hold of the address named addr from the apiserver.
func getHold(t *testing.T, addr string) (*corev1.Service, error) {
	t.Helper()
	var s corev1.Service
	err := admin.Get(context.Background(), client.ObjectKey{Namespace: testDriverNS, Name: plan.HoldName(addr)}, &s)
	return &s, err
}

func ingress(s *corev1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

func tenantService(ns, name string, annotations map[string]string) *corev1.Service {
	no := false
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: &no,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
}

func waitServiceIngress(t *testing.T, ns, name string, want ...string) *corev1.Service {
	t.Helper()
	var s corev1.Service
	eventually(t, fmt.Sprintf("Service %s/%s to have ingress %v", ns, name, want), func() (bool, error) {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return false, err
		}
		return slices.Equal(ingress(&s), want), nil
	})
	return &s
}

// driverEvents lists the events the driver emitted about an object (by uid), of a reason.
func driverEvents(t *testing.T, ns string, uid string, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		// The driver's own: the apiserver's repair loops report on Services too (such as
		// ClusterIPNotAllocated on a loaded machine).
		if string(e.Regarding.UID) == uid && (reason == "" || e.Reason == reason) && e.ReportingController == "metallb-iad" {
			out = append(out, e)
		}
	}
	return out
}

// consistently checks cond every 20ms for d; it fails the test at the first false.
func consistently(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	envtestutil.Consistently(t, d, 20*time.Millisecond, what, cond)
}

// fakeMetalLB plays MetalLB's controller for the Services that name one pool (address-pool
// annotation) or pin an IP of its prefix: a pin gets its IPs unless another Service holds one;
// a pool request gets the first free IP; a Service keeps its current IP while it stays valid;
// an IP leaves a Service whose pin no longer names it.
type fakeMetalLB struct {
	pool   string
	prefix netip.Prefix
	stop   chan struct{}
	done   sync.WaitGroup
	// delay is how long a change a Service asks for waits before it is made (the real
	// MetalLB took about 0.6 s here under load); pending records since when.
	delay   time.Duration
	pending map[string]pendingChange
}

type pendingChange struct {
	want  string
	since time.Time
}

func startFakeMetalLB(t *testing.T, pool string, prefix netip.Prefix) {
	startSlowFakeMetalLB(t, pool, prefix, 0)
}

func startSlowFakeMetalLB(t *testing.T, pool string, prefix netip.Prefix, delay time.Duration) {
	f := &fakeMetalLB{pool: pool, prefix: prefix, stop: make(chan struct{}), delay: delay, pending: map[string]pendingChange{}}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		for {
			select {
			case <-f.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			f.pass()
		}
	}()
	t.Cleanup(func() { close(f.stop); f.done.Wait() })
}

func (f *fakeMetalLB) mine(s *corev1.Service) bool {
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || plan.ForeignClass(s) {
		return false // (MetalLB leaves a Service of another load-balancer class alone)
	}
	if s.Annotations[metallb.AnnotationAddressPool] == f.pool {
		return true
	}
	for _, ip := range plan.PinIPs(s) {
		if f.prefix.Contains(ip) {
			return true
		}
	}
	for _, ip := range plan.IngressIPs(s) {
		if f.prefix.Contains(ip) {
			return true
		}
	}
	return false
}

func (f *fakeMetalLB) pass() {
	ctx := context.Background()
	var list corev1.ServiceList
	if err := admin.List(ctx, &list); err != nil {
		return
	}
	used := map[netip.Addr][]*corev1.Service{}
	var mine []*corev1.Service
	for i := range list.Items {
		s := &list.Items[i]
		if !f.mine(s) {
			continue
		}
		mine = append(mine, s)
		for _, ip := range plan.IngressIPs(s) {
			used[ip] = append(used[ip], s)
		}
	}
	// free says whether s may have ip, as MetalLB's allocator says (checkSharing): no other
	// Service has it, or every one that has it shares s's sharing and backend keys and none of
	// its ports.
	free := func(ip netip.Addr, s *corev1.Service) bool {
		for _, o := range used[ip] {
			if o.UID == s.UID {
				continue
			}
			if !fakeSharing(o, s) {
				return false
			}
		}
		return true
	}
	take := func(ip netip.Addr, s *corev1.Service) {
		used[ip] = append(slices.DeleteFunc(used[ip], func(o *corev1.Service) bool { return o.UID == s.UID }), s)
	}
	for _, s := range mine {
		key := s.Namespace + "/" + s.Name
		cur := plan.IngressIPs(s)
		want := cur
		if pin := plan.PinIPs(s); len(pin) > 0 {
			want = pin
			for _, ip := range pin {
				if !free(ip, s) {
					want = nil // AllocationFailed: the IP is in use
				}
			}
			if want == nil {
				if len(cur) > 0 && !plan.SameIPs(cur, pin) {
					want = []netip.Addr{} // the current IP is no longer valid for it
				} else {
					continue
				}
			}
		} else if slices.ContainsFunc(cur, func(ip netip.Addr) bool { return !free(ip, s) }) {
			// MetalLB checks a Service's current IP again at each look: one it may no longer
			// share (its sharing key gone, while the hold keeps the IP under it) is cleared.
			want = []netip.Addr{}
		} else if len(cur) == 0 && s.Annotations[metallb.AnnotationAddressPool] == f.pool {
			for ip := f.prefix.Masked().Addr(); f.prefix.Contains(ip); ip = ip.Next() {
				if len(used[ip]) == 0 {
					want = []netip.Addr{ip}
					break
				}
			}
		}
		if plan.SameIPs(cur, want) {
			delete(f.pending, key)
			continue
		}
		if f.delay > 0 {
			w := fmt.Sprint(want)
			if pc, ok := f.pending[key]; !ok || pc.want != w {
				f.pending[key] = pendingChange{want: w, since: time.Now()}
				continue
			} else if time.Since(pc.since) < f.delay {
				continue
			}
			delete(f.pending, key)
		}
		for _, ip := range cur {
			used[ip] = slices.DeleteFunc(used[ip], func(o *corev1.Service) bool { return o.UID == s.UID })
		}
		s.Status.LoadBalancer.Ingress = nil
		for _, ip := range want {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
			take(ip, s)
		}
		_ = admin.Status().Update(ctx, s)
	}
}

// fakeSharing says whether MetalLB lets two Services have one IP: equal, non-empty sharing keys,
// equal backend keys (the selector under externalTrafficPolicy Local), no port in common.
func fakeSharing(a, b *corev1.Service) bool {
	ka, kb := a.Annotations[metallb.AnnotationAllowSharedIP], b.Annotations[metallb.AnnotationAllowSharedIP]
	if ka == "" || ka != kb {
		return false
	}
	backend := func(s *corev1.Service) string {
		if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			return fmt.Sprint(s.Spec.Selector)
		}
		return ""
	}
	if backend(a) != backend(b) {
		return false
	}
	for _, pa := range a.Spec.Ports {
		for _, pb := range b.Spec.Ports {
			if pa.Port == pb.Port && pa.Protocol == pb.Protocol {
				return false
			}
		}
	}
	return true
}

// playCorePhases plays the core's phase writes: each address of the class gets phase Bound (a
// status patch under a resourceVersion precondition, as the core makes it) as soon as it is
// seen, until the returned stop is called.
func playCorePhases(t *testing.T, class string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var list ipamv1.IPAddressList
			if err := admin.List(ctx, &list); err == nil {
				for i := range list.Items {
					a := &list.Items[i]
					if a.Spec.ClassName != class || a.Status.Phase == ipamv1.AddressBound {
						continue
					}
					patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
					a.Status.Phase = ipamv1.AddressBound
					_ = admin.Status().Patch(ctx, a, patch)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}

var _ = wait.ForeverTestTimeout

// fakeMetalLBClass makes a pool and class named name over prefix, served by the MetalLB
// stand-in, and a tenant namespace of the same name.
func fakeMetalLBClass(t *testing.T, name, prefix string) (ns string) {
	t.Helper()
	newPoolClass(t, name, prefix)
	startFakeMetalLB(t, name, netip.MustParsePrefix(prefix))
	return newNamespace(t, name)
}

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// attachedService creates a tenant Service naming the claim and waits until it serves ip.
func attachedService(t *testing.T, ns, name, claim, ip string) *corev1.Service {
	t.Helper()
	s := tenantService(ns, name, map[string]string{ipamv1.AnnotationServiceClaim: claim})
	if err := admin.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitServiceIngress(t, ns, name, ip)
	eventually(t, "the address to be attached to "+name, func() (bool, error) {
		a := getAddress(t, ipamv1.AddressName(netip.MustParseAddr(ip)))
		return a.Status.AttachedTo != nil && a.Status.AttachedTo.Name == name, nil
	})
	return s
}

// seriesCount is how many times an event was said: once, or its series' count.
func seriesCount(evs []eventsv1.Event) int {
	n := 0
	for _, e := range evs {
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}
