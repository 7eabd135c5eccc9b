package driver

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// SetupWithManager registers the indexes and every controller of the driver.
func (d *Driver) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	d.client, d.reader = mgr.GetClient(), mgr.GetAPIReader()
	d.announce = &driverkit.Announcer{Recorder: mgr.GetEventRecorder("metallb-iad")}
	if d.ExpectFor == 0 {
		d.ExpectFor = time.Minute
	}
	d.expect = freshness.NewExpectations[string, string](d.ExpectFor)
	d.written = freshness.NewWriteTracker[string](d.ExpectFor)
	d.now = time.Now
	if d.NudgeAfter == 0 {
		d.NudgeAfter = 3 * time.Second
	}
	if d.ReleaseFor == 0 {
		d.ReleaseFor = plan.DefaultReleaseFor
	}
	if d.ReleaseAfter == 0 {
		d.ReleaseAfter = plan.DefaultReleaseAfter
	}
	if d.NotServedAfter == 0 {
		d.NotServedAfter = plan.DefaultNotServedAfter
	}
	d.wakeClaims = make(chan ctrlevent.TypedGenericEvent[client.Object], 1024)
	d.memory = plan.NewMetallbMemory()
	d.progress = &metallbProgress{namespace: d.Namespace, now: func() time.Time { return d.now() }}
	if d.ProvisioningWindow <= 0 {
		d.ProvisioningWindow = plan.DefaultProvisioningWindow
	}
	if d.CapacityEvery <= 0 {
		d.CapacityEvery = DefaultCapacityEvery
	}
	d.capacity = &capacityClock{written: map[string]time.Time{}}
	d.window = newProvisioningWindow(d.Namespace, d.ProvisioningWindow, max(d.ExpectFor, time.Second), func() time.Time { return d.now() })
	services, err := mgr.GetCache().GetInformer(ctx, &corev1.Service{})
	if err != nil {
		return err
	}
	if _, err := services.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    d.progress.see,
		UpdateFunc: func(_, o any) { d.progress.see(o) },
	}); err != nil {
		return err
	}
	servicesSeen, err := services.AddEventHandler(d.window.serviceHandler())
	if err != nil {
		return err
	}
	pools, err := mgr.GetCache().GetInformer(ctx, &metallb.IPAddressPool{})
	if err != nil {
		return err
	}
	poolsSeen, err := pools.AddEventHandler(d.window.poolHandler())
	if err != nil {
		return err
	}
	if _, err := pools.AddEventHandler(d.ServiceLabels.poolHandler()); err != nil {
		return err
	}
	if err := d.ServiceLabels.Seed(ctx, d.reader, d.MetalLBNamespace); err != nil {
		return err
	}
	// The caches' sync does not wait for these handlers: the window grants nothing until they
	// have been given the initial lists.
	d.window.handlersSynced = func() bool { return servicesSeen.HasSynced() && poolsSeen.HasSynced() }
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return d.window.forward(ctx, d.wakeClaims) })); err != nil {
		return err
	}
	if d.SweepEvery == 0 {
		d.SweepEvery = driverkit.MaxRecheck
	}
	if err := mgr.Add(manager.RunnableFunc(d.sweepPeriodically)); err != nil {
		return err
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(mgr.GetCache(), d.Namespace, d.MetalLBNamespace)
	}
	if err := setupIndexes(ctx, mgr, d.Namespace); err != nil {
		return err
	}
	if err := d.setupClasses(ctx, mgr); err != nil {
		return err
	}
	for _, setup := range []func(ctrl.Manager) error{d.setupClaims, d.setupAddresses, d.setupServices} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}
