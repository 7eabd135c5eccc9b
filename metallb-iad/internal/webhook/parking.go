// Package webhook is the driver's parking webhook, for clusters whose apiserver has no
// MutatingAdmissionPolicy (Kubernetes before 1.36): it parks a Service write by the rule of
// package parking, as the chart's parking policies do where they exist, so that a Service that
// names a claim never shows an address MetalLB gave it from another pool first. It serves HTTPS
// with a certificate of its own authority, kept in a Secret that every replica shares, and puts
// that authority into the MutatingWebhookConfiguration the chart installs (certs.go).
package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

// Path is where the parking webhook is served.
const Path = "/park"

// ClassesTimeout bounds how long a request waits for the classes (the cache, which answers at
// once once synced): the apiserver's own timeout for the call is the configuration's
// timeoutSeconds.
const ClassesTimeout = 3 * time.Second

// Parking is the admission handler: it parks what parking.Decide parks and lets every other
// write through unchanged. It never denies a write; when it cannot decide (the classes cannot be
// read) it answers with an error, which the apiserver treats by the configuration's
// failurePolicy (Fail by default: the write is refused and retried by its client, rather than
// admitted with the risk of a foreign address).
type Parking struct {
	// Classes lists the cluster's IPAddressClasses (the driver's cache).
	Classes func(ctx context.Context) ([]ipamv1.IPAddressClass, error)
	// NamespaceLabels reads the labels of a namespace (the driver's cache); nil when none.
	NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)
	Decoder         admission.Decoder
}

// Handle decides one Service write.
func (p *Parking) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Kind.Kind != "Service" || req.SubResource != "" ||
		req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var svc corev1.Service
	if err := p.Decoder.DecodeRaw(req.Object, &svc); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Service: %w", err))
	}
	r := parking.Request{Object: &svc}
	if req.Operation == admissionv1.Update {
		var old corev1.Service
		if err := p.Decoder.DecodeRaw(req.OldObject, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the stored Service: %w", err))
		}
		r.OldObject = &old
	}
	// Only the auto-claim part of the rule reads the classes: a Service that names a claim, or
	// that no class could concern, is decided without them.
	why := parking.Decide(r)
	if why == "" && mayAutoClaim(&svc) {
		cctx, cancel := context.WithTimeout(ctx, ClassesTimeout)
		classes, err := p.Classes(cctx)
		cancel()
		if err != nil {
			return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("reading the IPAddressClasses: %w", err))
		}
		r.Classes = classes
		if svc.Namespace == "" {
			svc.Namespace = req.Namespace
		}
		if parking.NeedsNamespaceLabels(classes) && p.NamespaceLabels != nil {
			cctx, cancel := context.WithTimeout(ctx, ClassesTimeout)
			r.NamespaceLabels, err = p.NamespaceLabels(cctx, svc.Namespace)
			cancel()
			if err != nil {
				return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("reading namespace %s: %w", svc.Namespace, err))
			}
		}
		why = parking.Decide(r)
	}
	if why == "" {
		return admission.Allowed("")
	}
	log.FromContext(ctx).V(1).Info("parking", "service", req.Namespace+"/"+req.Name, "operation", req.Operation, "why", why)
	return admission.Patched("parked until its claim's addresses are pinned ("+why+")", parkPatch(&svc))
}

// mayAutoClaim: a LoadBalancer Service that names no claim, which a class might concern.
func mayAutoClaim(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Annotations[ipamv1.AnnotationServiceClaim] == ""
}

// parkPatch adds the parking annotation (Decide parks only a Service without it).
func parkPatch(svc *corev1.Service) jsonpatch.JsonPatchOperation {
	if svc.Annotations == nil {
		return jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{autoclaim.ParkingAnnotation: autoclaim.ParkingPool})
	}
	return jsonpatch.NewOperation("add", "/metadata/annotations/"+escapePointer(autoclaim.ParkingAnnotation), autoclaim.ParkingPool)
}

// escapePointer escapes a JSON Pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
