package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
)

const (
	testNamespace = "cozy-metallb-iad"
	tenantLabel   = "namespace.cozystack.io/host"
)

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// replica runs the parking webhook as one replica of the driver does (its certificate keeper,
// the webhook server on loopback, the class cache) until the returned stop is called; ready says
// whether its readiness check passes.
func replica(t *testing.T, cfg *rest.Config, port int) (stop func(), ready func() error) {
	t.Helper()
	o := Options{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Namespace: testNamespace, Secret: "metallb-iad-parking-webhook-tls",
		Configuration: "metallb-iad-parking", Hosts: []string{"127.0.0.1"}}
	certs := o.Certs()
	certs.Recheck = time.Hour
	server, err := o.Server(certs)
	if err != nil {
		t.Fatal(err)
	}
	probe := freePort(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme(t), WebhookServer: server,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", probe)})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(mgr, certs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the replica's manager: %v", err)
		}
	}
	t.Cleanup(stop)
	ready = func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}
	return stop, ready
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, last)
	}
}

// The parking webhook on a real kube-apiserver, as the chart installs it below Kubernetes 1.36
// (failurePolicy Fail, tenant namespaces only), served by two replicas of the driver on loopback:
// the first makes the Secret and writes its authority into the configuration, the second serves
// what the first made, and a second pass of either writes nothing; a Service that names a claim,
// or that auto-claim serves from a class of this driver, is stored parked, others as they were
// written; with no replica answering, a write the webhook must see is refused rather than admitted
// unparked, and one it need not see (outside tenant namespaces) is not affected.
func TestParkingWebhookOnARealAPIServer(t *testing.T) {
	cfg := envtestutil.Start(t, &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "address-controller", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	})
	s := scheme(t)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a", Labels: map[string]string{tenantLabel: "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "platform"}},
	} {
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, Path)
	whc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "metallb-iad-parking"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "park.metallb-iad.local.sdn.cozystack.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: &fail, TimeoutSeconds: ptr(int32(5)), ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: tenantLabel, Operator: metav1.LabelSelectorOpExists}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "load-balancer",
				Expression: "has(object.spec.type) && object.spec.type == 'LoadBalancer'"}},
		}},
	}
	if err := c.Create(ctx, whc); err != nil {
		t.Fatal(err)
	}

	stopFirst, firstReady := replica(t, cfg, port)
	waitFor(t, "the first replica to be ready", firstReady)
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "metallb-iad-parking-webhook-tls"}, &secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].Name != "metallb-iad-parking" || secret.OwnerReferences[0].Kind != "MutatingWebhookConfiguration" {
		t.Errorf("the Secret is not owned by the configuration (removing the chart would leave it): %+v", secret.OwnerReferences)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "metallb-iad-parking"}, whc); err != nil {
		t.Fatal(err)
	}
	if string(whc.Webhooks[0].ClientConfig.CABundle) != string(secret.Data[KeyCACert]) {
		t.Fatal("the configuration does not trust the Secret's authority")
	}

	// A second replica (another port, the same Secret): it serves what the first made.
	second := freePort(t)
	stopSecond, secondReady := replica(t, cfg, second)
	waitFor(t, "the second replica to be ready", secondReady)
	var after corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: secret.Name}, &after); err != nil {
		t.Fatal(err)
	}
	var whcAfter admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: whc.Name}, &whcAfter); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != secret.ResourceVersion || whcAfter.ResourceVersion != whc.ResourceVersion {
		t.Errorf("a replica that found everything in place wrote: Secret %s → %s, configuration %s → %s",
			secret.ResourceVersion, after.ResourceVersion, whc.ResourceVersion, whcAfter.ResourceVersion)
	}
	// And a further pass of the keeper writes nothing either.
	keeper := (&Options{Namespace: testNamespace, Secret: secret.Name, Configuration: whc.Name, Hosts: []string{"127.0.0.1"}}).Certs()
	keeper.Client, keeper.Reader = c, c
	if err := keeper.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: secret.Name}, &after); err != nil || after.ResourceVersion != secret.ResourceVersion {
		t.Errorf("a pass with nothing due wrote the Secret (%v)", err)
	}

	// A class of this driver marked for auto-claim, and one of another driver.
	for _, cls := range []*ipamv1.IPAddressClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "public", Annotations: map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}},
			Spec: ipamv1.IPAddressClassSpec{Provisioner: parking.Provisioner}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "other.example.org"}},
	} {
		if err := c.Create(ctx, cls); err != nil {
			t.Fatal(err)
		}
	}
	lb := func(ns, name string, ann map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	cases := []struct {
		svc    *corev1.Service
		parked bool
	}{
		{lb("tenant-a", "names-a-claim", map[string]string{ipamv1.AnnotationServiceClaim: "web"}), true},
		// The class cache may lag the class just created: an auto-claimed Service is judged once
		// the replicas' caches show it (the loop below retries).
		{lb("tenant-a", "auto-claimed", nil), true},
		{lb("tenant-a", "other-class", map[string]string{ipamv1.AnnotationServiceClass: "other"}), false},
		{lb("tenant-a", "opted-out", map[string]string{ipamv1.AnnotationAutoClaim: "False"}), false},
		{lb("tenant-a", "pinned-by-admin", map[string]string{"metallb.io/loadBalancerIPs": "203.0.113.7", ipamv1.AnnotationServiceClaim: "web"}), false},
		{lb("platform", "not-a-tenant", map[string]string{ipamv1.AnnotationServiceClaim: "web"}), false},
	}
	for _, tc := range cases {
		waitFor(t, tc.svc.Name+" to be stored as expected", func() error {
			_ = c.Delete(ctx, tc.svc.DeepCopy())
			err := c.Create(ctx, tc.svc.DeepCopy())
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			var got corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(tc.svc), &got); err != nil {
				return err
			}
			if autoclaim.Parked(&got) != tc.parked {
				return fmt.Errorf("%s stored with annotations %v, want parked %v", tc.svc.Name, got.Annotations, tc.parked)
			}
			return nil
		})
	}
	// An update that turns a ClusterIP Service into a LoadBalancer naming a claim parks it too.
	cip := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "via-update"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := c.Create(ctx, cip); err != nil {
		t.Fatal(err)
	}
	cip.Spec.Type = corev1.ServiceTypeLoadBalancer
	cip.Annotations = map[string]string{ipamv1.AnnotationServiceClaim: "web"}
	if err := c.Update(ctx, cip); err != nil {
		t.Fatal(err)
	}
	if !autoclaim.Parked(cip) {
		t.Errorf("an update naming a claim was stored unparked: %v", cip.Annotations)
	}

	// No replica answers: a write the webhook must see is refused, not admitted unparked; one
	// outside tenant namespaces goes through.
	stopFirst()
	stopSecond()
	err = c.Create(ctx, lb("tenant-a", "while-down", map[string]string{ipamv1.AnnotationServiceClaim: "web"}))
	if err == nil || !strings.Contains(err.Error(), "park.metallb-iad.local.sdn.cozystack.io") {
		t.Errorf("with no replica answering, a Service naming a claim was admitted (or refused for another reason): %v", err)
	}
	if err := c.Create(ctx, lb("platform", "while-down", nil)); err != nil {
		t.Errorf("with no replica answering, a Service outside tenant namespaces was refused: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
