package envtestutil

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestSettleWaitsForWhatTheWritesBrought runs a controller whose work comes late in each of the
// ways Settle must wait for, and checks that the work is done when Settle returns:
//   - a ConfigMap "later" is done only on the pass a RequeueAfter of a second brings;
//   - a ConfigMap "slow" is done by a reconcile that takes 700 ms;
//   - a Secret's handler takes 500 ms to enqueue its ConfigMap "via-secret" (another kind than the
//     one written last: its sentinel orders it);
//   - a ConfigMap "chain" is done on the pass its first pass's write brings, a Secret written
//     100 ms into the wait whose handler takes 500 ms (after the sentinels: a second round).
//
// Each is the proof that Settle would fail a test if it returned early: it did, for each, when
// Settle ignored requeues, running reconciles, the handlers of other kinds, or the round check.
func TestSettleWaitsForWhatTheWritesBrought(t *testing.T) {
	cfg := Start(t, nil)
	admin := Client(t, cfg)
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	r := NewReconciles()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Logger: r.Logger(logf.Log), NewCache: r.NewCache,
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	var laterPasses atomic.Int32
	done := func(ctx context.Context, cm *corev1.ConfigMap, value string) error {
		patch := client.MergeFrom(cm.DeepCopy())
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations["done"] = value
		return mgr.GetClient().Patch(ctx, cm, patch)
	}
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var cm corev1.ConfigMap
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		if cm.Annotations["done"] != "" {
			return reconcile.Result{}, nil
		}
		switch req.Name {
		case "later":
			if laterPasses.Add(1) == 1 {
				return reconcile.Result{RequeueAfter: time.Second}, nil
			}
			return reconcile.Result{}, done(ctx, &cm, "yes")
		case "slow":
			time.Sleep(700 * time.Millisecond)
			return reconcile.Result{}, done(ctx, &cm, "yes")
		case "via-secret":
			var s corev1.Secret
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &s); err == nil {
				return reconcile.Result{}, done(ctx, &cm, "yes")
			}
		case "chain":
			var s corev1.Secret
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &s); err == nil {
				return reconcile.Result{}, done(ctx, &cm, "yes")
			}
			time.Sleep(100 * time.Millisecond)
			return reconcile.Result{}, client.IgnoreAlreadyExists(mgr.GetClient().Create(ctx,
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chain"}}))
		}
		return reconcile.Result{}, nil
	})
	err = ctrl.NewControllerManagedBy(mgr).Named("settle-test").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() != "sentinel"
		}))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetName() != "via-secret" && o.GetName() != "chain" {
				return nil
			}
			time.Sleep(500 * time.Millisecond)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: o.GetName()}}}
		})).
		Complete(rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	go func() { defer close(stopped); _ = mgr.Start(ctx) }()
	settle := func() {
		t.Helper()
		r.Settle(t, SettleOptions{Reader: admin, Limit: 30 * time.Second, Touch: Sentinels(admin,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel"}})})
	}
	settle() // the manager's start

	isDone := func(name, want string) {
		t.Helper()
		var cm corev1.ConfigMap
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			t.Fatal(err)
		}
		if got := cm.Annotations["done"]; got != want {
			t.Errorf("ConfigMap %s: done=%q when Settle returned, want %q", name, got, want)
		}
	}
	// One at a time: a wait for one would otherwise cover another's.
	for _, name := range []string{"later", "slow", "chain", "via-secret"} {
		if err := admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
		settle()
		if name != "via-secret" {
			isDone(name, "yes")
		}
	}
	isDone("via-secret", "")
	// The Secret is written before the sentinels, whose ConfigMap is written last.
	if err := admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "via-secret"}}); err != nil {
		t.Fatal(err)
	}
	settle()
	isDone("via-secret", "yes")
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 30: time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
