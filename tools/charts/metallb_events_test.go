package charts

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

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
