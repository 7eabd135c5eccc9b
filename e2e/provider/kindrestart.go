package provider

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Workload is a component the suite restarts or stops, and how to find it on a kind cluster:
// its Deployment and the labels of its pods.
type Workload struct {
	Namespace, Deployment, Selector string
}

// KindWorkloads maps the process names the local provider restarts to the same components on a
// kind cluster (the labels the charts put on the pods, and MetalLB's chart's).
var KindWorkloads = map[string]Workload{
	"address-controller": {"cozy-address-controller", "address-controller", "app.kubernetes.io/name=address-controller,app.kubernetes.io/instance=address-controller"},
	"metallb-iad":        {"cozy-metallb-iad", "metallb-iad", "app.kubernetes.io/name=metallb-iad,app.kubernetes.io/instance=metallb-iad"},
	"metallb-controller": {"cozy-metallb", "metallb-controller", "app.kubernetes.io/component=controller"},
}

// Restarter is a cluster that can restart a component as a crash would.
type Restarter interface {
	Restart(ctx context.Context, names ...string) error
}

// Stopper is a cluster that can stop a component and start it again later: the local provider
// stops the process; kind scales the component's Deployment to zero and back.
type Stopper interface {
	// StopComponent stops the component and returns what starts it again (and waits until it
	// is ready).
	StopComponent(ctx context.Context, name string) (start func(context.Context) error, err error)
}

// pollInterval is how often the kind helpers look at pods; the unit tests shorten it.
var pollInterval = time.Second

// Restart deletes the components' pods at once (no grace period, as a crash) and waits until
// their Deployments run replacements that are ready.
func (c *kindCluster) Restart(ctx context.Context, names ...string) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	return restartPods(ctx, cs, names...)
}

// StopComponent scales the component's Deployment to zero and waits until its pods are gone.
func (c *kindCluster) StopComponent(ctx context.Context, name string) (func(context.Context) error, error) {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return nil, err
	}
	return stopWorkload(ctx, cs, name)
}

func workload(name string) (Workload, error) {
	w, ok := KindWorkloads[name]
	if !ok {
		return Workload{}, fmt.Errorf("no kind workload known for %q", name)
	}
	return w, nil
}

func restartPods(ctx context.Context, cs kubernetes.Interface, names ...string) error {
	old := map[string]bool{}
	for _, n := range names {
		w, err := workload(n)
		if err != nil {
			return err
		}
		pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.Selector})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pods of %s (%s in %s)", n, w.Selector, w.Namespace)
		}
		zero := int64(0)
		for _, p := range pods.Items {
			old[string(p.UID)] = true
			if err := cs.CoreV1().Pods(w.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				return err
			}
		}
	}
	for _, n := range names {
		w := KindWorkloads[n]
		if err := waitPods(ctx, cs, w, func(pods []corev1.Pod) bool {
			for _, p := range pods {
				if old[string(p.UID)] {
					return false // an old pod is still there
				}
			}
			return ready(pods) > 0
		}); err != nil {
			return fmt.Errorf("%s did not come back ready: %w", n, err)
		}
	}
	return nil
}

// stopWorkload scales the Deployment of name to zero, waits until none of its pods is left, and
// returns a function that scales it back to its former replicas and waits until that many pods
// are ready.
func stopWorkload(ctx context.Context, cs kubernetes.Interface, name string) (func(context.Context) error, error) {
	w, err := workload(name)
	if err != nil {
		return nil, err
	}
	dep, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("stopping %s: %w", name, err)
	}
	replicas := int32(1)
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	scale := func(ctx context.Context, n int32) error {
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
		_, err := cs.AppsV1().Deployments(w.Namespace).Patch(ctx, w.Deployment, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	if err := scale(ctx, 0); err != nil {
		return nil, fmt.Errorf("scaling %s/%s to 0: %w", w.Namespace, w.Deployment, err)
	}
	if err := waitPods(ctx, cs, w, func(pods []corev1.Pod) bool { return len(pods) == 0 }); err != nil {
		return nil, fmt.Errorf("%s did not stop: %w", name, err)
	}
	return func(ctx context.Context) error {
		if err := scale(ctx, replicas); err != nil {
			return fmt.Errorf("scaling %s/%s back to %d: %w", w.Namespace, w.Deployment, replicas, err)
		}
		if err := waitPods(ctx, cs, w, func(pods []corev1.Pod) bool { return ready(pods) >= int(replicas) }); err != nil {
			return fmt.Errorf("%s did not start again: %w", name, err)
		}
		return nil
	}, nil
}

func waitPods(ctx context.Context, cs kubernetes.Interface, w Workload, done func([]corev1.Pod) bool) error {
	return wait.PollUntilContextTimeout(ctx, pollInterval, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.Selector})
		if err != nil {
			return false, nil
		}
		return done(pods.Items), nil
	})
}

func ready(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

var (
	_ Restarter = (*kindCluster)(nil)
	_ Stopper   = (*kindCluster)(nil)
)
