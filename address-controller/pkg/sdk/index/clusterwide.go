package index

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The keys controller-runtime's cache reader looks an index up by: an index named field is
// stored as "field:"+field, and a list without a namespace asks for "__all_namespaces/"+value
// (with one, "<namespace>/"+value). TestClusterWideAnswersListsAcrossNamespaces fails if a
// controller-runtime upgrade changes them.
const (
	fieldIndexPrefix = "field:"
	allNamespacesKey = "__all_namespaces/"
)

// ClusterWide registers an index of obj's kind under field, as client.FieldIndexer.IndexField
// does, but for lists across all namespaces only: client.MatchingFields{field: v} without
// client.InNamespace. IndexField stores every value of a namespaced object twice, once for such
// lists and once for lists in the object's namespace; for indexes whose values are unique per
// object (an IP, a claim's key) that doubles the index's share of the controller's memory, for
// lookups that never name a namespace. A list of such an index with client.InNamespace finds
// nothing: put the namespace in the value, or check it in fn, instead.
func ClusterWide(ctx context.Context, c cache.Informers, obj client.Object, field string, fn client.IndexerFunc) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return inf.AddIndexers(toolscache.Indexers{fieldIndexPrefix + field: func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("index %s: %T is not a client.Object", field, raw)
		}
		vals := fn(o)
		if len(vals) == 0 {
			return nil, nil
		}
		keys := make([]string, len(vals))
		for i, v := range vals {
			keys[i] = allNamespacesKey + v
		}
		return keys, nil
	}})
}
