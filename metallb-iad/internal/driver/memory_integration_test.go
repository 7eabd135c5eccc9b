package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// memoryScale is how many of each tenant-written object the memory test writes: 40, or
// $TEST_MEMORY_SCALE (the figures in the docs were measured with hundreds).
func memoryScale() int {
	if n, err := strconv.Atoi(os.Getenv("TEST_MEMORY_SCALE")); err == nil && n > 0 {
		return n
	}
	return 40
}

// heapInUse is the process's live heap after two collections.
func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// What a tenant writes with the stock edit role cannot grow the driver's memory beyond what the
// driver reads: Events of MetalLB's AllocationFailed reason of about a megabyte each, claims
// and Services carrying 200 KiB of annotations, 16 KiB of labels no pool selects by, and
// finalizers. The driver's cache keeps
// of each only the fields it reads, so its heap grows by a few kilobytes per object, not by what
// was written. (The test process is the driver: its heap, after collection, is the driver's
// cache and the test's small bookkeeping.)
func TestTenantWritesDoNotGrowTheDriversMemory(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	ns := newNamespace(t, "memory-tenant")
	n := memoryScale()
	bigMessage := "address also in use by " + strings.Repeat("a/x,", (1<<20)/4)
	bigAnnotation := strings.Repeat("x", 200<<10)
	var finalizers []string
	for i := range 200 {
		finalizers = append(finalizers, fmt.Sprintf("example.com/f-%03d-%s", i, strings.Repeat("f", 40)))
	}
	labels := map[string]string{}
	for i := range 200 {
		labels[fmt.Sprintf("example.com/l-%03d", i)] = strings.Repeat("l", 63)
	}
	t.Cleanup(func() {
		bg := context.Background()
		var claims ipamv1.IPAddressClaimList
		_ = admin.List(bg, &claims, client.InNamespace(ns))
		var svcs corev1.ServiceList
		_ = admin.List(bg, &svcs, client.InNamespace(ns))
		for i := range claims.Items {
			c := &claims.Items[i]
			_ = admin.Patch(bg, c, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			_ = admin.Delete(bg, c)
		}
		for i := range svcs.Items {
			s := &svcs.Items[i]
			_ = admin.Patch(bg, s, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
			_ = admin.Delete(bg, s)
		}
		_ = admin.DeleteAllOf(bg, &corev1.Event{}, client.InNamespace(ns))
	})
	kinds := []struct {
		what string
		list client.ObjectList
		size int
		make func(i int) client.Object
	}{
		{"AllocationFailed Events", &corev1.EventList{}, len(bigMessage), func(i int) client.Object {
			return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("report-%04d", i)},
				InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: ns, Name: "web", UID: types.UID(fmt.Sprintf("uid-%d", i))},
				Reason:         ReasonAllocationFailed, Message: bigMessage, Type: corev1.EventTypeWarning, Count: 1,
				FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now()}
		}},
		{"claims", &ipamv1.IPAddressClaimList{}, len(bigAnnotation), func(i int) client.Object {
			return &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c-%04d", i),
				Annotations: map[string]string{"example.com/blob": bigAnnotation}, Labels: labels, Finalizers: finalizers},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: "memory-none"}}
		}},
		{"Services", &corev1.ServiceList{}, len(bigAnnotation), func(i int) client.Object {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%04d", i),
				Annotations: map[string]string{"example.com/blob": bigAnnotation}, Labels: labels, Finalizers: finalizers},
				Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		}},
	}
	var grew, written int64
	for _, k := range kinds {
		before := heapInUse()
		for i := range n {
			if err := admin.Create(ctx, k.make(i)); err != nil {
				t.Fatal(err)
			}
		}
		eventuallyWithin(t, 2*time.Minute, "the driver's cache to hold the "+k.what, func() (bool, error) {
			if err := testCache.List(ctx, k.list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
				return false, err
			}
			return meta.LenList(k.list) == n, nil
		})
		// Each cached copy is what the controller reads of the object, whatever was written.
		items, err := meta.ExtractList(k.list)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			if b, err := json.Marshal(o); err != nil || len(b) > maxCached {
				t.Fatalf("the cache keeps %d bytes of %s %s (%v): more than the controller reads", len(b), k.what, o.(client.Object).GetName(), err)
			}
		}
		after := heapInUse()
		g, w := int64(after)-int64(before), int64(n)*int64(k.size)
		grew, written = grew+g, written+w
		t.Logf("%d %s of %d KiB each: the driver's heap %.1f MiB before, %.1f MiB after (%+.1f MiB; %.0f MiB written)",
			n, k.what, k.size>>10, mib(before), mib(after), float64(g)/(1<<20), float64(w)/(1<<20))
	}
	// What a controller keeps of an object it reads is a few kilobytes, and its bookkeeping for
	// a claim it reconciles (work queue, events said) a few more: far below what was written. The
	// heap of a process that runs other tests too moves by some megabytes on its own, so the
	// figure is held to that only when measuring ($TEST_MEMORY_SCALE).
	if perObject := grew / int64(len(kinds)*n); os.Getenv("TEST_MEMORY_SCALE") != "" && perObject > maxPerObject {
		t.Fatalf("the heap grew by %.1f MiB (%d KiB an object) for %.0f MiB a tenant wrote: it keeps what it does not read",
			float64(grew)/(1<<20), perObject>>10, float64(written)/(1<<20))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// maxPerObject is how much the heap may grow for each tenant-written object the memory test
// writes (about 200 KiB to 1 MiB each); maxCached, how large a cached copy of one may be.
const (
	maxPerObject = 64 << 10
	maxCached    = 4 << 10
)
