package charts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

const (
	coreAddressFinalizer = "local.sdn.cozystack.io/address-protection"
	// restorer is a backup tool's identity, listed in stampPolicy.allowedUsernames.
	restorer = "system:serviceaccount:cozy-velero:velero"
)

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
// created, next to the creator's own, exactly once, so that the core need not patch it on (the
// write budget, docs/design.md#the-write-budget). And the claim CRD's schema default makes a claim
// the core has not written yet read as Pending, in a read and in a watch, which lets the core leave
// a claim that only waits for its driver unwritten. Its stamp policy keeps the claim annotations
// that decide the driver and class (the stamp) the core's (stampPolicy).
func TestCoreAdmissionAndDefaultsOnTheAPIServer(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	manifest := installCoreChart(t, cp, map[string]any{"stampPolicy": map[string]any{"allowedUsernames": []any{restorer}}})
	served, err := cp.ServesMutatingAdmissionPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rendered := strings.Contains(manifest, "name: address-controller-address-protection"); rendered != served {
		t.Fatalf("the protection policy rendered: %v, the apiserver serves MutatingAdmissionPolicy: %v (the capability check is wrong)", rendered, served)
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	addrs := dyn.Resource(addressGVR)
	if served {
		checkProtectionPolicy(ctx, t, addrs)
	} else {
		t.Logf("this apiserver (%s) has no MutatingAdmissionPolicy: the core adds its finalizer itself", binaries.KubernetesVersion)
	}

	testClaimDefaultsAndStamp(ctx, t, cp, dyn)
}

// checkProtectionPolicy: the policy puts the core's finalizer on every IPAddress as it is created,
// exactly once, and leaves updates alone.
func checkProtectionPolicy(ctx context.Context, t *testing.T, addrs dynamic.NamespaceableResourceInterface) {
	t.Helper()
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
}

// testClaimDefaultsAndStamp: the claim CRD's status default, and the stamp policy.
func testClaimDefaultsAndStamp(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, dyn dynamic.Interface) {
	t.Helper()

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

	stampPolicy(ctx, t, cp.Client, dyn, cp.Impersonate)
}

// stampPolicy: the claim's provisioner and resolved-class annotations are the core's. A tenant
// may not set them on a new claim, nor add, change or (before the status records the class)
// remove them; the core's ServiceAccount and admins may; a write that leaves them alone passes.
func stampPolicy(ctx context.Context, t *testing.T, admin kubernetes.Interface, dyn dynamic.Interface, as func(string, ...string) *rest.Config) {
	t.Helper()
	const ns = "tenant-stamp"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "claims"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"local.sdn.cozystack.io"}, Resources: []string{"ipaddressclaims"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "claims"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: restorer}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := func(cfg *rest.Config) dynamic.ResourceInterface {
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return d.Resource(claimGVR).Namespace(ns)
	}
	alice := client(as("alice", "system:authenticated"))
	core := client(as("system:serviceaccount:cozy-address-controller:address-controller", "system:serviceaccounts", "system:authenticated"))
	adminClaims := dyn.Resource(claimGVR).Namespace(ns)
	claim := func(name string, ann map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClaim",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"family": "IPv4"}}}
		u.SetAnnotations(ann)
		return u
	}
	stamp := map[string]string{"local.sdn.cozystack.io/provisioner": "metallb.drivers.local.sdn.cozystack.io",
		"local.sdn.cozystack.io/resolved-class": "public"}
	patch := func(c dynamic.ResourceInterface, name, body string) error {
		_, err := c.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// The policy reaches admission through an informer.
	eventually(t, 30*time.Second, "the stamp policy to refuse a tenant's stamp", func() (bool, error) {
		_, err := alice.Create(ctx, claim("probe", stamp), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "address-controller"), err
	})
	wantDenied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "may not") {
			t.Errorf("%s: %v, want it refused by address-controller-claim-stamp", what, err)
		}
	}
	wantAdmitted := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want it admitted", what, err)
		}
	}
	_, err := alice.Create(ctx, claim("stamped", stamp), metav1.CreateOptions{})
	wantDenied("a tenant creating a stamped claim", err)
	_, err = client(as(restorer, "system:serviceaccounts", "system:authenticated")).Create(ctx, claim("restored", stamp), metav1.CreateOptions{})
	wantAdmitted("a listed backup tool restoring a stamped claim", err)
	_, err = alice.Create(ctx, claim("web", map[string]string{"team": "a"}), metav1.CreateOptions{})
	wantAdmitted("a tenant creating a plain claim", err)
	wantDenied("a tenant stamping a class", patch(alice, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":"premium"}}}`))
	wantAdmitted("the core stamping", patch(core, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/provisioner":"metallb.drivers.local.sdn.cozystack.io","local.sdn.cozystack.io/resolved-class":"public"}}}`))
	wantAdmitted("a tenant changing another annotation", patch(alice, "web", `{"metadata":{"annotations":{"team":"b"}}}`))
	wantDenied("a tenant changing the resolved class", patch(alice, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":"premium"}}}`))
	wantDenied("a tenant removing the stamp before the class is recorded", patch(alice, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":null}}}`))
	wantAdmitted("an admin changing the stamp", patch(adminClaims, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":"private"}}}`))
	// Once the status records the class, the stamp decides nothing: it may go.
	got, err := adminClaims.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(got.Object, "private", "status", "className"); err != nil {
		t.Fatal(err)
	}
	if _, err := adminClaims.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantDenied("a tenant changing the stamp of a recorded claim", patch(alice, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":"premium"}}}`))
	wantAdmitted("a tenant removing the stamp of a recorded claim", patch(alice, "web", `{"metadata":{"annotations":{"local.sdn.cozystack.io/resolved-class":null,"local.sdn.cozystack.io/provisioner":null}}}`))
}
