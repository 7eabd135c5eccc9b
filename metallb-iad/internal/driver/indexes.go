package driver

import (
	"context"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/claimcache"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

const (
	// The Service indexes are cluster-wide (see setupIndexes): list them without a namespace.

	// indexHoldOf keys a hold placeholder by the IPAddress it holds.
	indexHoldOf = "metallb-iad.holdOf"
	// indexReleaseOf keys a release Service by the IPAddress whose IP it frees.
	indexReleaseOf = "metallb-iad.releaseOf"
	// indexProvisioningForKey keys a provisioning placeholder by its claim's "namespace/name".
	indexProvisioningForKey = "metallb-iad.provisioningForKey"
	// indexServiceLink keys a LoadBalancer Service by the "namespace/claim" it links to.
	indexServiceLink = "metallb-iad.serviceLink"
	// indexAttachedTo keys an IPAddress by the "namespace/name" of the Service it is attached to.
	indexAttachedTo = "metallb-iad.attachedTo"
	// indexClassPool keys a class of this driver by its pool parameter.
	indexClassPool = "metallb-iad.classPool"
	// indexIngressIP keys a Service by each IP of its load-balancer ingress.
	indexIngressIP = "metallb-iad.ingressIP"
	// indexExternalIP keys a Service by each IP of its spec.externalIPs.
	indexExternalIP = "metallb-iad.externalIP"
	// indexRequestedIP keys a Service by each IP it requests other than through the driver's
	// pin (RequestedIPs): a Service that requests a reserved IP is told (ReservedAddressRequested).
	indexRequestedIP = "metallb-iad.requestedIP"
	// indexParked keys a parked Service (autoclaim.ParkingPool) by "true".
	indexParked = "metallb-iad.parked"
	// indexEventAbout keys an Event (the cache holds only MetalLB's AllocationFailed reports, see
	// CacheByObject) by the uid of the object it is about.
	indexEventAbout = "metallb-iad.eventAbout"
)

// ReasonAllocationFailed is the reason of MetalLB's report that it could not assign a Service.
const ReasonAllocationFailed = "AllocationFailed"

// CacheByObject is the driver's cache settings for the manager.
//
// Of the Events, only MetalLB's AllocationFailed reports, in every namespace, reduced to what the
// driver reads (stripEvent): those on the placeholders decide when a waiting placeholder is
// nudged, and those on a tenant's attached Service tell an IP MetalLB keeps for a deleted Service
// (plan_kept.go). Reading them from the apiserver instead made every look a list the apiserver
// filters from every Event of the namespace (MetalLB records one per Service it serves): at
// 10,000 claims the apiserver's work per pass grew with the number of claims, and during an
// attach of 10,000 Services MetalLB took minutes to serve, the address passes of the waiting
// Services listed a tenant namespace's Events 20,000 times in 15 minutes (0.28 s of the
// apiserver's time each). In a tenant's namespace the tenant may write Events too (the stock edit
// role does), of any reason and up to about a megabyte each: the transform keeps a cached report
// to about a kilobyte whatever was written, and what a report there can make the driver do is
// bounded (plan.MaxNamesPerReport names, and only about the tenant's own address).
//
// Claims and Services are reduced to what the driver reads (claimcache.Strip,
// servicecache.StripKeeping, and of a Service's labels those labels names: ServiceLabels), for
// the same reason: a tenant writes them. labels is the Driver's ServiceLabels.
func CacheByObject(namespace string, labels *ServiceLabels) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Event{}: {
			Field:     fields.OneTermEqualSelector("reason", ReasonAllocationFailed),
			Transform: stripEvent,
		},
		&ipamv1.IPAddressClaim{}: {Transform: claimcache.Strip},
		&corev1.Service{}:        {Transform: labels.Transform()},
	}
}

// maxReportMessage is the longest message of a MetalLB report the driver keeps: MetalLB's are a
// line ("can't change sharing key for ..., address also in use by <namespace>/<name>"), and the
// driver reads no more than a few names from one (plan.MaxNamesPerReport).
const maxReportMessage = 1024

// stripEvent keeps of an Event what the driver reads: the object it is about, its reason, its
// message (cut to maxReportMessage) and when it was said.
func stripEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	out := &corev1.Event{
		TypeMeta:   e.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, UID: e.UID, ResourceVersion: e.ResourceVersion},
		InvolvedObject: corev1.ObjectReference{Kind: e.InvolvedObject.Kind, Namespace: e.InvolvedObject.Namespace,
			Name: e.InvolvedObject.Name, UID: e.InvolvedObject.UID},
		Reason: e.Reason, Message: cutMessage(e.Message),
		FirstTimestamp: e.FirstTimestamp, LastTimestamp: e.LastTimestamp, EventTime: e.EventTime,
	}
	if e.Series != nil {
		out.Series = &corev1.EventSeries{LastObservedTime: e.Series.LastObservedTime}
	}
	return out, nil
}

// cutMessage is m, cut to maxReportMessage; a copy, so that the cut does not keep the whole
// message it was taken from.
func cutMessage(m string) string {
	if len(m) > maxReportMessage {
		return strings.Clone(m[:maxReportMessage])
	}
	return m
}

// setupIndexes registers the driver's indexes. The Service indexes are cluster-wide only
// (index.ClusterWide: their values are unique per Service, and a namespaced object's values would
// otherwise be stored twice): they are listed without client.InNamespace. Those of the driver's
// own placeholders keep to the driver's namespace in the index function itself, so that a
// tenant's Service with the same labels is never taken for one.
func setupIndexes(ctx context.Context, mgr manager.Manager, namespace string) error {
	if err := index.Setup(ctx, mgr); err != nil {
		return err
	}
	own := func(o client.Object, role string) bool {
		return o.GetNamespace() == namespace && o.GetLabels()[plan.LabelRole] == role
	}
	for _, f := range []struct {
		field string
		fn    client.IndexerFunc
	}{
		{indexHoldOf, func(o client.Object) []string {
			if !own(o, plan.RoleHold) {
				return nil
			}
			return []string{o.GetLabels()[plan.LabelAddress]}
		}},
		{indexReleaseOf, func(o client.Object) []string {
			if !own(o, plan.RoleRelease) {
				return nil
			}
			return []string{o.GetLabels()[plan.LabelAddress]}
		}},
		{indexProvisioningForKey, func(o client.Object) []string {
			if !own(o, plan.RoleProvisioning) {
				return nil
			}
			return []string{o.GetAnnotations()[plan.AnnotationClaim]}
		}},
		{indexServiceLink, func(o client.Object) []string {
			svc := o.(*corev1.Service)
			if svc.Labels[plan.LabelRole] != "" {
				return nil
			}
			name, _ := plan.LinkedClaim(svc)
			return []string{index.ClaimKey(svc.Namespace, name)}
		}},
		{indexIngressIP, func(o client.Object) []string {
			return ipStrings(plan.IngressIPs(o.(*corev1.Service)))
		}},
		{indexExternalIP, func(o client.Object) []string {
			return ipStrings(plan.ExternalIPs(o.(*corev1.Service)))
		}},
		{indexRequestedIP, func(o client.Object) []string {
			s := o.(*corev1.Service)
			if s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Labels[plan.LabelRole] != "" {
				return nil // (the driver's own placeholders request reserved IPs by design)
			}
			return ipStrings(plan.RequestedIPs(s))
		}},
		{indexParked, func(o client.Object) []string {
			if autoclaim.Parked(o.(*corev1.Service)) {
				return []string{"true"}
			}
			return nil
		}},
	} {
		if err := index.ClusterWide(ctx, mgr.GetCache(), &corev1.Service{}, f.field, f.fn); err != nil {
			return err
		}
	}
	idx := mgr.GetFieldIndexer()
	for _, f := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&ipamv1.IPAddress{}, indexAttachedTo, func(o client.Object) []string {
			at := o.(*ipamv1.IPAddress).Status.AttachedTo
			if at == nil {
				return nil
			}
			return []string{at.Namespace + "/" + at.Name}
		}},
		{&ipamv1.IPAddressClass{}, indexClassPool, func(o client.Object) []string {
			c := o.(*ipamv1.IPAddressClass)
			if c.Spec.Provisioner != plan.Provisioner {
				return nil
			}
			return []string{plan.ParseClassParams(c).Pool}
		}},
		{&corev1.Event{}, indexEventAbout, func(o client.Object) []string {
			return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
		}},
	} {
		if err := idx.IndexField(ctx, f.obj, f.field, f.fn); err != nil {
			return err
		}
	}
	return nil
}

func ipStrings(ips []netip.Addr) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
