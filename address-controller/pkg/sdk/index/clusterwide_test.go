package index

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
)

// On a real apiserver and controller-runtime's cache: a ClusterWide index answers a list across
// namespaces exactly as an IndexField index does (before and after an object's value changes),
// with half the index keys; a list with a namespace finds nothing, as documented. It fails if
// controller-runtime changes the keys its cache reader looks indexes up by.
func TestClusterWideAnswersListsAcrossNamespaces(t *testing.T) {
	cfg := envtestutil.Start(t, nil)
	ctx := t.Context()
	admin := envtestutil.Client(t, cfg)
	const perNamespace = 50
	namespaces := []string{"one", "two"}
	for _, ns := range namespaces {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		for i := range perNamespace {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)},
				Data: map[string]string{"v": fmt.Sprintf("%s-%d", ns, i), "shared": "all"}}
			if err := admin.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := cache.New(cfg, cache.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	byValue := func(o client.Object) []string {
		d := o.(*corev1.ConfigMap).Data
		if d["v"] == "" {
			return nil
		}
		return []string{d["v"], "shared:" + d["shared"]}
	}
	if err := ClusterWide(ctx, c, &corev1.ConfigMap{}, "test.clusterWide", byValue); err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &corev1.ConfigMap{}, "test.indexField", byValue); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	names := func(field, value string, opts ...client.ListOption) ([]string, error) {
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, append(opts, client.MatchingFields{field: value})...); err != nil {
			return nil, err
		}
		var out []string
		for _, cm := range l.Items {
			out = append(out, cm.Namespace+"/"+cm.Name)
		}
		return out, nil
	}
	same := func(value string, want int) {
		t.Helper()
		got, err := names("test.clusterWide", value)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := names("test.indexField", value)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want || len(ref) != want {
			t.Fatalf("%q: ClusterWide found %v, IndexField %v; want %d each", value, got, ref, want)
		}
		seen := map[string]bool{}
		for _, n := range ref {
			seen[n] = true
		}
		for _, n := range got {
			if !seen[n] {
				t.Fatalf("%q: ClusterWide found %s, IndexField did not (%v)", value, n, ref)
			}
		}
	}
	same("one-7", 1)
	same("two-49", 1)
	same("shared:all", 2*perNamespace)
	same("three-1", 0)
	if got, err := names("test.clusterWide", "one-7", client.InNamespace("one")); err != nil || len(got) != 0 {
		t.Fatalf("a namespaced list of a ClusterWide index found %v (%v): the documented limit changed", got, err)
	}

	// Half the keys.
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	idx := inf.(toolscache.SharedIndexInformer).GetIndexer()
	wide, doubled := len(idx.ListIndexFuncValues("field:test.clusterWide")), len(idx.ListIndexFuncValues("field:test.indexField"))
	if want := len(namespaces)*perNamespace + 1; wide != want || doubled != 2*len(namespaces)*perNamespace+len(namespaces)+1 {
		t.Fatalf("index keys: ClusterWide %d (want %d), IndexField %d", wide, want, doubled)
	}

	// A changed value moves the object; a value removed drops it.
	var cm corev1.ConfigMap
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "two", Name: "cm-3"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "moved"
	if err := admin.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	// waitFor polls the ClusterWide index until value finds want objects.
	waitFor := func(value string, want int, what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got, err := names("test.clusterWide", value)
			if err == nil && len(got) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q found %v (%v), want %d objects", what, value, got, err, want)
			}
		}
	}
	waitFor("moved", 1, "the changed value never showed in the index")
	same("moved", 1)
	same("two-3", 0)
	delete(cm.Data, "v")
	if err := admin.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	waitFor("moved", 0, "the removed value stayed in the index")
	same("shared:all", 2*perNamespace-1)
}
