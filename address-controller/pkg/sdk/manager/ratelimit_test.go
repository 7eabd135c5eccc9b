package manager

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The retry delay of an item that keeps failing grows from about 100 ms and never passes a
// minute, also when the overall bucket is drained by many items at once.
func TestRateLimiterIsCapped(t *testing.T) {
	l := RateLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "x"}}
	first := l.When(item)
	if first < RetryBaseDelay/2 || first > time.Second {
		t.Fatalf("first retry after %s, want about %s", first, RetryBaseDelay)
	}
	var last time.Duration
	for range 40 {
		last = l.When(item)
		if last > RetryMaxDelay {
			t.Fatalf("a retry delay of %s passes the cap %s", last, RetryMaxDelay)
		}
	}
	if last < RetryMaxDelay/2 {
		t.Fatalf("after 40 failures the delay is %s; the backoff does not grow to the cap", last)
	}
	l.Forget(item)
	if d := l.When(item); d > time.Second {
		t.Fatalf("after Forget the delay is %s, want the base again", d)
	}

	// Drain the bucket with many distinct items: no delay passes the cap.
	b := RateLimiter()
	for i := range 5000 {
		d := b.When(reconcile.Request{NamespacedName: types.NamespacedName{Name: string(rune('a'+i%26)) + time.Duration(i).String()}})
		if d > RetryMaxDelay {
			t.Fatalf("item %d waits %s, past the cap %s", i, d, RetryMaxDelay)
		}
	}
}

func TestControllerOptions(t *testing.T) {
	o := ControllerOptions(0)
	if o.MaxConcurrentReconciles != 1 || o.RateLimiter == nil {
		t.Fatalf("ControllerOptions(0) = %+v", o)
	}
}
