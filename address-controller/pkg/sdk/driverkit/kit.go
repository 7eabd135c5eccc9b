package driverkit

import (
	"cmp"
	"context"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
)

// Reasons shared by drivers, for class conditions and events. A driver adds its own next to the
// policy that uses them.
const (
	// ReasonAccepted: the driver accepts the class's parameters.
	ReasonAccepted = "Accepted"
	// ReasonClassDeleting: a class being deleted gets no new addresses.
	ReasonClassDeleting = "ClassDeleting"
	// ReasonProvisioned (event): the driver created an address for a claim.
	ReasonProvisioned = "Provisioned"
	// ReasonTornDown (event): the driver released a deleted address.
	ReasonTornDown = "TornDown"
)

// NeedsProvisioning reports whether a claim waits for the named driver to provision: the core
// stamped it with the driver's name and the class it resolved (ClaimClass), it names no
// particular address (the core binds that one or says why not), and it is neither settled nor
// going.
func NeedsProvisioning(claim *ipamv1.IPAddressClaim, provisioner string) bool {
	return claim.Annotations[ipamv1.AnnotationProvisioner] == provisioner &&
		ClaimClass(claim) != "" && claim.Spec.AddressName == "" &&
		claim.DeletionTimestamp == nil &&
		claim.Status.Phase != ipamv1.ClaimBound &&
		claim.Status.Phase != ipamv1.ClaimLost
}

// ClaimClass names the class a driver provisions a claim from: the class its spec names, else the
// one the core recorded in its status, else the one the core resolved when it stamped the claim
// (AnnotationResolvedClass: the core leaves the status of a claim that waits only for its driver
// unwritten for a while, see docs/design.md#the-write-budget). "" when the core resolved none yet.
// A driver never resolves a default class itself: the core's resolution is sticky, the current
// default may have changed since.
func ClaimClass(claim *ipamv1.IPAddressClaim) string {
	return cmp.Or(claim.Spec.ClassName, claim.Status.ClassName, claim.Annotations[ipamv1.AnnotationResolvedClass])
}

// ClassOfClaim reads the class ClaimClass names for a claim; nil when it names none or the class
// does not exist.
func ClassOfClaim(ctx context.Context, r client.Reader, claim *ipamv1.IPAddressClaim) (*ipamv1.IPAddressClass, error) {
	name := ClaimClass(claim)
	if name == "" {
		return nil, nil
	}
	var class ipamv1.IPAddressClass
	if err := r.Get(ctx, types.NamespacedName{Name: name}, &class); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &class, nil
}

// ClassProvisions reports whether the named driver may create new addresses for a class: it is
// the class's driver, the class is Accepted, and the class is not being deleted.
func ClassProvisions(class *ipamv1.IPAddressClass, provisioner string) bool {
	return class != nil && class.Spec.Provisioner == provisioner && class.DeletionTimestamp == nil &&
		meta.IsStatusConditionTrue(class.Status.Conditions, ipamv1.ConditionAccepted)
}

// BoundTo reports whether an address's claimRef names the claim: same namespace and name, and
// the claim's uid or none yet (the core completes it).
func BoundTo(a *ipamv1.IPAddress, claim *ipamv1.IPAddressClaim) bool {
	ref := a.Spec.ClaimRef
	return ref != nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name &&
		(ref.UID == "" || ref.UID == claim.UID)
}

// FamiliesPresent returns the families for which one of addrs is bound to the claim.
func FamiliesPresent(claim *ipamv1.IPAddressClaim, addrs []ipamv1.IPAddress) map[ipamv1.IPFamily]bool {
	have := map[ipamv1.IPFamily]bool{}
	for i := range addrs {
		a := &addrs[i]
		if a.DeletionTimestamp != nil || !BoundTo(a, claim) {
			continue
		}
		if ip, err := ipamv1.ParseCanonical(a.Spec.Address); err == nil {
			have[ipamv1.FamilyOf(ip)] = true
		}
	}
	return have
}

// MissingFamilies returns the families a claim requests that have is missing, in the claim's
// order (IPv4 before IPv6).
func MissingFamilies(claim *ipamv1.IPAddressClaim, have map[ipamv1.IPFamily]bool) []ipamv1.IPFamily {
	var out []ipamv1.IPFamily
	for _, f := range claim.Spec.Family.Families() {
		if !have[f] {
			out = append(out, f)
		}
	}
	return out
}

// PreBoundAddress is the IPAddress a driver creates for a claim: named after the IP (the name is
// the lock on it), pre-bound to the claim with its uid, the class's reclaim policy (Retain when
// unset), and the driver's teardown finalizer.
func PreBoundAddress(ip netip.Addr, class *ipamv1.IPAddressClass, claim *ipamv1.IPAddressClaim, finalizer string) *ipamv1.IPAddress {
	policy := class.Spec.ReclaimPolicy
	if policy == "" {
		policy = ipamv1.ReclaimRetain
	}
	return &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(ip), Finalizers: []string{finalizer}},
		Spec: ipamv1.IPAddressSpec{
			Address: ip.String(), ClassName: class.Name, ReclaimPolicy: policy,
			ClaimRef: &ipamv1.ClaimReference{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
}

// ClaimOfAddress maps an IPAddress event to the claim its claimRef names.
func ClaimOfAddress(_ context.Context, o client.Object) []reconcile.Request {
	a, ok := o.(*ipamv1.IPAddress)
	if !ok || a.Spec.ClaimRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: a.Spec.ClaimRef.Namespace, Name: a.Spec.ClaimRef.Name}}}
}

// ClaimsWaitingForClass maps a class event to the claims waiting for that class, through the
// index.ClaimWaitingForClass field index (register it with index.Setup).
func ClaimsWaitingForClass(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		reqs, _ := index.ClaimsWaitingFor(ctx, r, o.GetName())
		return reqs
	}
}

// AddressesOfClass maps a class event to the addresses of that class, through the
// index.AddressByClass field index.
func AddressesOfClass(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var addrs ipamv1.IPAddressList
		if err := r.List(ctx, &addrs, client.MatchingFields{index.AddressByClass: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		return Requests(addrs.Items)
	}
}

// Requests turns a list's items into reconcile requests.
func Requests[T any, PT interface {
	*T
	client.Object
}](items []T) []reconcile.Request {
	reqs := make([]reconcile.Request, 0, len(items))
	for i := range items {
		o := PT(&items[i])
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
	}
	return reqs
}

// EnsureFinalizer adds a finalizer with a merge patch (optimistic lock) unless it is there. It
// reports whether it wrote.
func EnsureFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(obj, finalizer)
	return true, c.Patch(ctx, obj, patch)
}

// RemoveFinalizer removes a finalizer with a merge patch (optimistic lock) when it is there; an
// object already gone is not an error. It reports whether it wrote.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (bool, error) {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, finalizer)
	return true, client.IgnoreNotFound(c.Patch(ctx, obj, patch))
}

// TeardownMayStart reports whether a driver may release a deleted address: it is being deleted
// and the core's address-protection finalizer is gone. While the core still protects the address
// (it is Bound to a live claim) the driver keeps holding or serving the IP as before.
func TeardownMayStart(a *ipamv1.IPAddress) bool {
	return a.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(a, ipamv1.FinalizerAddress)
}

// MaxRecheck caps the delay of a scheduled re-check (about a minute:
// docs/design.md#nothing-waits-on-an-event-alone).
const MaxRecheck = time.Minute

// Recheck is the delay before looking again at an object that has been waiting since since:
// a quarter of the time it has waited, at least min, at most MaxRecheck. An object left waiting
// is re-checked on this schedule even when no event arrives.
func Recheck(since, now time.Time, min time.Duration) time.Duration {
	d := now.Sub(since) / 4
	if d < min {
		d = min
	}
	if d > MaxRecheck {
		d = MaxRecheck
	}
	return d
}

// Sooner returns the shorter of two positive delays (zero meaning none).
func Sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
