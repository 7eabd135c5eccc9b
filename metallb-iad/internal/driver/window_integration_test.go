package driver

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// provisioningOfPool lists the provisioning placeholders that ask a pool.
func provisioningOfPool(t *testing.T, pool string) []corev1.Service {
	t.Helper()
	var list corev1.ServiceList
	if err := admin.List(context.Background(), &list, client.InNamespace(testDriverNS),
		client.MatchingLabels{plan.LabelRole: plan.RoleProvisioning}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Service
	for _, s := range list.Items {
		if s.Annotations[metallb.AnnotationAddressPool] == pool && s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	return out
}

// setPoolCount writes MetalLB's count of a pool's IPv4 addresses, as MetalLB's controller does.
func setPoolCount(t *testing.T, name string, assigned, available int64) {
	t.Helper()
	var pool metallb.IPAddressPool
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testMetalLBNS, Name: name}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Status = metallb.IPAddressPoolStatus{AssignedIPv4: assigned, AvailableIPv4: available}
	if err := admin.Status().Update(context.Background(), &pool); err != nil {
		t.Fatal(err)
	}
}

// A waiting claim costs the cluster nothing per claim. On a pool MetalLB counts full, twenty
// stamped claims make one provisioning placeholder between them, not twenty LoadBalancer
// Services with a cluster IP each; when MetalLB counts three free addresses, the oldest claims
// get placeholders at once (woken, not left for their minute's re-check), no more than three,
// and as MetalLB serves them the next ones follow.
func TestWaitingClaimsShareOnePlaceholderPerFullPool(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const pool = "window"
	newNamespace(t, "tenant-window")
	newPoolClass(t, pool, "198.18.46.0/29")
	setPoolCount(t, pool, 8, 0)
	var claims []*ipamv1.IPAddressClaim
	for i := range 20 {
		claims = append(claims, stampAsCore(t, "tenant-window", fmt.Sprintf("w%02d", i), pool, ipamv1.IPv4))
		time.Sleep(10 * time.Millisecond) // distinct creation order
	}
	eventually(t, "a placeholder for the pool", func() (bool, error) { return len(provisioningOfPool(t, pool)) > 0, nil })
	settled(t, "tenant-window")
	consistently(t, 2*time.Second, "one provisioning placeholder for twenty claims on a full pool", func() (bool, error) {
		if got := provisioningOfPool(t, pool); len(got) > 1 {
			t.Fatalf("%d provisioning placeholders for a full pool", len(got))
		}
		return true, nil
	})

	// MetalLB counts three free addresses: at most three placeholders, at once.
	setPoolCount(t, pool, 5, 3)
	eventuallyWithin(t, 10*time.Second, "three placeholders once the pool has room", func() (bool, error) {
		return len(provisioningOfPool(t, pool)) == 3, nil
	})
	settled(t, "tenant-window")
	if got := provisioningOfPool(t, pool); len(got) != 3 {
		t.Fatalf("%d provisioning placeholders with three free addresses", len(got))
	}

	// MetalLB serves them (playing MetalLB): the driver settles them into addresses and holds,
	// and the next claims take the slots.
	served := map[string]bool{}
	for i, s := range provisioningOfPool(t, pool) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("198.18.46.%d", i)}}
		if err := admin.Status().Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		served[s.Annotations[plan.AnnotationClaim]] = true
	}
	setPoolCount(t, pool, 8, 0)
	eventuallyWithin(t, 10*time.Second, "the served placeholders to become holds, and the next claim's placeholder", func() (bool, error) {
		got := provisioningOfPool(t, pool)
		if len(got) != 1 {
			var names []string
			for _, s := range got {
				names = append(names, s.Name+" "+s.Annotations[plan.AnnotationClaim]+" "+fmt.Sprint(ingress(&s)))
			}
			return false, fmt.Errorf("provisioning placeholders: %v", names)
		}
		return !served[got[0].Annotations[plan.AnnotationClaim]], nil
	})
	// The oldest claims went first.
	for i := range 3 {
		if key := "tenant-window/" + claims[i].Name; !served[key] {
			t.Errorf("claim %s, among the three oldest, was not served first: %v", key, served)
		}
	}
	var holds corev1.ServiceList
	if err := admin.List(ctx, &holds, client.InNamespace(testDriverNS), client.MatchingLabels{plan.LabelRole: plan.RoleHold}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range holds.Items {
		if h.Annotations[metallb.AnnotationAddressPool] == pool {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d holds of the pool, want the 3 served placeholders", n)
	}
	_ = metav1.Now
}

// refuseAsMetalLB records MetalLB's AllocationFailed report on a Service, as MetalLB's
// controller does when it cannot assign it.
func refuseAsMetalLB(t *testing.T, s *corev1.Service) {
	t.Helper()
	at := metav1.NewTime(time.Now())
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, GenerateName: "metallb-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: s.Namespace, Name: s.Name, UID: s.UID},
		Reason:         ReasonAllocationFailed, Message: "Failed to allocate IP: no available IPs", Type: corev1.EventTypeWarning,
		FirstTimestamp: at, LastTimestamp: at, Count: 1, Source: corev1.EventSource{Component: "metallb-controller"}}
	if err := admin.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ev) })
}

// MetalLB does not retry an allocation it refused: a placeholder it refused is asked again once
// the pool has room. The pool's count may come back to the very numbers the placeholder was
// refused under (an address taken and given back): the pool's state still moved on, and the
// placeholder is nudged, at once, not after the minute its age would make it wait.
func TestRefusedPlaceholderIsNudgedWhenThePoolReturnsToAnEarlierCount(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const pool = "restamp"
	newNamespace(t, "tenant-restamp")
	newPoolClass(t, pool, "198.18.47.0/30")
	setPoolCount(t, pool, 3, 1)
	stampAsCore(t, "tenant-restamp", "c", pool, ipamv1.IPv4)
	var s corev1.Service
	eventually(t, "a placeholder for the claim", func() (bool, error) {
		got := provisioningOfPool(t, pool)
		if len(got) == 1 {
			s = got[0]
		}
		return len(got) == 1, nil
	})
	recorded := s.Annotations[plan.AnnotationPoolState]
	if recorded == "" {
		t.Fatalf("placeholder %s records no pool state", s.Name)
	}
	// Someone takes the free address before MetalLB gets to the placeholder: refused.
	setPoolCount(t, pool, 4, 0)
	refuseAsMetalLB(t, &s)
	settled(t, "tenant-restamp")
	if got := provisioningOfPool(t, pool); len(got) != 1 || got[0].Annotations[plan.AnnotationNudge] != "" {
		t.Fatalf("placeholder nudged while MetalLB counts the pool full: %v", got)
	}
	// The address comes back: the same count as when the placeholder was made.
	setPoolCount(t, pool, 3, 1)
	eventuallyWithin(t, 10*time.Second, "the refused placeholder to be nudged", func() (bool, error) {
		var now corev1.Service
		if err := admin.Get(ctx, client.ObjectKeyFromObject(&s), &now); err != nil {
			return false, err
		}
		if now.Annotations[plan.AnnotationNudge] == "" {
			return false, nil
		}
		if st := now.Annotations[plan.AnnotationPoolState]; st == recorded {
			return false, fmt.Errorf("nudged, recording the pool state %q it was created in", st)
		}
		return true, nil
	})
}
