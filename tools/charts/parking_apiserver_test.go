package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cozystack/reserved-ips/tools/controlplane"
)

const (
	driverProvisioner = "metallb.drivers.local.sdn.cozystack.io"
	tenantLabel       = "namespace.cozystack.io/host"
)

var classGVR = schema.GroupVersionResource{Group: "local.sdn.cozystack.io", Version: "v1alpha1", Resource: "ipaddressclasses"}

// parkingEnv is a real kube-apiserver with the core's CRDs and the driver chart installed (no
// workload), a tenant namespace and a plain one, and alice, who may write Services in both.
type parkingEnv struct {
	t      *testing.T
	ctx    context.Context
	admin  kubernetes.Interface
	alice  kubernetes.Interface
	dyn    dynamic.Interface
	tenant string
	plain  string
	n      int
}

func lb(name string, ann map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
}

func isParked(s *corev1.Service) bool {
	return s.Annotations[parkingAnnotation] == parkingPool
}

// create creates svc in ns as c (a fresh name each time) and returns what the apiserver stored.
func (e *parkingEnv) create(c kubernetes.Interface, ns string, svc *corev1.Service) (*corev1.Service, error) {
	e.n++
	svc = svc.DeepCopy()
	svc.Name = fmt.Sprintf("%s-%d", svc.Name, e.n)
	return c.CoreV1().Services(ns).Create(e.ctx, svc, metav1.CreateOptions{})
}

func (e *parkingEnv) mustCreate(c kubernetes.Interface, ns string, svc *corev1.Service) *corev1.Service {
	e.t.Helper()
	out, err := e.create(c, ns, svc)
	if err != nil {
		e.t.Fatalf("creating %s: %v", svc.Name, err)
	}
	return out
}

// patch merge-patches a Service's metadata as c.
func (e *parkingEnv) patch(c kubernetes.Interface, s *corev1.Service, patch map[string]any) (*corev1.Service, error) {
	data, err := json.Marshal(patch)
	if err != nil {
		e.t.Fatal(err)
	}
	return c.CoreV1().Services(s.Namespace).Patch(e.ctx, s.Name, types.MergePatchType, data, metav1.PatchOptions{})
}

// wantParked checks a Service the apiserver returned.
func (e *parkingEnv) wantParked(what string, s *corev1.Service, err error, parked bool) {
	e.t.Helper()
	if err != nil {
		e.t.Errorf("%s: %v", what, err)
		return
	}
	if isParked(s) != parked {
		e.t.Errorf("%s: parked=%v, want %v (annotations %v)", what, isParked(s), parked, s.Annotations)
	}
}

// eventuallyParks waits until a dry-run create of svc as alice in the tenant namespace comes back
// parked as wanted: policy, binding and param changes reach the apiserver's admission through
// informers.
func (e *parkingEnv) eventuallyParks(what string, svc *corev1.Service, parked bool) {
	e.t.Helper()
	eventually(e.t, 30*time.Second, what, func() (bool, error) {
		got, err := e.alice.CoreV1().Services(e.tenant).Create(e.ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return isParked(got) == parked, fmt.Errorf("parked=%v", isParked(got))
	})
}

func (e *parkingEnv) class(name, provisioner string, autoClaim bool) {
	e.t.Helper()
	c := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClass",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"provisioner": provisioner}}}
	if autoClaim {
		c.SetAnnotations(map[string]string{annAutoClaimClass: "true"})
	}
	created, err := e.dyn.Resource(classGVR).Create(e.ctx, c, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	// Its driver accepts it: auto-claim, and parking for it, use a marked class only then.
	created.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": "True",
		"reason": "Accepted", "message": "the test plays the driver", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	if _, err := e.dyn.Resource(classGVR).UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *parkingEnv) markAutoClaim(name string, on bool) {
	e.t.Helper()
	var v any
	if on {
		v = "true"
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annAutoClaimClass: v}}})
	if _, err := e.dyn.Resource(classGVR).Patch(e.ctx, name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// The parking policies on a real kube-apiserver (v1.37.2), installed by Helm from the chart with
// the capabilities discovery reports: a tenant's LoadBalancer Service that names a claim, or
// that auto-claim will serve from a class of this driver, is parked on create; one that asked
// for its address another way is not; an existing Service with an address is not parked by an
// update; a tenant may drop the parked value (it comes back) but still may set no other pool.
func TestParkingPoliciesOnTheAPIServer(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	disc := cp.Client.Discovery()
	_, lists, err := disc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.APIResources {
			served[l.GroupVersion+"/"+r.Kind] = true
		}
	}
	if !served["admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"] {
		// Below 1.36 the chart parks through the driver's webhook instead (its test on a real
		// apiserver is metallb-iad's TestParkingWebhookOnARealAPIServer): the install renders
		// the webhook's configuration and none of the policies.
		parkingBelow136(t, cp)
		return
	}
	for _, k := range ServedKinds {
		if !served[k] {
			t.Fatalf("the apiserver does not serve %s, which offline renders assume (ServedKinds)", k)
		}
	}
	if err := cp.InstallCRDs(ctx, filepath.Join(Dir(root, "address-controller"), "files", "crds")); err != nil {
		t.Fatal(err)
	}
	const ns = "cozy-metallb-iad"
	for _, n := range []string{ns, cp.MetalLBNamespace} {
		if err := cp.EnsureNamespace(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := Apply(ctx, cp.Kubeconfig, ns, "metallb-iad", c, map[string]any{"deploy": false, "metallbNamespace": cp.MetalLBNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range parkingPolicies {
		if !strings.Contains(rel.Manifest, "name: "+name) {
			t.Fatalf("helm install on the apiserver did not render %s: the capability check misses the served kind", name)
		}
	}

	e := &parkingEnv{t: t, ctx: ctx, admin: cp.Client, tenant: "tenant-park", plain: "plain-park"}
	if e.dyn, err = dynamic.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	if e.alice, err = kubernetes.NewForConfig(cp.Impersonate("alice", "system:authenticated")); err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureNamespace(ctx, e.tenant, map[string]string{tenantLabel: "tenant-root"}); err != nil {
		t.Fatal(err)
	}
	if err := cp.EnsureNamespace(ctx, e.plain, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{e.tenant, e.plain} {
		if _, err := cp.Client.RbacV1().Roles(n).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "services"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Client.RbacV1().RoleBindings(n).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "services"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim := map[string]string{annServiceClaim: "web-ip"}
	// Both admission policies take effect through the apiserver's informers.
	e.eventuallyParks("the claimed policy to take effect", lb("probe", claim), true)
	eventually(t, 30*time.Second, "the service-pins policy to take effect", func() (bool, error) {
		_, err := e.alice.CoreV1().Services(e.tenant).Create(ctx, lb("probe", map[string]string{"metallb.io/address-pool": "pool-a"}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), err
	})

	// A Service that names a claim is parked, by the tenant's own create.
	named := e.mustCreate(e.alice, e.tenant, lb("named", claim))
	e.wantParked("alice creates a Service naming a claim", named, nil, true)
	// Not in a namespace without the tenant label.
	s, err := e.create(e.alice, e.plain, lb("named", claim))
	e.wantParked("alice names a claim outside tenant namespaces", s, err, false)
	// Not when the Service asked for its address another way (the admin may write what tenants may not).
	withClass := lb("lbclass", claim)
	withClass.Spec.LoadBalancerClass = ptrTo("example.com/other-lb")
	s, err = e.create(e.alice, e.tenant, withClass)
	e.wantParked("alice names a claim with a loadBalancerClass", s, err, false)
	withIP := lb("lbip", claim)
	withIP.Spec.LoadBalancerIP = "203.0.113.40"
	s, err = e.create(e.admin, e.tenant, withIP)
	e.wantParked("the admin names a claim with spec.loadBalancerIP", s, err, false)
	for _, k := range metallbAnnotations {
		ann := map[string]string{annServiceClaim: "web-ip", k: "pool-a"}
		s, err = e.create(e.admin, e.tenant, lb("metallb", ann))
		e.wantParked("the admin names a claim with "+k, s, err, false)
		if err == nil && s.Annotations[k] != "pool-a" {
			t.Errorf("%s was changed to %q", k, s.Annotations[k])
		}
	}
	cip := lb("clusterip", claim)
	cip.Spec.Type = corev1.ServiceTypeClusterIP
	s, err = e.create(e.alice, e.tenant, cip)
	e.wantParked("alice names a claim on a ClusterIP Service", s, err, false)

	// A tenant may drop the parked value: the claimed policy puts it back and service-pins
	// admits the write. Any other pool value stays denied.
	s, err = e.patch(e.alice, named, map[string]any{"metadata": map[string]any{"annotations": map[string]any{parkingAnnotation: nil}}})
	e.wantParked("alice drops the parked value of a Service naming a claim", s, err, true)
	for _, v := range []string{"pool-a", parkingPool + "-x"} {
		_, err = e.patch(e.alice, named, map[string]any{"metadata": map[string]any{"annotations": map[string]any{parkingAnnotation: v}}})
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), parkingAnnotation) || !strings.Contains(fmt.Sprint(err), "alice") {
			t.Errorf("alice sets %s=%s on a parked Service: %v, want a denial naming the field and alice", parkingAnnotation, v, err)
		}
	}
	_, err = e.patch(e.alice, named, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"metallb.universe.tf/address-pool": parkingPool}}})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("alice adds the parked value under the deprecated key: %v, want a denial", err)
	}
	// A tenant's plain Service (no claim) with the parked value is admitted as is, and unparked.
	plain := e.mustCreate(e.alice, e.tenant, lb("self-parked", map[string]string{parkingAnnotation: parkingPool}))
	e.wantParked("alice parks her own Service", plain, nil, true)
	s, err = e.patch(e.alice, plain, map[string]any{"metadata": map[string]any{"annotations": map[string]any{parkingAnnotation: nil}}})
	e.wantParked("alice unparks her own Service (no auto-claim class)", s, err, false)

	// Auto-claim: a class of this driver and one of another driver, neither marked yet.
	e.class("park-gold", driverProvisioner, false)
	e.class("park-silver", "other.drivers.example.com", false)
	e.eventuallyParks("the gold class to reach the auto-claim policy", lb("probe", map[string]string{annServiceClass: "park-gold"}), true)
	s, err = e.create(e.alice, e.tenant, lb("gold", map[string]string{annServiceClass: "park-gold"}))
	e.wantParked("alice names a class of this driver", s, err, true)
	s, err = e.create(e.alice, e.tenant, lb("silver", map[string]string{annServiceClass: "park-silver"}))
	e.wantParked("alice names a class of another driver", s, err, false)
	s, err = e.create(e.alice, e.tenant, lb("missing", map[string]string{annServiceClass: "park-missing"}))
	e.wantParked("alice names a class that does not exist", s, err, false)
	s, err = e.create(e.alice, e.tenant, lb("gold-optout", map[string]string{annServiceClass: "park-gold", annAutoClaim: "False"}))
	e.wantParked("alice names a class of this driver and opts out of auto-claim", s, err, false)
	s, err = e.create(e.alice, e.tenant, lb("unannotated", nil))
	e.wantParked("alice creates an unannotated Service while no auto-claim class exists", s, err, false)
	// Existing Services: one MetalLB served, one still waiting.
	served1 := e.mustCreate(e.admin, e.tenant, lb("served", nil))
	served1.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.41"}}
	if served1, err = e.admin.CoreV1().Services(e.tenant).UpdateStatus(ctx, served1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := e.mustCreate(e.admin, e.tenant, lb("waiting", nil))

	// An auto-claim class of another driver parks nothing.
	e.markAutoClaim("park-silver", true)
	s, err = e.create(e.alice, e.tenant, lb("unannotated", nil))
	e.wantParked("alice creates an unannotated Service while only another driver's class is marked", s, err, false)
	e.markAutoClaim("park-silver", false)
	// An auto-claim class of this driver parks a new unannotated Service.
	e.markAutoClaim("park-gold", true)
	e.eventuallyParks("the auto-claim mark to reach the policy", lb("probe", nil), true)
	s, err = e.create(e.alice, e.tenant, lb("unannotated", nil))
	e.wantParked("alice creates an unannotated Service while this driver's class is marked", s, err, true)
	s, err = e.create(e.alice, e.tenant, lb("optout", map[string]string{annAutoClaim: "false"}))
	e.wantParked("alice opts out of auto-claim", s, err, false)
	s, err = e.create(e.alice, e.tenant, lb("silver", map[string]string{annServiceClass: "park-silver"}))
	e.wantParked("alice names another driver's class while this driver's is marked", s, err, false)
	// Updates: the Service showing an address keeps it; the waiting one is parked.
	label := map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "web"}}}
	s, err = e.patch(e.alice, served1, label)
	e.wantParked("alice updates a Service that shows an address", s, err, false)
	if err == nil && (len(s.Status.LoadBalancer.Ingress) != 1 || s.Status.LoadBalancer.Ingress[0].IP != "203.0.113.41") {
		t.Errorf("the update lost the Service's address: %v", s.Status.LoadBalancer.Ingress)
	}
	s, err = e.patch(e.alice, waiting, label)
	e.wantParked("alice updates a Service that shows no address yet", s, err, true)
	// Dropping the parked value of an auto-claimed Service brings it back too.
	s, err = e.patch(e.alice, s, map[string]any{"metadata": map[string]any{"annotations": map[string]any{parkingAnnotation: nil}}})
	e.wantParked("alice drops the parked value of an auto-claimed Service", s, err, true)

	// The driver's attach patch (pin, marker, parked value removed, in one write) is not parked
	// again; its unpin of a Service that still names a claim is.
	driver, err := kubernetes.NewForConfig(cp.Impersonate("system:serviceaccount:"+ns+":metallb-iad", "system:serviceaccounts"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client.RbacV1().RoleBindings(e.tenant).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "driver"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "services"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "metallb-iad", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const marker = "metallb.drivers.local.sdn.cozystack.io/pinned"
	s, err = e.patch(driver, named, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		parkingAnnotation: nil, "metallb.io/loadBalancerIPs": "203.0.113.42", marker: "true"}}})
	e.wantParked("the driver pins a parked Service", s, err, false)
	if err == nil && s.Annotations["metallb.io/loadBalancerIPs"] != "203.0.113.42" {
		t.Errorf("the driver's pin is gone: %v", s.Annotations)
	}
	s, err = e.patch(driver, named, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"metallb.io/loadBalancerIPs": nil, marker: nil}}})
	e.wantParked("the driver unpins a Service that still names its claim", s, err, true)
	if err == nil && slices.ContainsFunc([]string{"metallb.io/loadBalancerIPs", marker}, func(k string) bool { _, ok := s.Annotations[k]; return ok }) {
		t.Errorf("the unpin did not go through: %v", s.Annotations)
	}
}

func ptrTo[T any](v T) *T { return &v }

// parkingBelow136: on an apiserver without MutatingAdmissionPolicy, Helm's install renders the
// parking webhook and no parking policy, and the apiserver takes the webhook's configuration.
func parkingBelow136(t *testing.T, cp *controlplane.ControlPlane) {
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx, filepath.Join(Dir(root, "address-controller"), "files", "crds")); err != nil {
		t.Fatal(err)
	}
	const ns = "cozy-metallb-iad"
	for _, n := range []string{ns, cp.MetalLBNamespace} {
		if err := cp.EnsureNamespace(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := Apply(ctx, cp.Kubeconfig, ns, "metallb-iad", c, map[string]any{"deploy": false, "metallbNamespace": cp.MetalLBNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range parkingPolicies {
		if strings.Contains(rel.Manifest, "name: "+name) {
			t.Errorf("helm install rendered %s on an apiserver without MutatingAdmissionPolicy", name)
		}
	}
	if _, err := cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "metallb-iad-parking", metav1.GetOptions{}); err != nil {
		t.Errorf("the parking webhook's configuration is not installed: %v", err)
	}
}
