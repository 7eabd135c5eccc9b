package tenantcluster

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/component-base/featuregate"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const (
	testNS      = "tenant-example"
	testCluster = "kubernetes-guest"
	claimAnno   = "local.sdn.cozystack.io/ip-address-claim"
)

func guestService(uid types.UID, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: uid, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080},
				{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(8443), NodePort: 30443},
			},
		},
	}
}

// newLB is the stand-in on a fake host with the given poll settings (whole seconds, as in the
// provider's config).
func newLB(t *testing.T, interval, timeout int, selectorless, eps bool) (*LoadBalancer, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithStatusSubresource(&corev1.Service{}).Build()
	return &LoadBalancer{Namespace: testNS, Client: c, InfraLabels: map[string]string{"internal.cozystack.io/tenantresource": "true"},
		Config: LoadBalancerConfig{Enabled: true, CreationPollInterval: &interval, CreationPollTimeout: &timeout,
			Selectorless: &selectorless, EnableEPSController: &eps}}, c
}

// setIngress writes the host Service's load-balancer status, as MetalLB would, after a delay.
func setIngress(t *testing.T, c client.Client, name string, after time.Duration, ips ...string) <-chan error {
	done := make(chan error, 1)
	go func() {
		time.Sleep(after)
		var svc corev1.Service
		ctx := context.Background()
		for {
			if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, &svc); err == nil {
				break
			} else if !apierrors.IsNotFound(err) {
				done <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		svc.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		done <- c.Status().Update(ctx, &svc)
	}()
	return done
}

func ingress(st *corev1.LoadBalancerStatus) []string {
	if st == nil {
		return nil
	}
	svc := &corev1.Service{Status: corev1.ServiceStatus{LoadBalancer: *st}}
	return IngressIPs(svc)
}

func TestHostServiceNameIsAAndTheGuestUIDCutTo32(t *testing.T) {
	lb, _ := newLB(t, 5, 60, true, true)
	got := lb.GetLoadBalancerName(context.Background(), testCluster, guestService("f6ebf172-2bb1-11e9-b210-d663bd873d93", nil))
	if want := "af6ebf1722bb111e9b210d663bd873d9"; got != want {
		t.Fatalf("name %q, want %q (the provider's own test fixture)", got, want)
	}
}

func TestEnsureCreatesTheHostServiceAsTheProviderDoes(t *testing.T) {
	lb, c := newLB(t, 1, 5, true, true)
	guest := guestService("1d3b0d9a-6b0e-4a5c-9f00-9a8e7e6d5c4b", map[string]string{claimAnno: "web", "example.org/other": "x"})
	guest.Spec.LoadBalancerIP = "192.0.2.7"
	guest.Spec.ExternalIPs = []string{"192.0.2.8"}
	name := lb.GetLoadBalancerName(context.Background(), testCluster, guest)
	set := setIngress(t, c, name, 300*time.Millisecond, "198.51.100.7")
	start := time.Now()
	st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-set; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("returned after %s: the first look is one interval (1s) after the create", took)
	}
	if diff := cmp.Diff([]string{"198.51.100.7"}, ingress(st)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	var host corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, &host); err != nil {
		t.Fatal(err)
	}
	want := corev1.ServiceSpec{
		Type:                  corev1.ServiceTypeLoadBalancer,
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
		Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(30080)},
			{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(30443)},
		},
		LoadBalancerIP: "192.0.2.7",
		ExternalIPs:    []string{"192.0.2.8"},
	}
	if diff := cmp.Diff(want, host.Spec); diff != "" {
		t.Errorf("host spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(guest.Annotations, host.Annotations); diff != "" {
		t.Errorf("host annotations: the guest's, copied (-want +got):\n%s", diff)
	}
	wantLabels := map[string]string{
		TenantServiceNameLabelKey: "web", TenantServiceNamespaceLabelKey: "default", TenantClusterNameLabelKey: testCluster,
		"internal.cozystack.io/tenantresource": "true",
	}
	if diff := cmp.Diff(wantLabels, host.Labels); diff != "" {
		t.Errorf("host labels (-want +got):\n%s", diff)
	}
}

func TestSelectorFollowsTheConfig(t *testing.T) {
	worker := map[string]string{TenantNodeRoleLabelKey: "worker", TenantClusterNameLabelKey: testCluster}
	for _, tc := range []struct {
		name              string
		selectorless, eps bool
		policy            corev1.ServiceExternalTrafficPolicy
		want              map[string]string
	}{
		{"selectorless (Cozystack)", true, true, corev1.ServiceExternalTrafficPolicyCluster, nil},
		{"with a selector", false, false, corev1.ServiceExternalTrafficPolicyCluster, worker},
		{"EndpointSlice controller, policy Local", false, true, corev1.ServiceExternalTrafficPolicyLocal, nil},
		{"EndpointSlice controller, policy Cluster", false, true, corev1.ServiceExternalTrafficPolicyCluster, worker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb, _ := newLB(t, 5, 60, tc.selectorless, tc.eps)
			guest := guestService("0b6e", nil)
			guest.Spec.ExternalTrafficPolicy = tc.policy
			got := lb.HostService(testCluster, guest, HostPorts(guest)).Spec.Selector
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
		})
	}
}

// The first ingress the poll sees is what the guest gets, even if the host's changes right after.
func TestEnsureReturnsTheFirstIngressItSees(t *testing.T) {
	lb, c := newLB(t, 1, 10, true, true)
	guest := guestService("6c8e1d55-0c3d-4c59-8d1a-2c0a5c0e8f11", nil)
	name := lb.GetLoadBalancerName(context.Background(), testCluster, guest)
	first := setIngress(t, c, name, 200*time.Millisecond, "198.51.100.1")
	st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-setIngress(t, c, name, 0, "198.51.100.2"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"198.51.100.1"}, ingress(st)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

// After the poll times out, a retry returns the host's status as it is, without error, empty or
// not; so does every later call for the same guest Service.
func TestAfterThePollTimesOutEnsureReturnsTheCurrentStatus(t *testing.T) {
	lb, c := newLB(t, 1, 2, true, true)
	guest := guestService("9f1a2b3c-4d5e-4f60-8a7b-6c5d4e3f2a1b", map[string]string{claimAnno: "late"})
	start := time.Now()
	_, err := lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil)
	if !errors.Is(err, ErrPollTimeout) || err.Error() != "timed out waiting for the condition" {
		t.Fatalf("err %v, want the provider's poll timeout", err)
	}
	if took := time.Since(start); took < 2*time.Second || took > 4*time.Second {
		t.Errorf("the poll ended after %s, want its 2s timeout", took)
	}
	st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil)
	if err != nil || len(ingress(st)) != 0 {
		t.Fatalf("the retry: status %v, err %v; want empty and no error", ingress(st), err)
	}
	name := lb.GetLoadBalancerName(context.Background(), testCluster, guest)
	if err := <-setIngress(t, c, name, 0, "198.51.100.9"); err != nil {
		t.Fatal(err)
	}
	st, err = lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil)
	if err != nil || !cmp.Equal(ingress(st), []string{"198.51.100.9"}) {
		t.Fatalf("a later call: status %v, err %v; want the address the host has now", ingress(st), err)
	}
	st, exists, err := lb.GetLoadBalancer(context.Background(), testCluster, guest)
	if err != nil || !exists || !cmp.Equal(ingress(st), []string{"198.51.100.9"}) {
		t.Fatalf("GetLoadBalancer: %v %t %v", ingress(st), exists, err)
	}
}

// On an existing host Service only the ports follow the guest: annotations, spec.loadBalancerIP
// and the rest stay as they were at creation.
func TestEnsureOnAnExistingHostServiceUpdatesOnlyPorts(t *testing.T) {
	lb, c := newLB(t, 1, 5, true, true)
	guest := guestService("2e4f6a8c-0b1d-4e3f-a5b6-c7d8e9f0a1b2", map[string]string{claimAnno: "first"})
	name := lb.GetLoadBalancerName(context.Background(), testCluster, guest)
	set := setIngress(t, c, name, 0, "198.51.100.3")
	if _, err := lb.EnsureLoadBalancer(context.Background(), testCluster, guest, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-set; err != nil {
		t.Fatal(err)
	}
	changed := guest.DeepCopy()
	changed.Annotations = map[string]string{claimAnno: "second", "local.sdn.cozystack.io/ip-address-class": "private"}
	changed.Spec.LoadBalancerIP = "192.0.2.99"
	changed.Spec.Ports = changed.Spec.Ports[:1]
	changed.Spec.Ports[0].NodePort = 31000
	start := time.Now()
	st, err := lb.EnsureLoadBalancer(context.Background(), testCluster, changed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("took %s: an existing host Service is not polled", took)
	}
	if !cmp.Equal(ingress(st), []string{"198.51.100.3"}) {
		t.Errorf("status %v, want the host's", ingress(st))
	}
	var host corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, &host); err != nil {
		t.Fatal(err)
	}
	if host.Annotations[claimAnno] != "first" || len(host.Annotations) != 1 {
		t.Errorf("host annotations %v: want the ones copied at creation", host.Annotations)
	}
	if host.Spec.LoadBalancerIP != "" {
		t.Errorf("host spec.loadBalancerIP %q: want it as created", host.Spec.LoadBalancerIP)
	}
	wantPorts := []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(31000)}}
	if diff := cmp.Diff(wantPorts, host.Spec.Ports); diff != "" {
		t.Errorf("host ports (-want +got):\n%s", diff)
	}
	// UpdateLoadBalancer (a node change) does the same.
	changed.Spec.Ports[0].NodePort = 31001
	if err := lb.UpdateLoadBalancer(context.Background(), testCluster, changed, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, &host); err != nil {
		t.Fatal(err)
	}
	if got := host.Spec.Ports[0].TargetPort.IntValue(); got != 31001 {
		t.Errorf("after UpdateLoadBalancer the target port is %d, want 31001", got)
	}
}

func TestUpdateAndDeleteOfAMissingHostService(t *testing.T) {
	lb, c := newLB(t, 1, 5, true, true)
	guest := guestService("7a7a7a7a-7a7a-4a7a-8a7a-7a7a7a7a7a7a", nil)
	if err := lb.UpdateLoadBalancer(context.Background(), testCluster, guest, nil); !apierrors.IsNotFound(err) {
		t.Errorf("UpdateLoadBalancer without a host Service: %v, want NotFound", err)
	}
	if err := lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, guest); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted without a host Service: %v", err)
	}
	if _, exists, err := lb.GetLoadBalancer(context.Background(), testCluster, guest); exists || err != nil {
		t.Errorf("GetLoadBalancer without a host Service: %t %v", exists, err)
	}
	host := lb.HostService(testCluster, guest, HostPorts(guest))
	if err := c.Create(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	if err := lb.EnsureLoadBalancerDeleted(context.Background(), testCluster, guest); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(host), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("the host Service after EnsureLoadBalancerDeleted: %v, want NotFound", err)
	}
}

func TestCozystackCloudConfig(t *testing.T) {
	cfg, err := ParseCloudConfig([]byte(CozystackCloudConfig("kubernetes-guest", testNS)))
	if err != nil {
		t.Fatal(err)
	}
	lb := &LoadBalancer{Config: cfg.LoadBalancer}
	if lb.PollInterval() != 5*time.Second || lb.PollTimeout() != 60*time.Second {
		t.Errorf("poll %s/%s, want Cozystack's 5s/60s", lb.PollInterval(), lb.PollTimeout())
	}
	if !cfg.LoadBalancer.Enabled || !isTrue(cfg.LoadBalancer.Selectorless) || !isTrue(cfg.LoadBalancer.EnableEPSController) {
		t.Errorf("load balancer config %+v", cfg.LoadBalancer)
	}
	if cfg.Namespace != testNS {
		t.Errorf("namespace %q", cfg.Namespace)
	}
	wantLabels := map[string]string{
		"apps.cozystack.io/application.group": "apps.cozystack.io", "apps.cozystack.io/application.kind": "Kubernetes",
		"apps.cozystack.io/application.name": "guest", "internal.cozystack.io/tenantresource": "true",
	}
	if !maps.Equal(cfg.InfraLabels, wantLabels) {
		t.Errorf("infraLabels %v", cfg.InfraLabels)
	}

	// Without the keys: the provider's defaults.
	cfg, err = ParseCloudConfig([]byte("namespace: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	lb = &LoadBalancer{Config: cfg.LoadBalancer}
	if !cfg.LoadBalancer.Enabled || lb.PollInterval() != 5*time.Second || lb.PollTimeout() != 5*time.Minute {
		t.Errorf("defaults: enabled %t, poll %s/%s", cfg.LoadBalancer.Enabled, lb.PollInterval(), lb.PollTimeout())
	}
	zero, negative := 0, -3
	lb.Config.CreationPollInterval, lb.Config.CreationPollTimeout = &zero, &negative
	if lb.PollInterval() != 5*time.Second || lb.PollTimeout() != 5*time.Minute {
		t.Errorf("zero and negative: poll %s/%s, want the defaults", lb.PollInterval(), lb.PollTimeout())
	}
}

func TestKCCMRBACIsCozystacks(t *testing.T) {
	objs := KCCMRBAC(testNS, "kubernetes-guest")
	var names []string
	for _, o := range objs {
		names = append(names, o.GetNamespace()+"/"+o.GetName())
	}
	want := []string{
		testNS + "/kubernetes-guest-kccm", testNS + "/kubernetes-guest-kccm", testNS + "/kubernetes-guest-kccm",
		"/" + testNS + "-kubernetes-guest-kccm", "/" + testNS + "-kubernetes-guest-kccm", "kube-system/" + testNS + "-kubernetes-guest-kccm",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

// The upstream service controller around the stand-in, on fake clusters: a host Service whose
// address comes after the creation poll leaves the guest without it, until something on the
// guest Service changes (an annotation will do), when the controller asks again and copies the
// host's current status.
func TestServiceControllerCopiesTheHostStatusOnlyWhenTheGuestChanges(t *testing.T) {
	lb, hostClient := newLB(t, 1, 1, true, true)
	guest := kubefake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := guest.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := guestService("3c1e5a7b-9d2f-4a6c-8e0b-1f3d5a7c9e2b", map[string]string{claimAnno: "late"})
	if _, err := guest.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(guest, 0)
	ctrl, err := servicecontroller.New(&Cloud{LB: lb}, guest, factory.Core().V1().Services(), factory.Core().V1().Nodes(),
		testCluster, featuregate.NewFeatureGate())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(ctx, 1, controllersmetrics.NewControllerManagerMetrics("test"))
	}()
	defer func() { cancel(); <-done }()

	guestIPs := func() []string {
		s, err := guest.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return IngressIPs(s)
	}
	name := lb.GetLoadBalancerName(ctx, testCluster, svc)
	// The poll times out (1 s), the controller retries 5 s later and gets the empty status.
	waitUntil(t, 20*time.Second, "the controller's retry after the poll timed out", func() bool {
		evs, _ := guest.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		failed, ensured := false, false
		for _, e := range evs.Items {
			failed = failed || e.Reason == "SyncLoadBalancerFailed"
			ensured = ensured || failed && e.Reason == "EnsuredLoadBalancer"
		}
		return ensured
	})
	if err := <-setIngress(t, hostClient, name, 0, "198.51.100.20"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if ips := guestIPs(); len(ips) != 0 {
		t.Fatalf("the guest shows %v without having changed", ips)
	}
	// Any annotation change makes the controller ask again.
	s, err := guest.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations["example.org/refresh"] = "1"
	if _, err := guest.CoreV1().Services("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the guest to show the host's address after an annotation change", func() bool {
		return cmp.Equal(guestIPs(), []string{"198.51.100.20"})
	})
	var host corev1.Service
	if err := hostClient.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, &host); err != nil {
		t.Fatal(err)
	}
	if _, ok := host.Annotations["example.org/refresh"]; ok {
		t.Errorf("the annotation reached the host: %v", host.Annotations)
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
