// Package driver is the MetalLB driver: it accepts classes that name a manual MetalLB pool,
// provisions reserved addresses through placeholder Services, holds every address it does not
// lend to a tenant Service, pins addresses to the Services that name their claim, reports
// conflicts, and tears down through its finalizer.
package driver

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	projectmanager "github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// The driver is four reconcilers, each of the same shape (docs/design.md#decide-then-write): read
// a snapshot (plan.ProvisionView, plan.AddressView, plan.AttachView), call a pure planner of
// package plan that returns the writes and events (plan.PlanProvision, plan.PlanAddress,
// plan.PlanAttach, plan.ClassVerdict; table-tested and fuzzed there), and apply them in the
// documented crash-safe order. Package plan imports no client (the linter's depguard rule).
//
// One reconciler per watched kind; its file (_reconciler.go) holds the watches and the reconcile
// function (snapshot, plan, apply), its _snapshot.go the reads, its _apply.go the writes:
//
//   - class.go        classes: Accepted (or refused) from the pool they name.
//   - claim_*.go      provisioning: placeholders for a stamped claim, the IPAddress once MetalLB
//                     served one.
//   - address_*.go    addresses: the hold invariant, Lost, Conflict, ending dead attachments,
//                     and teardown once the core let go; release.go, MetalLB's kept names.
//   - service_*.go    tenant Services: attach to a linked claim's addresses, detach.
//
// writes.go holds what they share (fresh reads of what this driver just wrote, its own Services'
// deletes and nudges), sweeps.go the periodic sweep, setup.go the wiring.

// Driver is the MetalLB driver's set of controllers.
type Driver struct {
	// Namespace is where placeholder Services live (cozy-metallb-iad on Cozystack).
	Namespace string
	// MetalLBNamespace is where MetalLB's pools are (cozy-metallb on Cozystack).
	MetalLBNamespace string
	// Workers is the number of concurrent reconciles per controller.
	Workers int
	// NudgeAfter is how long a placeholder may wait for MetalLB before it is touched to make
	// MetalLB try again (it does not retry a failed allocation on its own). 3s when zero.
	NudgeAfter time.Duration
	// ReleaseFor is how long a release Service lives (plan_release.go); DefaultReleaseFor when
	// zero. ReleaseAfter is how long a Service this driver pinned waits unserved before the
	// driver releases the names MetalLB may keep its IP under; zero (DefaultReleaseAfter) is off.
	ReleaseFor   time.Duration
	ReleaseAfter time.Duration
	// NotServedAfter is how long a Service this driver pinned may wait for MetalLB before the
	// driver reports it (plan_notserved.go); DefaultNotServedAfter when zero, negative is off.
	NotServedAfter time.Duration
	// NoParking turns the driver's own parking off (the chart's admissionPolicy.parking: false):
	// it then parks no Service, and takes the parking annotation off those it finds parked.
	NoParking bool
	// Metrics, when set, receives the driver's metrics.
	Metrics *Metrics
	// ExpectFor is how long the driver awaits its cache showing its own writes (the objects it
	// created or deleted, the resourceVersions its writes left) before it stops waiting on them
	// (docs/design.md#the-freshness-kit). A minute when zero; negative: it never waits, and every
	// pass decides from the cache as it is.
	ExpectFor time.Duration
	// NewQueue, when set, makes each controller's work queue: controller-runtime's option of the
	// same name (its default queue when nil), for a queue that observes or shapes the work.
	NewQueue func(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]
	// SweepEvery is how often the holds of the driver's namespace are looked over for orphans
	// (an address gone, or deleted and past teardown) whose event was missed. A minute when zero.
	SweepEvery time.Duration
	// CapacityEvery bounds how often a class's status.capacity is written when only its counts
	// changed (they move with every address): at most once per this long per class.
	// DefaultCapacityEvery when zero.
	CapacityEvery time.Duration
	// ProvisioningWindow is how many provisioning placeholders of one pool and family may wait
	// for MetalLB at once (window.go); plan.DefaultProvisioningWindow when zero.
	ProvisioningWindow int
	// ServiceLabels are the label keys the Service cache keeps (CacheByObject's): the driver
	// follows the pools' selectors into it. Required.
	ServiceLabels *ServiceLabels

	client client.Client
	// reader reads the apiserver directly: only to confirm what the cache does not show yet of
	// the driver's own writes.
	reader   client.Reader
	announce *driverkit.Announcer
	// expect and written are what the driver awaits its cache showing (expectations.go).
	expect  *freshness.Expectations[string, string]
	written *freshness.WriteTracker[string]
	// memory is what the driver remembers of MetalLB per address (memory.go).
	memory *plan.MetallbMemory
	// progress is how far MetalLB has got through its work (progress.go).
	progress *metallbProgress
	// window bounds the provisioning placeholders of each pool (window.go).
	window *provisioningWindow
	// capacity is when each class's capacity was last written (class.go).
	capacity *capacityClock
	// serviceCIDRs: the cluster's ServiceCIDRs could be listed at start, and are watched (the
	// cache); otherwise every family is taken as served (clusterFamilies).
	serviceCIDRs bool
	now          func() time.Time
	// wakeClaims brings the claims of provisioning placeholders back to the claim reconciler
	// (sweepPlaceholders): a placeholder whose claim's event was missed is not left waiting.
	wakeClaims chan ctrlevent.TypedGenericEvent[client.Object]
}

// controllerOptions are the project's (pkg/sdk/manager): the failure backoff is capped at a minute like
// every scheduled re-check (docs/design.md#nothing-waits-on-an-event-alone), instead of client-go's
// default of about 17 minutes.
func (d *Driver) controllerOptions() controller.Options {
	o := projectmanager.ControllerOptions(d.Workers)
	o.NewQueue = d.NewQueue
	return o
}

func (d *Driver) emit(ctx context.Context, evs []plan.Event) {
	for _, e := range evs {
		typ := "Normal"
		if e.Warning {
			typ = "Warning"
		}
		said := true
		if e.Once && e.Topic != "" {
			said = d.announce.SayAbout(e.Obj, e.Topic, nil, typ, e.Reason, e.Reason, e.Message)
		} else if e.Once {
			said = d.announce.Say(e.Obj, nil, typ, e.Reason, e.Reason, e.Message)
		} else {
			d.announce.Recorder.Eventf(e.Obj, nil, typ, e.Reason, e.Reason, "%s", e.Message)
		}
		if said && len(e.Names) > 0 {
			log.FromContext(ctx).Info("said "+e.Reason, append([]any{"object", client.ObjectKeyFromObject(e.Obj)}, e.Names...)...)
		}
	}
}
