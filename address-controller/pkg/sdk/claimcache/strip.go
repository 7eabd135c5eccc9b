// Package claimcache reduces cached claims to what the project's controllers read. Claims are
// written by tenants, who may put up to the apiserver's limits into any field that is not the
// core's: annotations (256 KiB), labels, owner references, finalizers. Both controllers cache
// every claim of the cluster, so a copy kept whole would let a tenant grow their memory at will
// (hundreds of claims of large annotations are hundreds of MiB); a copy reduced to what they read
// stays small whatever the tenant writes.
package claimcache

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Annotations are the claim annotations the controllers read: the core's stamp and the
// auto-claim mark. Every other annotation is left out of the cache.
var Annotations = []string{ipamv1.AnnotationProvisioner, ipamv1.AnnotationResolvedClass, ipamv1.AnnotationAutoClaim}

// maxValue is the longest value of a kept annotation that is cached as it is: longer than any
// class or driver name (253), so no value the controllers act on is cut.
const maxValue = 253

// TooLong stands in for a kept annotation's value longer than maxValue: it is present, and
// equal to no class, driver or "true".
const TooLong = "(too long to cache)"

// NotCached stands, in a cached claim's finalizers, for the finalizers of others the cache
// leaves out. A controller that writes the finalizer list reads the claim from the apiserver
// first when it sees it (Trimmed): a patch of the list computed from the cached copy would drop
// them.
const NotCached = "cache.local.sdn.cozystack.io/not-cached"

// Strip keeps of a claim its identity, the annotations of Annotations (overlong values replaced
// by TooLong), its controller owner reference, the core's finalizer (and NotCached for any
// other), its spec and status. Labels, other annotations, other owner references and managed
// fields are dropped. Patches computed between two copies of the reduced object touch only the
// fields a controller set; a write of the finalizer list checks Trimmed first.
func Strip(obj any) (any, error) {
	c, ok := obj.(*ipamv1.IPAddressClaim)
	if !ok {
		return obj, nil
	}
	out := &ipamv1.IPAddressClaim{
		TypeMeta: c.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion,
			Generation: c.Generation, CreationTimestamp: c.CreationTimestamp, DeletionTimestamp: c.DeletionTimestamp,
			DeletionGracePeriodSeconds: c.DeletionGracePeriodSeconds,
		},
		Spec:   c.Spec,
		Status: c.Status,
	}
	for _, k := range Annotations {
		v, ok := c.Annotations[k]
		if !ok {
			continue
		}
		if len(v) > maxValue {
			v = TooLong
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[k] = v
	}
	if ref := metav1.GetControllerOfNoCopy(c); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	others := false
	for _, f := range c.Finalizers {
		if f == ipamv1.FinalizerClaim {
			out.Finalizers = append(out.Finalizers, f)
		} else {
			others = true
		}
	}
	if others {
		out.Finalizers = append(out.Finalizers, NotCached)
	}
	return out, nil
}

// Trimmed reports whether the claim is a cached copy that leaves finalizers of others out: a
// write of its finalizer list must start from the apiserver's copy.
func Trimmed(c *ipamv1.IPAddressClaim) bool {
	for _, f := range c.Finalizers {
		if f == NotCached {
			return true
		}
	}
	return false
}
