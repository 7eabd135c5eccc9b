// Package servicecache reduces cached Services to what the project's controllers read: the MetalLB
// driver watches every Service of a cluster, the core (auto-claim) every one but a driver's own.
package servicecache

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Strip keeps only what the controllers read of a Service, so that caching every Service of a
// large cluster stays cheap: identity, labels, annotations, owner references, the type, IP
// families and requested IP, and the load-balancer status. Patches are computed between two
// copies of this reduced object, so the dropped fields are never written.
func Strip(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		TypeMeta: svc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace, UID: svc.UID, ResourceVersion: svc.ResourceVersion,
			Generation: svc.Generation, CreationTimestamp: svc.CreationTimestamp, DeletionTimestamp: svc.DeletionTimestamp,
			Labels: svc.Labels, Annotations: withoutLastApplied(svc.Annotations), OwnerReferences: svc.OwnerReferences, Finalizers: svc.Finalizers,
		},
		Spec: corev1.ServiceSpec{
			Type: svc.Spec.Type, IPFamilies: svc.Spec.IPFamilies, IPFamilyPolicy: svc.Spec.IPFamilyPolicy,
			LoadBalancerIP: svc.Spec.LoadBalancerIP, LoadBalancerClass: svc.Spec.LoadBalancerClass,
			ExternalIPs: svc.Spec.ExternalIPs,
		},
		Status: corev1.ServiceStatus{LoadBalancer: svc.Status.LoadBalancer},
	}, nil
}

// lastApplied is kubectl's copy of the whole object as last applied (client-side apply, and some
// GitOps tools): often larger than the rest of the cached Service, and read by neither controller.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func withoutLastApplied(in map[string]string) map[string]string {
	if _, ok := in[lastApplied]; !ok {
		return in
	}
	out := make(map[string]string, len(in)-1)
	for k, v := range in {
		if k != lastApplied {
			out[k] = v
		}
	}
	return out
}
