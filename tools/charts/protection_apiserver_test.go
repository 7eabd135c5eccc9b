package charts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

const coreAddressFinalizer = "local.sdn.cozystack.io/address-protection"

var (
	addressGVR = schema.GroupVersionResource{Group: "local.sdn.cozystack.io", Version: "v1alpha1", Resource: "ipaddresses"}
	claimGVR   = schema.GroupVersionResource{Group: "local.sdn.cozystack.io", Version: "v1alpha1", Resource: "ipaddressclaims"}
)

func ipAddress(name, ip string, finalizers ...string) *unstructured.Unstructured {
	a := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddress",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"address": ip, "className": "c"}}}
	if finalizers != nil {
		a.SetFinalizers(finalizers)
	}
	return a
}

// The core chart on a real kube-apiserver (v1.37.2), installed by Helm with the capabilities
// discovery reports. Its protection policy puts the core's finalizer on every IPAddress as it is
// created, next to the creator's own, exactly once, so that the core need not patch it on (DESIGN
// §5a's write budget). And the claim CRD's schema default makes a claim the core has not written
// yet read as Pending, in a read and in a watch, which lets the core leave a claim that only
// waits for its driver unwritten.
func TestCoreAdmissionAndDefaultsOnTheAPIServer(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	const ns = "cozy-address-controller"
	if err := cp.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Load(Dir(root, "address-controller"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := Apply(ctx, cp.Kubeconfig, ns, "address-controller", c, map[string]any{"deploy": false})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rel.Manifest, "name: address-controller-address-protection") {
		t.Fatal("helm install on the apiserver did not render the protection policy: the capability check misses the served kind")
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	addrs := dyn.Resource(addressGVR)

	// The policy reaches admission through an informer: wait for a dry run to show it.
	eventually(t, 30*time.Second, "the policy to add the finalizer", func() (bool, error) {
		got, err := addrs.Create(ctx, ipAddress("ip-203-0-113-9", "203.0.113.9"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return slices.Equal(got.GetFinalizers(), []string{coreAddressFinalizer}), fmt.Errorf("finalizers %v", got.GetFinalizers())
	})
	for i, tc := range []struct {
		name       string
		finalizers []string
		want       []string
	}{
		{"none", nil, []string{coreAddressFinalizer}},
		{"a driver's", []string{"teardown.example.com"}, []string{"teardown.example.com", coreAddressFinalizer}},
		{"the core's already", []string{coreAddressFinalizer}, []string{coreAddressFinalizer}},
		{"both already", []string{coreAddressFinalizer, "teardown.example.com"}, []string{coreAddressFinalizer, "teardown.example.com"}},
	} {
		got, err := addrs.Create(ctx, ipAddress(fmt.Sprintf("ip-203-0-113-%d", 10+i), fmt.Sprintf("203.0.113.%d", 10+i), tc.finalizers...), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(got.GetFinalizers(), tc.want) {
			t.Errorf("%s: created with finalizers %v, want %v", tc.name, got.GetFinalizers(), tc.want)
		}
	}
	// An update is not the policy's: a finalizer removed stays removed.
	a, err := addrs.Get(ctx, "ip-203-0-113-10", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.SetFinalizers(nil)
	if a, err = addrs.Update(ctx, a, metav1.UpdateOptions{}); err != nil || len(a.GetFinalizers()) != 0 {
		t.Fatalf("removing the finalizer: %v, left %v", err, a.GetFinalizers())
	}

	// The claim's status default.
	if err := cp.EnsureNamespace(ctx, "tenant-a", nil); err != nil {
		t.Fatal(err)
	}
	claims := dyn.Resource(claimGVR).Namespace("tenant-a")
	w, err := claims.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	claim := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClaim",
		"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"family": "IPv4"}}}
	created, err := claims.Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phase := func(u *unstructured.Unstructured) string {
		p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return p
	}
	if p := phase(created); p != "Pending" {
		t.Errorf("a new claim's create response says phase %q, want Pending", p)
	}
	got, err := claims.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := phase(got); p != "Pending" {
		t.Errorf("a new claim reads as phase %q, want Pending", p)
	}
	select {
	case ev := <-w.ResultChan():
		if u, ok := ev.Object.(*unstructured.Unstructured); !ok || phase(u) != "Pending" {
			t.Errorf("the watch shows the new claim as %v", ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("no watch event for the new claim")
	}
	// A status written later replaces the default, as any status write would.
	if err := unstructured.SetNestedField(got.Object, "Bound", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	if got, err = claims.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil || phase(got) != "Bound" {
		t.Fatalf("writing the status: %v (phase %q)", err, phase(got))
	}
}
