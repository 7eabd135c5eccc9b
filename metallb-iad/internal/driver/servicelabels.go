package driver

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/servicecache"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// ServiceLabels are the label keys the driver's cache keeps of a Service: the driver's own (on its
// placeholders and holds), and those a MetalLB pool's spec.serviceAllocation.serviceSelectors
// name, the only labels of a tenant's Service the driver reads (plan.AllocationExcludes). A tenant
// may write labels of any number on its Services; the cache keeps none it does not read.
//
// A key a pool's selector names only later is missing from the Services cached before: the
// cache marks a Service whose labels it cut with the version of the keys it kept
// (annotationLabelKeys, never written: the driver patches Services with the difference of two
// cached copies), and a Service cut under fewer keys than the pools name now is read from the
// apiserver when its labels are matched (Stale).
type ServiceLabels struct {
	// namespace is MetalLB's, whose pools are followed (Seed sets it).
	namespace string
	mu        sync.RWMutex
	byPool    map[string][]string
	keys      map[string]bool
	version   uint64
}

// annotationLabelKeys marks a cached Service whose labels were cut, with the version of the keys
// kept then.
const annotationLabelKeys = "metallb.drivers.local.sdn.cozystack.io/cached-label-keys"

// driverLabelPrefixes are the prefixes of the label keys the driver writes on its own Services.
var driverLabelPrefixes = []string{"metallb.drivers.local.sdn.cozystack.io/", ipamv1.LabelDriverService}

// NewServiceLabels starts with the driver's own keys alone.
func NewServiceLabels() *ServiceLabels {
	return &ServiceLabels{byPool: map[string][]string{}, keys: map[string]bool{}}
}

// selectorKeys are the label keys a pool's service selectors read.
func selectorKeys(p *metallb.IPAddressPool) []string {
	var out []string
	if p.Spec.ServiceAllocation == nil {
		return nil
	}
	for _, s := range p.Spec.ServiceAllocation.ServiceSelectors {
		for k := range s.MatchLabels {
			out = append(out, k)
		}
		for _, e := range s.MatchExpressions {
			out = append(out, e.Key)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// setPool records the keys a pool's selectors read (nil: the pool is gone); a key new to the set
// moves the version on.
func (l *ServiceLabels) setPool(name string, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(keys) == 0 {
		delete(l.byPool, name)
	} else {
		l.byPool[name] = keys
	}
	next := map[string]bool{}
	for _, ks := range l.byPool {
		for _, k := range ks {
			next[k] = true
		}
	}
	for k := range next {
		if !l.keys[k] {
			l.version++
			break
		}
	}
	l.keys = next
}

// Seed reads the pools of the MetalLB namespace once, before the caches start, so that the
// Services listed at start keep the labels the pools select by.
func (l *ServiceLabels) Seed(ctx context.Context, r client.Reader, namespace string) error {
	l.namespace = namespace
	var pools metallb.IPAddressPoolList
	if err := r.List(ctx, &pools, client.InNamespace(namespace)); err != nil {
		return err
	}
	for i := range pools.Items {
		l.setPool(pools.Items[i].Name, selectorKeys(&pools.Items[i]))
	}
	return nil
}

// poolHandler follows the pools' selectors in the pool informer.
func (l *ServiceLabels) poolHandler() toolscache.ResourceEventHandler {
	see := func(o any, deleted bool) {
		p, ok := unwrapDeleted(o).(*metallb.IPAddressPool)
		if !ok || p.Namespace != l.namespace {
			return
		}
		var keys []string
		if !deleted {
			keys = selectorKeys(p)
		}
		l.setPool(p.Name, keys)
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { see(o, false) },
		UpdateFunc: func(_, o any) { see(o, false) },
		DeleteFunc: func(o any) { see(o, true) },
	}
}

func (l *ServiceLabels) keep(key string) bool {
	if slices.ContainsFunc(driverLabelPrefixes, func(p string) bool { return strings.HasPrefix(key, p) }) {
		return true
	}
	return l.keys[key]
}

// Transform is the Service cache's transform: servicecache.StripKeeping with the driver's
// annotations, and the labels cut to the keys kept.
func (l *ServiceLabels) Transform() func(any) (any, error) {
	strip := servicecache.StripKeeping(plan.DriverAnnotations...)
	return func(obj any) (any, error) {
		out, err := strip(obj)
		svc, ok := out.(*corev1.Service)
		if err != nil || !ok {
			return out, err
		}
		if orig, ok := obj.(*corev1.Service); ok {
			// The cache keeps neither ports nor selectors: whether the Service could share its
			// IP with a hold is kept instead (plan.AnnotationCannotShare).
			if why := plan.CannotShareSpec(orig); why != "" {
				svc.Annotations = maps.Clone(svc.Annotations)
				if svc.Annotations == nil {
					svc.Annotations = map[string]string{}
				}
				svc.Annotations[plan.AnnotationCannotShare] = why
			}
		}
		if len(svc.Labels) == 0 {
			return svc, nil
		}
		l.mu.RLock()
		defer l.mu.RUnlock()
		var kept map[string]string
		cut := false
		for k, v := range svc.Labels {
			if !l.keep(k) {
				cut = true
				continue
			}
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
		if !cut {
			return svc, nil
		}
		svc.Labels = kept
		svc.Annotations = maps.Clone(svc.Annotations)
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations[annotationLabelKeys] = strconv.FormatUint(l.version, 10)
		return svc, nil
	}
}

// Stale reports whether a cached Service's labels were cut under fewer keys than the pools'
// selectors name now.
func (l *ServiceLabels) Stale(svc *corev1.Service) bool {
	at, ok := svc.Annotations[annotationLabelKeys]
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(at, 10, 64)
	l.mu.RLock()
	defer l.mu.RUnlock()
	return err != nil || v < l.version
}
