package manager

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Bounds of the error backoff of every controller (docs/design.md#nothing-waits-on-an-event-alone:
// an object whose reconcile fails is retried with backoff capped at about a minute).
// controller-runtime's default grows to about 16 minutes per item.
const (
	RetryBaseDelay = 100 * time.Millisecond
	RetryMaxDelay  = time.Minute
	// The overall bucket: retries of all items together, sustained and burst.
	retryQPS   = 20
	retryBurst = 200
)

// RateLimiter is the workqueue rate limiter of every controller of the project: per item
// exponential from RetryBaseDelay to RetryMaxDelay, and an overall token bucket, the whole
// never waiting more than RetryMaxDelay (the bucket alone could, with many items failing).
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedWithMaxWaitRateLimiter(
		workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](RetryBaseDelay, RetryMaxDelay),
			&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(retryQPS), retryBurst)},
		),
		RetryMaxDelay)
}

// ControllerOptions are the options every controller of the project is built with: workers
// concurrent reconciles (at least one) and RateLimiter.
func ControllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: max(workers, 1), RateLimiter: RateLimiter()}
}
