package driverkit

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestCapacityOnly(t *testing.T) {
	before := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "1"},
		Status: ipamv1.IPAddressClassStatus{Capacity: []ipamv1.FamilyCapacity{{Family: ipamv1.IPv4}}}}
	after := before.DeepCopy()
	after.ResourceVersion = "2"
	after.Status.Capacity = nil
	if !CapacityOnly(before, after) {
		t.Error("a capacity-only update is not recognised")
	}
	after.Labels = map[string]string{"x": "y"}
	if CapacityOnly(before, after) {
		t.Error("a label change is taken for a capacity-only update")
	}
	after = before.DeepCopy()
	after.Status.ServedNamespaces = &ipamv1.NamespaceSet{Names: []string{"a"}}
	if CapacityOnly(before, after) {
		t.Error("a servedNamespaces change is taken for a capacity-only update")
	}
}
