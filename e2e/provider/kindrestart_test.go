package provider

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// Unit tests of the kind provider's restart and stop logic on client-go's fake clientset (no
// controllers run there: the tests play the Deployment controller's part by hand).

func pod(w Workload, name string, isReady bool) *corev1.Pod {
	sel, _ := labels.ConvertSelectorToLabelsMap(w.Selector)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name, UID: types.UID(w.Namespace + "/" + name), Labels: sel}}
	if isReady {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// consistently fails if done is closed at any time within d.
func consistentlyOpen(t *testing.T, what string, done <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned early (%v)", what, err)
	case <-time.After(d):
	}
}

func shortPolls(t *testing.T) {
	old := pollInterval
	pollInterval = 5 * time.Millisecond
	t.Cleanup(func() { pollInterval = old })
}

func TestRestartPodsDeletesAtOnceAndWaitsForReadyReplacements(t *testing.T) {
	shortPolls(t)
	ctx := context.Background()
	core, driver := KindWorkloads["address-controller"], KindWorkloads["metallb-iad"]
	other := pod(core, "bystander", true)
	other.Namespace = "elsewhere" // same labels, another namespace: not a victim
	cs := fake.NewClientset(pod(core, "core-1", true), pod(driver, "driver-1", true), other)
	var mu sync.Mutex
	var graces []int64
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if o := a.(k8stesting.DeleteActionImpl).DeleteOptions.GracePeriodSeconds; o != nil {
			graces = append(graces, *o)
		} else {
			graces = append(graces, -1)
		}
		return false, nil, nil
	})

	done := make(chan error, 1)
	go func() { done <- restartPods(ctx, cs, "address-controller", "metallb-iad") }()
	gone := func(w Workload, n string) func() bool {
		return func() bool {
			_, err := cs.CoreV1().Pods(w.Namespace).Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}
	}
	eventually(t, "both pods deleted", func() bool { return gone(core, "core-1")() && gone(driver, "driver-1")() })
	mu.Lock()
	if len(graces) != 2 || graces[0] != 0 || graces[1] != 0 {
		t.Errorf("deletes with grace periods %v, want 0 for both (a crash)", graces)
	}
	mu.Unlock()
	if _, err := cs.CoreV1().Pods("elsewhere").Get(ctx, "bystander", metav1.GetOptions{}); err != nil {
		t.Fatalf("a pod of another namespace was deleted: %v", err)
	}
	// Replacements that are not ready yet do not end the wait; nor does one component alone.
	for _, p := range []*corev1.Pod{pod(core, "core-2", false), pod(driver, "driver-2", true)} {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	consistentlyOpen(t, "restartPods with an unready replacement", done, 200*time.Millisecond)
	if _, err := cs.CoreV1().Pods(core.Namespace).UpdateStatus(ctx, pod(core, "core-2", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, "restartPods did not return once the replacements were ready")
}

func TestRestartPodsErrors(t *testing.T) {
	shortPolls(t)
	ctx := context.Background()
	cs := fake.NewClientset()
	if err := restartPods(ctx, cs, "kube-scheduler"); err == nil || !strings.Contains(err.Error(), `no kind workload known for "kube-scheduler"`) {
		t.Errorf("unknown component: %v", err)
	}
	if err := restartPods(ctx, cs, "metallb-iad"); err == nil || !strings.Contains(err.Error(), "no pods of metallb-iad") {
		t.Errorf("no pods: %v", err)
	}
	if _, err := stopWorkload(ctx, cs, "metallb-iad"); err == nil || !strings.Contains(err.Error(), "stopping metallb-iad") {
		t.Errorf("no Deployment: %v", err)
	}
}

func TestStopWorkloadScalesToZeroAndBack(t *testing.T) {
	shortPolls(t)
	ctx := context.Background()
	w := KindWorkloads["metallb-iad"]
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Deployment}, Spec: appsv1.DeploymentSpec{Replicas: &two}}
	cs := fake.NewClientset(dep, pod(w, "a", true), pod(w, "b", true))
	replicas := func() int32 {
		d, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Deployment, metav1.GetOptions{})
		if err != nil || d.Spec.Replicas == nil {
			return -1
		}
		return *d.Spec.Replicas
	}

	type stopped struct {
		start func(context.Context) error
		err   error
	}
	stopc := make(chan stopped, 1)
	go func() { s, err := stopWorkload(ctx, cs, "metallb-iad"); stopc <- stopped{s, err} }()
	eventually(t, "the Deployment scaled to 0", func() bool { return replicas() == 0 })
	// Stopped only once no pod is left.
	errc := make(chan error, 1)
	go func() { s := <-stopc; stopc <- s; errc <- s.err }()
	consistentlyOpen(t, "stopWorkload with pods left", errc, 200*time.Millisecond)
	for _, n := range []string{"a", "b"} {
		if err := cs.CoreV1().Pods(w.Namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s := <-stopc

	// Start scales back to the former replicas and waits for that many ready pods.
	done := make(chan error, 1)
	go func() { done <- s.start(ctx) }()
	eventually(t, "the Deployment scaled back to 2", func() bool { return replicas() == 2 })
	for _, p := range []*corev1.Pod{pod(w, "c", true), pod(w, "d", false)} {
		if _, err := cs.CoreV1().Pods(w.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	consistentlyOpen(t, "start with one of two pods ready", done, 200*time.Millisecond)
	if _, err := cs.CoreV1().Pods(w.Namespace).UpdateStatus(ctx, pod(w, "d", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, "start did not return once both pods were ready")
}

// The selector kind's restarts and stops use for MetalLB's controller matches the pods of the
// Deployment MetalLB's own chart renders (the chart from MetalLB's Go module, in the binary
// cache, with the values and release kind installs it with), and no other pods of that chart
// (the speakers must not be restarted in its place).
func TestMetalLBControllerSelectorMatchesTheChart(t *testing.T) {
	dir, err := binaries.MetalLB.Path("chart")
	if err != nil {
		t.Fatalf("MetalLB's chart is not in the binary cache: run `make binaries` (or `go run ./tools/cmd/binaries build metallb`): %v", err)
	}
	c, err := charts.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := charts.RenderRelease(c, MetalLBRelease, MetalLBNamespace, MetalLBValues())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeapply.Decode([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	w := KindWorkloads["metallb-controller"]
	sel, err := labels.Parse(w.Selector)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range objs {
		var tmpl corev1.PodTemplateSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			tmpl = d.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			tmpl = d.Spec.Template
		default:
			continue
		}
		isController := o.GetKind() == "Deployment" && o.GetName() == w.Deployment
		if ns := o.GetNamespace(); ns != "" && ns != w.Namespace {
			t.Errorf("%s %s renders into %s; kind looks in %s", o.GetKind(), o.GetName(), ns, w.Namespace)
		}
		if matches := sel.Matches(labels.Set(tmpl.Labels)); matches != isController {
			t.Errorf("%s %s: pods labelled %v; selector %q matches them: %v, want %v", o.GetKind(), o.GetName(), tmpl.Labels, w.Selector, matches, isController)
		}
		found = found || isController
	}
	if !found {
		t.Fatalf("MetalLB's chart renders no Deployment %s", w.Deployment)
	}
}

// waitDone waits for the call behind done to return, failing with msg after 10 seconds.
func waitDone(t *testing.T, done <-chan error, msg string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}
