// Package cachewalk visits every cached object of a kind without copying it. A List from
// controller-runtime's cache copies each object into the list's Items even when asked not to
// deep-copy; metrics that count 10,000 claims and addresses at every scrape then allocate tens of
// megabytes a scrape, which a controller's memory target has to absorb.
package cachewalk

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// informerGetter is what a controller-runtime cache offers beyond a client.Reader.
type informerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// storer is a client-go informer, which controller-runtime's informer cache hands out.
type storer interface {
	GetStore() toolscache.Store
}

// Each calls fn for every object of obj's kind that r holds, in no particular order. fn only
// reads: the objects are the cache's own. When r is a controller-runtime informer cache whose
// informer for the kind has started, the walk goes over the informer's store and copies nothing;
// otherwise it lists into list (without deep copies) and walks the items.
func Each(ctx context.Context, r client.Reader, obj client.Object, list client.ObjectList, fn func(client.Object)) error {
	if ig, ok := r.(informerGetter); ok {
		// BlockUntilSynced(false): a metrics scrape must not wait for an informer. (GetInformer
		// still creates one for a kind the cache has none of, as a List would: the collectors
		// only walk kinds their controllers watch.)
		if inf, err := ig.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err == nil {
			if s, ok := inf.(storer); ok && inf.HasSynced() {
				for _, o := range s.GetStore().List() {
					if co, ok := o.(client.Object); ok {
						fn(co)
					}
				}
				return nil
			}
		}
	}
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	return meta.EachListItem(list, func(o runtime.Object) error {
		if co, ok := o.(client.Object); ok {
			fn(co)
		}
		return nil
	})
}
