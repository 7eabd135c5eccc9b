package driver

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// unitT0 is the creation time of the objects the unit tests of this package build.
var unitT0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// service is a LoadBalancer Service with empty labels and annotations, created at unitT0.
func service(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(unitT0), Annotations: map[string]string{}, Labels: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
}
