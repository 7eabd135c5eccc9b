package driverkit

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// NotCapacityOnly drops the class updates that change nothing but status.capacity (and the
// bookkeeping every write changes: resourceVersion, managedFields). A driver rewrites a class's
// capacity now and then as its backend fills up; that decides nothing for a claim, an address or
// a Service, and must not wake every one of them that watches the class.
func NotCapacityOnly() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*ipamv1.IPAddressClass)
		n, ok2 := e.ObjectNew.(*ipamv1.IPAddressClass)
		if !ok1 || !ok2 {
			return true
		}
		return !CapacityOnly(o, n)
	}}
}

// CapacityOnly: the two versions of a class differ in status.capacity (and resourceVersion and
// managedFields) alone.
func CapacityOnly(before, after *ipamv1.IPAddressClass) bool {
	strip := func(c *ipamv1.IPAddressClass) *ipamv1.IPAddressClass {
		c = c.DeepCopy()
		c.ResourceVersion, c.ManagedFields, c.Status.Capacity = "", nil, nil
		return c
	}
	return equality.Semantic.DeepEqual(strip(before), strip(after))
}
