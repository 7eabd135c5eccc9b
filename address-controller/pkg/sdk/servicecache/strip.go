// Package servicecache reduces cached Services to what the project's controllers read: the MetalLB
// driver watches every Service of a cluster, the core (auto-claim) every one but a driver's own.
package servicecache

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
)

// Annotations are the Service annotations the core reads: the claim, class and auto-claim
// annotations, and MetalLB's under both prefixes (auto-claim's skip rules, parking).
var Annotations = append([]string{ipamv1.AnnotationServiceClaim, ipamv1.AnnotationServiceClass, ipamv1.AnnotationAutoClaim},
	autoclaim.MetalLBAnnotations...)

// maxValue is the longest annotation value cached as it is: a claim or class name, a pin of a
// few IPs, all fit well within it.
const maxValue = 1024

// TooLong stands in for a kept annotation's value longer than maxValue: the annotation is there
// (a pin is a pin), and the value names no claim, class or IP.
const TooLong = "(too long to cache)"

// Strip is what the core keeps of a Service: as StripKeeping, with the core's annotations alone,
// and of the labels only the one it reads (a driver's own Services carry it, ipamv1.LabelDriverService).
func Strip(obj any) (any, error) { return strip(obj, Annotations, []string{ipamv1.LabelDriverService}) }

// StripKeeping keeps only what the controllers read of a Service, so that caching every Service of
// a large cluster stays cheap, and so that what a tenant writes on its Services (annotations of
// up to 256 KiB, the apiserver's limit) does not grow the controllers' memory: identity, labels
// (a pool's service selectors may match any of them), the annotations of Annotations and extra
// (a value longer than maxValue replaced by TooLong), the type, IP families and requested IP,
// and the load-balancer status; not owner references nor finalizers, which neither controller
// reads. Patches are computed between two copies of this reduced object, so the dropped fields
// are never written.
func StripKeeping(extra ...string) func(any) (any, error) {
	keep := append(slices.Clone(Annotations), extra...)
	return func(obj any) (any, error) { return strip(obj, keep, nil) }
}

// strip reduces a Service to what a controller reads: the annotations of keep, and the labels of
// labelKeys (nil: every label).
func strip(obj any, keep, labelKeys []string) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		TypeMeta: svc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace, UID: svc.UID, ResourceVersion: svc.ResourceVersion,
			Generation: svc.Generation, CreationTimestamp: svc.CreationTimestamp, DeletionTimestamp: svc.DeletionTimestamp,
			Labels: keptLabels(svc.Labels, labelKeys), Annotations: kept(svc.Annotations, keep),
		},
		Spec: corev1.ServiceSpec{
			Type: svc.Spec.Type, IPFamilies: svc.Spec.IPFamilies, IPFamilyPolicy: svc.Spec.IPFamilyPolicy,
			LoadBalancerIP: svc.Spec.LoadBalancerIP, LoadBalancerClass: svc.Spec.LoadBalancerClass,
			ExternalIPs: svc.Spec.ExternalIPs,
		},
		Status: corev1.ServiceStatus{LoadBalancer: svc.Status.LoadBalancer},
	}, nil
}

// keptLabels are the labels of in whose keys are in keys (nil: all of them).
func keptLabels(in map[string]string, keys []string) map[string]string {
	if keys == nil {
		return in
	}
	var out map[string]string
	for _, k := range keys {
		if v, ok := in[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// kept are the annotations of in whose keys are in keep, long values replaced by TooLong.
func kept(in map[string]string, keep []string) map[string]string {
	var out map[string]string
	for _, k := range keep {
		v, ok := in[k]
		if !ok {
			continue
		}
		if len(v) > maxValue {
			v = TooLong
		}
		if out == nil {
			out = make(map[string]string, len(keep))
		}
		out[k] = v
	}
	return out
}
