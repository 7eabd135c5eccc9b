package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/manager"
)

// The binary's manager caches no Service a driver marks as its own, and still trims the others.
func TestTheCoreCachesNoDriverService(t *testing.T) {
	var o manager.Options
	m := o.ManagerOptions(spec())
	for obj, by := range m.Cache.ByObject {
		if _, ok := obj.(*corev1.Service); !ok {
			continue
		}
		if by.Label == nil || by.Transform == nil {
			t.Fatalf("Service cache %+v: want a label selector and the trim", by)
		}
		if by.Label.Matches(labels.Set{ipamv1.LabelDriverService: "metallb.drivers.local.sdn.cozystack.io"}) ||
			by.Label.Matches(labels.Set{ipamv1.LabelDriverService: ""}) || !by.Label.Matches(labels.Set{"app": "web"}) {
			t.Fatalf("Service cache selector %q", by.Label)
		}
		return
	}
	t.Fatal("no Service cache settings")
}
