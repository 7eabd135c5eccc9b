package driverkit

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Acceptance is what one pass over a class's Accepted condition did: the class as read (nil when
// it is gone or belongs to another driver), its condition before the pass, and whether the pass
// wrote a new one.
type Acceptance struct {
	Class  *ipamv1.IPAddressClass
	Before *metav1.Condition
	Wrote  bool
	// CapacityWritten: the write carried a changed status.capacity. CapacityDeferred: the
	// capacity changed, but the verdict deferred it (Verdict.DeferCapacity) and nothing else
	// changed, so nothing was written; the driver comes back to it.
	CapacityWritten, CapacityDeferred bool
}

// AcceptClass is every driver's class pass: it reads the named class and, when the provisioner
// is the class's driver, sets the Accepted condition that verdict decides for it and patches the
// status only when the condition changed. verdict returns the condition's status, reason and
// message; type and observedGeneration are filled in here. An error of verdict is returned
// without a write, so the pass is retried.
func AcceptClass(ctx context.Context, c client.Client, name, provisioner string,
	verdict func(*ipamv1.IPAddressClass) (metav1.Condition, error)) (Acceptance, error) {
	return JudgeClass(ctx, c, name, provisioner, func(class *ipamv1.IPAddressClass) (Verdict, error) {
		cond, err := verdict(class)
		return Verdict{Condition: cond, Families: class.Status.Families, ServedNamespaces: class.Status.ServedNamespaces,
			Capacity: class.Status.Capacity}, err
	})
}

// Verdict is a driver's judgement of a class: its Accepted condition, and what the driver can
// serve, which the core enforces on the class's claims. Families are the families it can
// provision and serve (status.families; empty: not reported, every family is tried);
// ServedNamespaces, when set, the only namespaces its backend serves (status.servedNamespaces).
// Capacity is what the driver counts of its backend (status.capacity; nil: not reported).
type Verdict struct {
	Condition        metav1.Condition
	Families         []ipamv1.IPFamily
	ServedNamespaces *ipamv1.NamespaceSet
	Capacity         []ipamv1.FamilyCapacity
	// DeferCapacity: a change of Capacity alone is not written now (the counts move with every
	// address, and a driver bounds how often it writes them); it goes out with the next write of
	// the status, or when the driver passes again without this flag.
	DeferCapacity bool
}

// JudgeClass is AcceptClass for a driver that also reports what it serves: the condition, the
// families, the served namespaces and the capacity verdict decides are written in one status
// patch, and only when one of them changed (a capacity change alone waits while the verdict
// defers it).
func JudgeClass(ctx context.Context, c client.Client, name, provisioner string,
	verdict func(*ipamv1.IPAddressClass) (Verdict, error)) (Acceptance, error) {
	var class ipamv1.IPAddressClass
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &class); err != nil {
		return Acceptance{}, client.IgnoreNotFound(err)
	}
	if class.Spec.Provisioner != provisioner {
		return Acceptance{}, nil
	}
	v, err := verdict(&class)
	if err != nil {
		return Acceptance{}, err
	}
	cond := v.Condition
	cond.Type, cond.ObservedGeneration = ipamv1.ConditionAccepted, class.Generation
	orig := class.DeepCopy()
	res := Acceptance{Class: &class, Before: meta.FindStatusCondition(orig.Status.Conditions, ipamv1.ConditionAccepted)}
	changed := meta.SetStatusCondition(&class.Status.Conditions, cond)
	if !equality.Semantic.DeepEqual(class.Status.Families, v.Families) {
		class.Status.Families, changed = v.Families, true
	}
	if !equality.Semantic.DeepEqual(class.Status.ServedNamespaces, v.ServedNamespaces) {
		class.Status.ServedNamespaces, changed = v.ServedNamespaces, true
	}
	capacity := !equality.Semantic.DeepEqual(class.Status.Capacity, v.Capacity)
	if capacity && v.DeferCapacity && !changed {
		res.CapacityDeferred = true
		return res, nil
	}
	if capacity {
		class.Status.Capacity, changed, res.CapacityWritten = v.Capacity, true, true
	}
	if !changed {
		return res, nil
	}
	if err := c.Status().Patch(ctx, &class, client.MergeFrom(orig)); err != nil {
		return Acceptance{}, err
	}
	res.Wrote = true
	return res, nil
}
