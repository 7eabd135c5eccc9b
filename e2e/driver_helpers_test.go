package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

const (
	driverProvisioner = "metallb.drivers.local.sdn.cozystack.io"
	driverNamespace   = "cozy-metallb-iad"
	metallbNamespace  = "cozy-metallb"
	tenantLabel       = "namespace.cozystack.io/host"
	pinAnnotation     = "metallb.io/loadBalancerIPs"
	poolAnnotation    = "metallb.io/address-pool"
	claimAnnotation   = "local.sdn.cozystack.io/ip-address-claim"
	pinnedMarker      = "metallb.drivers.local.sdn.cozystack.io/pinned"
	labelAddress      = "metallb.drivers.local.sdn.cozystack.io/address"
	allowSharedIP     = "metallb.io/allow-shared-ip"
	sharingPrefix     = "metallb.drivers.local.sdn.cozystack.io/"
)

var poolGVK = schema.GroupVersionKind{Group: "metallb.io", Version: "v1beta1", Kind: "IPAddressPool"}

// tenantNamespace creates a namespace labelled like a Cozystack tenant's, deleted at the end.
func tenantNamespace(ctx context.Context, t *testing.T, c client.Client, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{tenantLabel: name + ".example.org"}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// newPool creates a MetalLB pool in cozy-metallb. autoAssign nil leaves MetalLB's default (true).
func newPool(ctx context.Context, t *testing.T, c client.Client, name string, autoAssign *bool, addresses ...string) {
	t.Helper()
	createPool(ctx, t, c, newPoolObject(name, autoAssign, addresses...))
}

// newPoolObject is newPool's pool, not created yet (for a test to add to its spec).
func newPoolObject(name string, autoAssign *bool, addresses ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(poolGVK)
	u.SetNamespace(metallbNamespace)
	u.SetName(name)
	spec := map[string]any{"addresses": toAny(addresses)}
	if autoAssign != nil {
		spec["autoAssign"] = *autoAssign
	}
	u.Object["spec"] = spec
	return u
}

// createPool creates a pool, deleted at the end of the test.
func createPool(ctx context.Context, t *testing.T, c client.Client, u *unstructured.Unstructured) {
	t.Helper()
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), u) })
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// newDriverClass creates a class of the MetalLB driver naming pool.
func newDriverClass(ctx context.Context, t *testing.T, c client.Client, name, pool string, policy ipamv1.ReclaimPolicy) *ipamv1.IPAddressClass {
	t.Helper()
	cls := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: driverProvisioner, ReclaimPolicy: policy,
			Parameters: map[string]string{"pool": pool}}}
	if err := c.Create(ctx, cls); err != nil {
		t.Fatal(err)
	}
	return cls
}

// poolWithClass creates an autoAssign: false pool and a class naming it, waits until the driver
// accepts the class, and tears both down (with every address of the class) at the end.
func poolWithClass(ctx context.Context, t *testing.T, c client.Client, name string, policy ipamv1.ReclaimPolicy, addresses ...string) *ipamv1.IPAddressClass {
	t.Helper()
	newPool(ctx, t, c, name, ptrTo(false), addresses...)
	cls := newDriverClass(ctx, t, c, name, name, policy)
	t.Cleanup(func() { deleteClassAndAddresses(t, c, name) })
	waitAccepted(ctx, t, c, name, metav1.ConditionTrue)
	return cls
}

func deleteClassAndAddresses(t *testing.T, c client.Client, class string) {
	ctx := context.Background()
	_ = c.Delete(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: class}})
	// Claims and addresses of the class are deleted on every pass, so that ones created while
	// the teardown runs (a late auto-claim, a driver finishing a provisioning) go too.
	eventually(ctx, t, 120*time.Second, "class "+class+" to be deleted", func(ctx context.Context) (bool, error) {
		var claims ipamv1.IPAddressClaimList
		_ = c.List(ctx, &claims)
		for i := range claims.Items {
			if cl := &claims.Items[i]; cl.Status.ClassName == class || cl.Spec.ClassName == class ||
				cl.Annotations[ipamv1.AnnotationResolvedClass] == class {
				_ = c.Delete(ctx, &claims.Items[i])
			}
		}
		var addrs ipamv1.IPAddressList
		_ = c.List(ctx, &addrs)
		for i := range addrs.Items {
			if addrs.Items[i].Spec.ClassName == class {
				_ = c.Delete(ctx, &addrs.Items[i])
			}
		}
		err := c.Get(ctx, client.ObjectKey{Name: class}, &ipamv1.IPAddressClass{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

func waitAccepted(ctx context.Context, t *testing.T, c client.Client, class string, status metav1.ConditionStatus) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually(ctx, t, 30*time.Second, fmt.Sprintf("class %s Accepted=%s", class, status), func(ctx context.Context) (bool, error) {
		var cls ipamv1.IPAddressClass
		if err := c.Get(ctx, client.ObjectKey{Name: class}, &cls); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(cls.Status.Conditions, ipamv1.ConditionAccepted)
		return cond != nil && cond.Status == status && cond.ObservedGeneration == cls.Generation, nil
	})
	return cond
}

func newTenantClaim(ctx context.Context, t *testing.T, c client.Client, ns, name, class string, fam ipamv1.IPFamily) *ipamv1.IPAddressClaim {
	t.Helper()
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: fam}}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

func waitClaimBound(ctx context.Context, t *testing.T, c client.Client, ns, name string) *ipamv1.IPAddressClaim {
	t.Helper()
	var claim ipamv1.IPAddressClaim
	eventually(ctx, t, 60*time.Second, fmt.Sprintf("claim %s/%s to be Bound", ns, name), func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &claim)
		return claim.Status.Phase == ipamv1.ClaimBound, err
	})
	return &claim
}

func claimIPs(claim *ipamv1.IPAddressClaim) []string {
	var out []string
	for _, a := range claim.Status.Addresses {
		out = append(out, a.Address)
	}
	return out
}

// lbService makes a LoadBalancer Service; families nil leaves the cluster's default (IPv4).
func lbService(ns, name string, annotations map[string]string, dual bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if dual {
		p := corev1.IPFamilyPolicyRequireDualStack
		svc.Spec.IPFamilyPolicy = &p
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	return svc
}

func ingressOf(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// waitIngress waits until the Service serves exactly want (nil: nothing).
func waitIngress(ctx context.Context, t *testing.T, c client.Client, ns, name string, want []string) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	want = sorted(want)
	eventually(ctx, t, 60*time.Second, fmt.Sprintf("Service %s/%s to serve %v", ns, name, want), func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
			return false, err
		}
		return slices.Equal(ingressOf(&svc), want), nil
	})
	return &svc
}

// waitHeld waits until the address is held by exactly one placeholder in the driver's namespace
// that serves its IP, and is attached to nothing.
func waitHeld(ctx context.Context, t *testing.T, c client.Client, addressName, ip string) {
	t.Helper()
	eventually(ctx, t, 60*time.Second, "address "+addressName+" to be held by a placeholder", func(ctx context.Context) (bool, error) {
		var a ipamv1.IPAddress
		if err := c.Get(ctx, client.ObjectKey{Name: addressName}, &a); err != nil {
			return false, err
		}
		holders, err := servicesServing(ctx, c, ip)
		if err != nil {
			return false, err
		}
		if a.Status.AttachedTo == nil && meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionHeld) &&
			len(holders) == 1 && holders[0].Namespace == driverNamespace {
			return true, nil
		}
		// Not yet: say what there is, so a timeout tells why.
		var served []string
		for _, s := range holders {
			served = append(served, s.Namespace+"/"+s.Name)
		}
		held := "no Held condition"
		if h := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld); h != nil {
			held = fmt.Sprintf("Held=%s/%s: %s", h.Status, h.Reason, h.Message)
		}
		return false, fmt.Errorf("phase %s, attachedTo %v, %s, served by %v", a.Status.Phase, a.Status.AttachedTo, held, served)
	})
}

// servicesServing lists every Service whose load-balancer status has ip.
func servicesServing(ctx context.Context, c client.Client, ip string) ([]corev1.Service, error) {
	var all corev1.ServiceList
	if err := c.List(ctx, &all); err != nil {
		return nil, err
	}
	var out []corev1.Service
	for _, s := range all.Items {
		if slices.Contains(ingressOf(&s), ip) {
			out = append(out, s)
		}
	}
	return out, nil
}

func waitServiceEvent(ctx context.Context, t *testing.T, c client.Client, ns, name, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(ctx, t, 30*time.Second, fmt.Sprintf("event %s on %s/%s", reason, ns, name), func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func patchAnnotations(ctx context.Context, t *testing.T, c client.Client, obj client.Object, set map[string]*string) {
	t.Helper()
	var parts []string
	for k, v := range set {
		if v == nil {
			parts = append(parts, fmt.Sprintf("%q:null", k))
		} else {
			parts = append(parts, fmt.Sprintf("%q:%q", k, *v))
		}
	}
	patch := []byte(`{"metadata":{"annotations":{` + strings.Join(parts, ",") + `}}}`)
	if err := throughWebhook(ctx, func() error {
		return c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch))
	}); err != nil {
		t.Fatal(err)
	}
}

// throughWebhook runs a Service write the way a client does below Kubernetes 1.36: the driver's
// parking webhook (failurePolicy Fail) refuses a write to a Service that names a claim while no
// replica of the driver answers, for example for the second or two after a restart in which the
// new pod is Ready but no Service route leads to it yet, and the client retries it. Any other
// error, or a refusal that lasts a minute, is returned.
func throughWebhook(ctx context.Context, write func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := write()
		if err == nil || !webhookUnavailable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// webhookUnavailable tells whether the apiserver refused a write because it could not call an
// admission webhook (as opposed to the webhook answering with a refusal).
func webhookUnavailable(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}

// invariantScope is what checkInvariants looks at: the running test's classes, and the
// namespaces where Services of the test live (the driver's namespace, where the placeholders
// are, is always included).
type invariantScope struct {
	Classes    []string
	Namespaces []string
}

// checkInvariants verifies the driver's promises over the running test's objects: every address
// of the scope's classes is either attached to exactly the one Service serving it, or held by
// exactly one placeholder; no IP is served by two of the Services in scope. It lists Services
// only in the scope's namespaces and the driver's, never the whole cluster.
func checkInvariants(ctx context.Context, t *testing.T, c client.Client, scope invariantScope) {
	t.Helper()
	if len(scope.Classes) == 0 {
		t.Fatal("checkInvariants needs the test's classes")
	}
	eventually(ctx, t, 90*time.Second, "every reserved address held once and no IP served twice", func(ctx context.Context) (bool, error) {
		served := map[string][]corev1.Service{}
		for _, ns := range append([]string{driverNamespace}, scope.Namespaces...) {
			var list corev1.ServiceList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, err
			}
			for _, s := range list.Items {
				for _, ip := range ingressOf(&s) {
					served[ip] = append(served[ip], s)
				}
			}
		}
		var addrs ipamv1.IPAddressList
		if err := c.List(ctx, &addrs); err != nil {
			return false, err
		}
		for _, a := range addrs.Items {
			if a.DeletionTimestamp != nil || !slices.Contains(scope.Classes, a.Spec.ClassName) {
				continue
			}
			svcs := served[a.Spec.Address]
			if a.Status.AttachedTo != nil {
				// The attached Service shares the IP with the address's hold, when both carry the
				// driver's sharing key: the hold stays.
				var key string
				for _, s := range svcs {
					if k := s.Annotations[allowSharedIP]; s.UID == a.Status.AttachedTo.UID && len(k) > len(sharingPrefix) && strings.HasPrefix(k, sharingPrefix) {
						key = k
					}
				}
				svcs = slices.DeleteFunc(slices.Clone(svcs), func(s corev1.Service) bool {
					return key != "" && s.Namespace == driverNamespace && s.Labels[labelAddress] == a.Name && s.Annotations[allowSharedIP] == key
				})
				served[a.Spec.Address] = svcs
			}
			if len(svcs) != 1 {
				return false, fmt.Errorf("%s is served by %d Services", a.Spec.Address, len(svcs))
			}
			s := svcs[0]
			switch {
			case a.Status.AttachedTo != nil:
				if s.UID != a.Status.AttachedTo.UID {
					return false, fmt.Errorf("%s is attached to %s but served by %s/%s", a.Name, a.Status.AttachedTo.Name, s.Namespace, s.Name)
				}
			case s.Namespace != driverNamespace:
				return false, fmt.Errorf("%s is not attached but served by %s/%s", a.Name, s.Namespace, s.Name)
			}
		}
		for ip, svcs := range served {
			if len(svcs) > 1 {
				return false, fmt.Errorf("%s is served by %d Services", ip, len(svcs))
			}
		}
		return true, nil
	})
}

// restart kills the named processes (as a crash would: SIGKILL, all of them before any comes
// back) and waits until the control plane's supervisor has restarted each and it is ready; on
// kind, it deletes their pods without a grace period.
func restart(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	if r, ok := cluster.(provider.Restarter); ok {
		// kind: the components' pods are deleted at once and replaced by their Deployments.
		if err := r.Restart(ctx, names...); err != nil {
			t.Fatal(err)
		}
		return
	}
	local := localCluster(t, "restarting components needs the local or the kind provider")
	var victims []*controlplane.Process
	var restarts []int
	for _, p := range local.Processes() {
		if slices.Contains(names, p.Spec.Name) {
			victims = append(victims, p)
			restarts = append(restarts, p.Restarts())
		}
	}
	if len(victims) != len(names) {
		t.Fatalf("found %d of the processes %v", len(victims), names)
	}
	for _, p := range victims {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, p := range victims {
		if err := p.WaitReady(ctx, restarts[i]+1); err != nil {
			t.Fatal(err)
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// localCluster returns the local provider's cluster, or skips the test on any other provider
// saying what it needs that only local processes give (why; e2e/README.md lists them).
func localCluster(t *testing.T, why ...string) *provider.LocalCluster {
	t.Helper()
	local, ok := cluster.(*provider.LocalCluster)
	if !ok {
		reason := strings.Join(why, "; ")
		if reason == "" {
			reason = "it controls the local provider's processes"
		}
		t.Skipf("SKIPPED on the %s provider: %s needs the local provider: %s", providerName(), t.Name(), reason)
	}
	return local
}

func providerName() string {
	if _, ok := cluster.(*provider.LocalCluster); ok {
		return "local"
	}
	return "kind"
}

// explainOnFailure logs, when the test has failed, what says why MetalLB did what it did: the
// events of ns, MetalLB's pools and, on kind, the last lines of MetalLB's controller's log (the
// local provider keeps its processes' logs in E2E_STATE_DIR).
func explainOnFailure(t *testing.T, c client.Client, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var events eventsv1.EventList
		if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Logf("events of %s: %v", ns, err)
		}
		for _, e := range events.Items {
			t.Logf("event %s/%s %s %s: %s", e.Regarding.Kind, e.Regarding.Name, e.Type, e.Reason, e.Note)
		}
		pools := &unstructured.UnstructuredList{}
		pools.SetGroupVersionKind(poolGVK.GroupVersion().WithKind(poolGVK.Kind + "List"))
		if err := c.List(ctx, pools, client.InNamespace(metallbNamespace)); err != nil {
			t.Logf("MetalLB's pools: %v", err)
		}
		for _, p := range pools.Items {
			addrs, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "addresses")
			auto, found, _ := unstructured.NestedBool(p.Object, "spec", "autoAssign")
			t.Logf("pool %s: %v autoAssign %v (set: %v) deleting %v", p.GetName(), addrs, auto, found, p.GetDeletionTimestamp() != nil)
		}
		if _, ok := cluster.(provider.Restarter); !ok {
			return
		}
		cs, err := kubernetes.NewForConfig(cluster.Config())
		if err != nil {
			t.Log(err)
			return
		}
		w := provider.KindWorkloads["metallb-controller"]
		pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.Selector})
		if err != nil {
			t.Logf("MetalLB's controller pods: %v", err)
			return
		}
		tail := int64(80)
		for _, p := range pods.Items {
			raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
			t.Logf("MetalLB's controller %s, last %d lines (%v):\n%s", p.Name, tail, err, raw)
		}
	})
}
