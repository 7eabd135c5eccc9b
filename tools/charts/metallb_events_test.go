package charts

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// driverNamespace is where the events-policy tests install the metallb-iad chart.
const driverNamespace = "cozy-metallb-iad"

// eventsPolicyCluster starts a kube-apiserver for an events-policy test, with the project's CRDs,
// the driver's, MetalLB's and two tenants' namespaces (tenant-events, plain-events), and the
// metallb-iad chart installed by Helm with values (no Deployment): what MetalLB's events meet.
func eventsPolicyCluster(t *testing.T, values map[string]any) *metallbEvents {
	t.Helper()
	cp := startAPIServer(t)
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx, filepath.Join(Dir(root, "address-controller"), "files", "crds")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{driverNamespace, cp.MetalLBNamespace, "tenant-events", "plain-events"} {
		if err := cp.EnsureNamespace(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	values["deploy"], values["metallbNamespace"] = false, cp.MetalLBNamespace
	if _, err := Apply(ctx, cp.Kubeconfig, driverNamespace, "metallb-iad", c, values); err != nil {
		t.Fatal(err)
	}
	return &metallbEvents{ctx: ctx, client: cp.Client}
}

// rewrite records MetalLB's plain "no available IPs" report about tenant-events/web, then updates
// it to msg the way client-go's recorder does for a report it has made before, and returns the
// update's error.
func (w *metallbEvents) rewrite(t *testing.T, msg string) error {
	t.Helper()
	events := w.client.CoreV1().Events("tenant-events")
	ev, err := events.Create(w.ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web.update"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "tenant-events", Name: "web"},
		Reason:         "AllocationFailed", Type: corev1.EventTypeWarning, Message: `Failed to allocate IP for "tenant-events/web": no available IPs`,
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev.Message, ev.Count = msg, 2
	_, err = events.Update(w.ctx, ev, metav1.UpdateOptions{})
	return err
}

// metallbEvents writes Warning events about Service "web" as MetalLB's controller would, through
// either event API, each under a new name.
type metallbEvents struct {
	ctx    context.Context
	client kubernetes.Interface
	n      int
}

// core writes a core/v1 event (the text in message).
func (w *metallbEvents) core(ns, reason, msg string) error {
	w.n++
	_, err := w.client.CoreV1().Events(ns).Create(w.ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("web.%d", w.n)},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: "web"},
		Reason:         reason, Type: corev1.EventTypeWarning, Message: msg, Source: corev1.EventSource{Component: "metallb-controller"},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	return err
}

// events writes an events.k8s.io/v1 event (the text in note).
func (w *metallbEvents) events(ns, reason, note string) error {
	w.n++
	_, err := w.client.EventsV1().Events(ns).Create(w.ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web.%d", w.n)},
		Regarding:  corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: "web"},
		Reason:     reason, Type: corev1.EventTypeWarning, Note: note, Action: "Allocate",
		ReportingController: "metallb-controller", ReportingInstance: "metallb-controller-0", EventTime: metav1.NowMicro(),
	}, metav1.CreateOptions{})
	return err
}
