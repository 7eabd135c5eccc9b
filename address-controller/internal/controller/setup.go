// Package controller holds the core's reconcilers: claims (binding and release), addresses
// (phase, protection, releaseDelay) and classes (protection).
package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/claimcache"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/servicecache"
)

// CacheByObject is what the core's cache keeps of each kind it treats specially: Services trimmed
// to what auto-claim reads, and none that a driver marks as its own (LabelDriverService): the
// core never acts on those, and a driver may keep one per reserved address; namespaces, their
// names and labels only (a class's namespaceSelector matches the labels); claims reduced to what
// the controllers read (claimcache).
func CacheByObject() map[client.Object]cache.ByObject {
	notDriver, err := labels.NewRequirement(ipamv1.LabelDriverService, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant key: only a typo gets here
	}
	return map[client.Object]cache.ByObject{
		&corev1.Service{}:   {Label: labels.NewSelector().Add(*notDriver), Transform: servicecache.Strip},
		&corev1.Namespace{}: {Transform: stripNamespace},
		// Claims are a tenant's to write: only what the core reads is kept.
		&ipamv1.IPAddressClaim{}: {Transform: claimcache.Strip},
	}
}

// stripNamespace keeps of a namespace what the core reads: its identity and labels.
func stripNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels,
		CreationTimestamp: ns.CreationTimestamp, DeletionTimestamp: ns.DeletionTimestamp,
	}}, nil
}

// Options tunes the controllers.
type Options struct {
	// Workers is the number of concurrent reconciles of each controller.
	Workers int
	// RegisterMetrics adds the project's metrics to controller-runtime's registry (off in tests
	// that start several managers in one process).
	RegisterMetrics bool
	// Metrics, when set, are the metrics the controllers report to (tests read them); by
	// default Setup creates them over the manager's cache.
	Metrics *Metrics
	// QuietWait: how long a claim that waits only for its driver reads plain Pending before
	// its status says what it waits for (0: two minutes; negative: not at all).
	QuietWait time.Duration
}

// addressByClassNamespace keys an address by the class and the claimRef namespace
// (classNamespaceKey): what a namespace holds of a class, counted against the class's
// per-namespace limit. Only the core registers it; drivers do not need it.
const addressByClassNamespace = "ipam.addressByClassNamespace"

func classNamespaceKey(class, namespace string) string { return class + "/" + namespace }

func addressClassNamespace(o client.Object) []string {
	a := o.(*ipamv1.IPAddress)
	if a.Spec.ClaimRef == nil {
		return nil
	}
	return []string{classNamespaceKey(a.Spec.ClassName, a.Spec.ClaimRef.Namespace)}
}

// registerIndexes adds the shared indexes (package index) and the core's own to idx.
func registerIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := index.Register(ctx, idx); err != nil {
		return err
	}
	return idx.IndexField(ctx, &ipamv1.IPAddress{}, addressByClassNamespace, addressClassNamespace)
}

// Setup registers the indexes and every controller of the core with mgr.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) error {
	if err := registerIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics(mgr.GetCache())
	}
	if opts.RegisterMetrics {
		if err := m.Register(metrics.Registry); err != nil {
			return err
		}
	}
	rec := mgr.GetEventRecorder("address-controller")
	if err := (&ClaimReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec,
		Metrics: m, Workers: opts.Workers, QuietWait: opts.QuietWait}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&AddressReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec,
		Workers: opts.Workers}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&ClassReconciler{Client: mgr.GetClient(), Recorder: rec, Workers: opts.Workers}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&AutoClaimReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec, Workers: opts.Workers}).SetupWithManager(ctx, mgr)
}
