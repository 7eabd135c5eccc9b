package driver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

// linkedClaim applies the link rule to a Service and returns the claim it links to, in any
// phase. why says what stands in the way when there is none ("" when the Service simply links
// to nothing).
func (d *Driver) linkedClaim(ctx context.Context, svc *corev1.Service) (*ipamv1.IPAddressClaim, string, error) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil || svc.Labels[plan.LabelRole] != "" {
		return nil, "", nil
	}
	name, auto := plan.LinkedClaim(svc)
	var claim ipamv1.IPAddressClaim
	if err := d.client.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: name}, &claim); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, "", err
		}
		if auto {
			return nil, "", nil
		}
		return nil, fmt.Sprintf("IPAddressClaim %s/%s does not exist", svc.Namespace, name), nil
	}
	if claim.DeletionTimestamp != nil || (auto && !plan.AutoClaimOf(&claim, svc)) {
		return nil, "", nil
	}
	return &claim, "", nil
}

func (d *Driver) attachSnapshot(ctx context.Context, svc *corev1.Service) (plan.AttachView, error) {
	v := plan.AttachView{Svc: svc, Now: d.now(), Placeholder: d.ownService(svc)}
	if v.Placeholder {
		return v, nil
	}
	var err error
	if v.AttachedHere, err = d.attachedHere(ctx, svc); err != nil {
		return v, err
	}
	claim, why, err := d.linkedClaim(ctx, svc)
	if err != nil {
		return v, err
	}
	if v.Park, err = d.parkingWanted(ctx, svc, claim != nil); err != nil {
		return v, err
	}
	if claim == nil {
		v.Why = why
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			v.Reserved, err = d.reservedRequested(ctx, svc)
		}
		return v, err
	}
	v.Claim = claim
	// This driver's own recent writes the cache may not show yet.
	if pin, ok := d.expect.Pending(pinKey(string(svc.UID)), v.Now); ok {
		if svc.Annotations[plan.AnnotationPinned] == "true" && svc.Annotations[metallb.AnnotationLoadBalancerIPs] == pin {
			d.expect.Observed(pinKey(string(svc.UID)))
		} else {
			v.Pinned = pin
		}
	}
	v.Attached = map[string]bool{}
	v.Servable = map[string]bool{}
	v.Excluded = map[string]string{}
	v.Elsewhere = map[string]bool{}
	for _, ca := range claim.Status.Addresses {
		if err := d.snapshotClaimAddress(ctx, &v, ca.Name); err != nil {
			return v, err
		}
	}
	return v, nil
}

// attachedHere are the addresses (read fresh) whose AttachedTo names the Service.
func (d *Driver) attachedHere(ctx context.Context, svc *corev1.Service) ([]*ipamv1.IPAddress, error) {
	var attached ipamv1.IPAddressList
	if err := d.client.List(ctx, &attached, client.MatchingFields{indexAttachedTo: svc.Namespace + "/" + svc.Name}); err != nil {
		return nil, err
	}
	var out []*ipamv1.IPAddress
	for i := range attached.Items {
		a, err := d.freshAddress(ctx, &attached.Items[i])
		if apierrors.IsNotFound(err) {
			continue // gone since the cache listed it: not attached here, and no reason to detach
		} else if err != nil {
			return out, err
		}
		if plan.AttachedTo(a.Status.AttachedTo, svc) {
			out = append(out, a)
		}
	}
	return out, nil
}

// snapshotClaimAddress reads one address the claim lists into the view: the address (nil when
// the cache does not show it), this driver's pending attach of it, whether its class is this
// driver's and its pool admits the Service, whether another Service it is attached to exists,
// and its holds.
func (d *Driver) snapshotClaimAddress(ctx context.Context, v *plan.AttachView, name string) error {
	svc := v.Svc
	var cached ipamv1.IPAddress
	err := d.client.Get(ctx, types.NamespacedName{Name: name}, &cached)
	var a *ipamv1.IPAddress
	if err == nil {
		a, err = d.freshAddress(ctx, &cached)
	}
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		v.Addrs = append(v.Addrs, nil)
		return nil
	}
	v.Addrs = append(v.Addrs, a)
	if uid, ok := d.expect.Pending(attachKey(a.Name), v.Now); ok {
		if at := a.Status.AttachedTo; at != nil && string(at.UID) == uid {
			d.expect.Observed(attachKey(a.Name))
		} else {
			v.Attached[a.Name] = uid == string(svc.UID)
		}
	}
	var class ipamv1.IPAddressClass
	if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err == nil {
		v.Servable[a.Name] = class.Spec.Provisioner == plan.Provisioner
		if v.Servable[a.Name] {
			why, err := d.allocationVerdict(ctx, plan.ParseClassParams(&class).Pool, svc)
			if err != nil {
				return err
			}
			if why != "" {
				v.Excluded[a.Name] = why
			}
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if at := a.Status.AttachedTo; at != nil && !(at.Namespace == svc.Namespace && at.Name == svc.Name) {
		var other corev1.Service
		err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &other)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		v.Elsewhere[a.Name] = err == nil && (at.UID == "" || other.UID == at.UID)
	}
	holds, err := d.holdsOf(ctx, a.Name)
	if err != nil {
		return err
	}
	v.Holds = append(v.Holds, holds...)
	return nil
}

// allocationVerdict says why the pool's spec.serviceAllocation does not admit the Service
// (AllocationExcludes), or "" when it does or the pool is missing (its addresses are Lost then,
// which the address reconciler reports). The namespaces come from the driver's cache of their
// metadata, read only for a pool that selects namespaces by label.
func (d *Driver) allocationVerdict(ctx context.Context, poolName string, svc *corev1.Service) (string, error) {
	if poolName == "" {
		return "", nil
	}
	var pool metallb.IPAddressPool
	if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: poolName}, &pool); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	alloc := pool.Spec.ServiceAllocation
	if alloc == nil {
		return "", nil
	}
	var namespaces []plan.NamespaceLabels
	if len(alloc.NamespaceSelectors) > 0 {
		list := namespaceMetadataList()
		if err := d.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return "", err
		}
		for _, ns := range list.Items {
			namespaces = append(namespaces, plan.NamespaceLabels{Name: ns.Name, Labels: ns.Labels})
		}
	}
	if len(alloc.ServiceSelectors) > 0 && d.ServiceLabels.Stale(svc) {
		// The cache cut the Service's labels before a pool selected by one of them: its labels
		// are read from the apiserver.
		var fresh corev1.Service
		if err := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &fresh); err != nil {
			return "", err
		}
		withLabels := *svc
		withLabels.Labels = fresh.Labels
		svc = &withLabels
	}
	return plan.AllocationExcludes(&pool, namespaces, svc), nil
}

// namespaceMetadataList lists namespaces from the driver's cache of their metadata (the one the
// Service controller watches for label changes).
func namespaceMetadataList() *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	return list
}

// reservedRequested are the addresses of this driver (cached) whose IP the Service requests by
// other means than a claim, that are not attached to it.
func (d *Driver) reservedRequested(ctx context.Context, svc *corev1.Service) ([]*ipamv1.IPAddress, error) {
	var out []*ipamv1.IPAddress
	for _, ip := range plan.RequestedIPs(svc) {
		var a ipamv1.IPAddress
		if err := d.client.Get(ctx, types.NamespacedName{Name: ipamv1.AddressName(ip)}, &a); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if a.Spec.Address != ip.String() || plan.AttachedTo(a.Status.AttachedTo, svc) {
			continue
		}
		var class ipamv1.IPAddressClass
		if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if class.Spec.Provisioner == plan.Provisioner {
			out = append(out, &a)
		}
	}
	return out, nil
}

// ParkingWanted reads the classes ParkingWanted needs, only when they can matter.
func (d *Driver) parkingWanted(ctx context.Context, svc *corev1.Service, linked bool) (bool, error) {
	if d.NoParking {
		return false, nil
	}
	if !plan.Parkable(svc) || linked || svc.Annotations[ipamv1.AnnotationServiceClaim] != "" {
		return plan.ParkingWanted(svc, linked, nil, nil), nil
	}
	var classes ipamv1.IPAddressClassList
	if err := d.client.List(ctx, &classes, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	var nsLabels map[string]string
	if parking.NeedsNamespaceLabels(classes.Items) {
		// A namespace made just before its first Service may not be in the cache yet: taken for
		// one without labels, a Service the admission rules parked (they read the namespace
		// from the apiserver) would be unparked here, and MetalLB could serve it an address of
		// another pool. A miss is read from the apiserver.
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		err := d.client.Get(ctx, types.NamespacedName{Name: svc.Namespace}, ns)
		if apierrors.IsNotFound(err) {
			err = d.reader.Get(ctx, types.NamespacedName{Name: svc.Namespace}, ns)
		}
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		nsLabels = ns.Labels
	}
	return plan.ParkingWanted(svc, linked, classes.Items, nsLabels), nil
}
