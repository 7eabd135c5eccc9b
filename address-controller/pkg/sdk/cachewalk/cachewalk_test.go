package cachewalk

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
)

// readerOnly hides the cache's informers: Each then takes its List path.
type readerOnly struct{ client.Reader }

// allocated is the heap allocated by f, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// On a real apiserver and controller-runtime's cache: Each visits every object of the kind, on
// either path, and the informer path allocates a small fraction of what a List (the way the
// metrics were collected before) allocates for the same walk.
func TestEachVisitsEveryObjectWithoutCopies(t *testing.T) {
	cfg := envtestutil.Start(t, nil)
	ctx := t.Context()
	admin := envtestutil.Client(t, cfg)
	const n = 2000
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i),
			Labels: map[string]string{"app": "walk"}}, Data: map[string]string{"k": "some value to copy"}}
		if err := admin.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	c, err := cache.New(cfg, cache.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	count := func(r client.Reader) (int, error) {
		seen := 0
		err := Each(ctx, r, &corev1.ConfigMap{}, &corev1.ConfigMapList{}, func(o client.Object) {
			if o.(*corev1.ConfigMap).Labels["app"] == "walk" {
				seen++
			}
		})
		return seen, err
	}
	for name, r := range map[string]client.Reader{"informer store": c, "list": readerOnly{c}} {
		if got, err := count(r); err != nil || got != n {
			t.Fatalf("%s: visited %d of %d ConfigMaps (%v)", name, got, n, err)
		}
	}
	walk := allocated(func() { _, _ = count(c) })
	list := allocated(func() {
		var l corev1.ConfigMapList
		_ = c.List(ctx, &l, client.UnsafeDisableDeepCopy)
	})
	t.Logf("walking %d ConfigMaps allocated %d bytes; a List without deep copies %d", n, walk, list)
	if walk*10 > list {
		t.Fatalf("the walk allocated %d bytes, more than a tenth of a List's %d: it copies", walk, list)
	}
}
