package driver

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// serviceCIDRReads counts the driver's reads of ServiceCIDRs from the apiserver (lists and gets;
// watches not).
var serviceCIDRReads atomic.Int64

// classReconciles is how many passes the driver's class controller has made.
func classReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "metallb-iad-class" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// The families a class serves follow the cluster's Service CIDRs as they change: an IPv6 pool on
// the IPv4-only test cluster is refused (PoolFamiliesUnserved) until an IPv6 ServiceCIDR is
// added, and refused again once it is gone, without any write of the class or its pool.
func TestClassFollowsTheClusterServiceCIDRs(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	const name = "cidrs-v6"
	no := false
	if err := admin.Create(ctx, &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: name},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"2001:db8:46::/120"}, AutoAssign: &no}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: name}}}); err != nil {
		t.Fatal(err)
	}
	refused := func() (bool, error) {
		c := acceptance(t, name)
		return c != nil && c.Reason == plan.ReasonPoolFamiliesUnserved, nil
	}
	eventually(t, "the IPv6 class to be refused on an IPv4-only cluster", refused)

	cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "tenancy-v6"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"fd00:46::/112"}}}
	if err := admin.Create(ctx, cidr); err != nil {
		t.Fatal(err)
	}
	removeCIDR := func() {
		var now networkingv1.ServiceCIDR
		if err := admin.Get(ctx, client.ObjectKeyFromObject(cidr), &now); err != nil {
			return
		}
		// No controller manager runs here to take the apiserver's finalizer off.
		now.Finalizers = nil
		_ = admin.Update(ctx, &now)
		if err := admin.Delete(ctx, &now); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	t.Cleanup(removeCIDR)
	eventuallyWithin(t, 10*time.Second, "the class to be accepted, serving IPv6, once the cluster has an IPv6 Service CIDR", func() (bool, error) {
		var c ipamv1.IPAddressClass
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
			return false, err
		}
		a := acceptance(t, name)
		return a != nil && a.Reason == plan.ReasonAccepted && slices.Equal(c.Status.Families, []ipamv1.IPFamily{ipamv1.IPv6}), nil
	})
	removeCIDR()
	eventuallyWithin(t, 10*time.Second, "the class to be refused again once the IPv6 Service CIDR is gone", refused)
}

// MetalLB writes a pool's status with every assignment: the class pass reads nothing of it, and
// is not run for it; and a class pass reads the cluster's Service CIDRs from the cache.
func TestPoolStatusWritesMakeNoClassPass(t *testing.T) {
	needAPIServer(t)
	const pool = "status-only"
	newPoolClass(t, pool, "198.18.48.0/29")
	settled(t, "")
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: pool}}
	queued, passes, reads := lostEvents.queuedFor("metallb-iad-class", req), classReconciles(t), serviceCIDRReads.Load()
	for i := range 5 {
		setPoolCount(t, pool, int64(i), int64(8-i))
	}
	settled(t, "")
	if got := lostEvents.queuedFor("metallb-iad-class", req) - queued; got != 0 {
		t.Errorf("the class queued %d times for writes of its pool's status alone", got)
	}
	// A pass for the class itself: the Service CIDRs come from the cache.
	var c ipamv1.IPAddressClass
	if err := admin.Get(context.Background(), client.ObjectKey{Name: pool}, &c); err != nil {
		t.Fatal(err)
	}
	c.Labels = map[string]string{"touched": fmt.Sprint(time.Now().UnixNano())}
	c.Spec.Parameters["touched"] = "yes"
	if err := admin.Update(context.Background(), &c); err != nil {
		t.Fatal(err)
	}
	settled(t, "")
	if got := classReconciles(t) - passes; got == 0 {
		t.Fatal("no class pass for a change of the class's spec")
	}
	if got := serviceCIDRReads.Load() - reads; got != 0 {
		t.Errorf("%d reads of the cluster's Service CIDRs from the apiserver", got)
	}
}
