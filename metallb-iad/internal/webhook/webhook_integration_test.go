package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"k8s.io/apimachinery/pkg/api/meta"
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
	stop, ready, _ = replicaWithCerts(t, cfg, port)
	return stop, ready
}

// replicaWithCerts is replica, with the replica's certificate keeper.
func replicaWithCerts(t *testing.T, cfg *rest.Config, port int) (stop func(), ready func() error, certs *Certs) {
	t.Helper()
	o := Options{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Namespace: testNamespace, Secret: "metallb-iad-parking-webhook-tls",
		Configuration: "metallb-iad-parking", Hosts: []string{"127.0.0.1"}}
	certs = o.Certs()
	certs.Recheck = time.Second
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
	return stop, ready, certs
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

// parkingConfiguration is the chart's MutatingWebhookConfiguration in short (its two webhooks,
// failurePolicy Fail, tenant namespaces; the matchConditions that route writes, reduced to what
// this test needs: a LoadBalancer, naming a claim or class, or neither and auto-claim on), calling
// the webhook at url.
func parkingConfiguration(url string) *admissionregistrationv1.MutatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	hook := func(name string, conds ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: name, AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			FailurePolicy: &fail, TimeoutSeconds: ptr(int32(5)), ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: tenantLabel, Operator: metav1.LabelSelectorOpExists}}},
			MatchConditions: append([]admissionregistrationv1.MatchCondition{{Name: "load-balancer",
				Expression: "has(object.spec.type) && object.spec.type == 'LoadBalancer'"}}, conds...),
		}
	}
	names := "has(object.metadata.annotations) && (('local.sdn.cozystack.io/ip-address-claim' in object.metadata.annotations) || ('local.sdn.cozystack.io/ip-address-class' in object.metadata.annotations))"
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "metallb-iad-parking"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("park-claimed.metallb-iad.local.sdn.cozystack.io", admissionregistrationv1.MatchCondition{Name: "names-a-claim-or-a-class", Expression: names}),
			hook(AutoClaimedWebhook, admissionregistrationv1.MatchCondition{Name: "names-no-claim-nor-class", Expression: "!(" + names + ")"},
				admissionregistrationv1.MatchCondition{Name: AutoClaimEnabledCondition, Expression: "false"}),
		}}
}

// servesTrusted dials the replica on port and checks that it serves a certificate for 127.0.0.1
// that the configuration's current caBundle trusts, as the apiserver checks it.
func servesTrusted(ctx context.Context, c client.Client, port int) error {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "metallb-iad-parking"}, &cfg); err != nil {
		return err
	}
	for _, w := range cfg.Webhooks {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			return fmt.Errorf("webhook %s trusts no authority", w.Name)
		}
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			return fmt.Errorf("webhook %s: %w", w.Name, err)
		}
		conn.Close()
	}
	return nil
}

// The parking webhook on a real kube-apiserver, as the chart installs it below Kubernetes 1.36
// (two webhooks, failurePolicy Fail, tenant namespaces only), served by two replicas of the driver
// on loopback:
//   - the first makes the Secret and writes its authority into the configuration, the second
//     serves what the first made (each one's certificate checked against the caBundle), and a
//     further pass writes nothing;
//   - a Service that names a claim, or that auto-claim serves from a class of this driver, is
//     stored parked, others as they were written; a Service that names no claim nor class is sent
//     to the driver only once the switch sees a class marked for auto-claim;
//   - the configuration made again without its caBundle, or the Secret deleted, is repaired
//     within the recheck, every replica staying trusted through a new authority;
//   - with no replica answering, a write the webhooks must see is refused rather than admitted
//     unparked; a plain Service while auto-claim is off, and one outside tenant namespaces, are
//     not affected.
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
	whc := parkingConfiguration(fmt.Sprintf("https://127.0.0.1:%d%s", port, Path))
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
	for _, w := range whc.Webhooks {
		if string(w.ClientConfig.CABundle) != string(secret.Data[KeyCACert]) {
			t.Fatalf("webhook %s does not trust the Secret's authority", w.Name)
		}
	}

	// A second replica (another port, the same Secret): it serves what the first made, trusted
	// by the configuration, and writes nothing.
	second := freePort(t)
	stopSecond, secondReady := replica(t, cfg, second)
	waitFor(t, "the second replica to be ready", secondReady)
	for _, p := range []int{port, second} {
		waitFor(t, fmt.Sprintf("the replica on %d to serve a trusted certificate", p), func() error { return servesTrusted(ctx, c, p) })
	}
	time.Sleep(2500 * time.Millisecond) // a couple of rechecks of both replicas
	var after corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: secret.Name}, &after); err != nil {
		t.Fatal(err)
	}
	var whcAfter admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: whc.Name}, &whcAfter); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != secret.ResourceVersion || whcAfter.ResourceVersion != whc.ResourceVersion {
		t.Errorf("replicas that found everything in place wrote: Secret %s → %s, configuration %s → %s",
			secret.ResourceVersion, after.ResourceVersion, whc.ResourceVersion, whcAfter.ResourceVersion)
	}

	// Classes: one of another driver named by a Service, then one of this driver.
	for _, cls := range []*ipamv1.IPAddressClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "public"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: parking.Provisioner}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "other.example.org"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gold-only"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: parking.Provisioner,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}},
	} {
		if err := c.Create(ctx, cls); err != nil {
			t.Fatal(err)
		}
		// Their drivers accept them (no driver runs here): parking uses a marked class only then.
		meta.SetStatusCondition(&cls.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionAccepted, Status: metav1.ConditionTrue,
			Reason: "Accepted", Message: "the test plays the driver"})
		if err := c.Status().Update(ctx, cls); err != nil {
			t.Fatal(err)
		}
	}
	lb := func(ns, name string, ann map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	stored := func(svc *corev1.Service, parked bool) {
		t.Helper()
		waitFor(t, svc.Name+" to be stored as expected", func() error {
			_ = c.Delete(ctx, svc.DeepCopy())
			err := c.Create(ctx, svc.DeepCopy())
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			var got corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
				return err
			}
			if autoclaim.Parked(&got) != parked {
				return fmt.Errorf("%s stored with annotations %v, want parked %v", svc.Name, got.Annotations, parked)
			}
			return nil
		})
	}
	stored(lb("tenant-a", "names-a-claim", map[string]string{ipamv1.AnnotationServiceClaim: "web"}), true)
	stored(lb("tenant-a", "names-the-class", map[string]string{ipamv1.AnnotationServiceClass: "public"}), true)
	stored(lb("tenant-a", "other-class", map[string]string{ipamv1.AnnotationServiceClass: "other"}), false)
	// A class of this driver that does not serve the namespace: auto-claim makes no claim from it
	// there, so the Service is not parked for one.
	stored(lb("tenant-a", "class-for-others", map[string]string{ipamv1.AnnotationServiceClass: "gold-only"}), false)
	stored(lb("tenant-a", "pinned-by-admin", map[string]string{"metallb.io/loadBalancerIPs": "203.0.113.7", ipamv1.AnnotationServiceClaim: "web"}), false)
	stored(lb("platform", "not-a-tenant", map[string]string{ipamv1.AnnotationServiceClaim: "web"}), false)
	stored(lb("tenant-a", "plain-before", nil), false)
	autoOn := func() string {
		var cur admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: whc.Name}, &cur); err != nil {
			t.Fatal(err)
		}
		return cur.Webhooks[1].MatchConditions[len(cur.Webhooks[1].MatchConditions)-1].Expression
	}
	if got := autoOn(); got != "false" {
		t.Errorf("with no class marked for auto-claim, auto-claim-enabled is %q", got)
	}
	// Auto-claim turned on: the switch sends plain Services to the driver, which parks them.
	var public ipamv1.IPAddressClass
	if err := c.Get(ctx, client.ObjectKey{Name: "public"}, &public); err != nil {
		t.Fatal(err)
	}
	public.Annotations = map[string]string{ipamv1.AnnotationAutoClaimClass: "true"}
	if err := c.Update(ctx, &public); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the switch to turn auto-claim parking on", func() error {
		if got := autoOn(); got != "true" {
			return fmt.Errorf("auto-claim-enabled is %q", got)
		}
		return nil
	})
	stored(lb("tenant-a", "auto-claimed", nil), true)
	stored(lb("tenant-a", "opted-out", map[string]string{ipamv1.AnnotationAutoClaim: "False"}), false)
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

	// The configuration made again without its caBundle (a reinstall, say): repaired within the
	// recheck, and the new configuration owns the Secret again.
	if err := c.Delete(ctx, whc); err != nil {
		t.Fatal(err)
	}
	fresh := parkingConfiguration(fmt.Sprintf("https://127.0.0.1:%d%s", port, Path))
	waitFor(t, "the configuration to be made again", func() error { return c.Create(ctx, fresh.DeepCopy()) })
	for _, p := range []int{port, second} {
		waitFor(t, fmt.Sprintf("the replica on %d to be trusted by the new configuration", p), func() error { return servesTrusted(ctx, c, p) })
	}
	// The Secret deleted (by hand, or by the garbage collector with the old configuration): a new
	// authority, and both replicas trusted all along the change.
	var old corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: secret.Name}, &old); err == nil {
		if err := c.Delete(ctx, &old); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a new authority in a new Secret", func() error {
		var cur corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: secret.Name}, &cur); err != nil {
			return err
		}
		if string(cur.Data[KeyCACert]) == string(secret.Data[KeyCACert]) {
			return fmt.Errorf("still the first authority")
		}
		return nil
	})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range []int{port, second} {
			if err := servesTrusted(ctx, c, p); err != nil {
				t.Fatalf("while the authority changed, the replica on %d was not trusted: %v", p, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	// No replica answers: a write the webhooks must see is refused, not admitted unparked; one
	// outside tenant namespaces goes through.
	stopFirst()
	stopSecond()
	err = c.Create(ctx, lb("tenant-a", "while-down", map[string]string{ipamv1.AnnotationServiceClaim: "web"}))
	if err == nil || !strings.Contains(err.Error(), "park-claimed.metallb-iad.local.sdn.cozystack.io") {
		t.Errorf("with no replica answering, a Service naming a claim was admitted (or refused for another reason): %v", err)
	}
	err = c.Create(ctx, lb("tenant-a", "plain-while-down", nil))
	if err == nil || !strings.Contains(err.Error(), AutoClaimedWebhook) {
		t.Errorf("with auto-claim on and no replica answering, a plain Service was admitted (or refused for another reason): %v", err)
	}
	if err := c.Create(ctx, lb("platform", "while-down", nil)); err != nil {
		t.Errorf("with no replica answering, a Service outside tenant namespaces was refused: %v", err)
	}
	// Auto-claim off again (by hand here: the switch runs on the driver), and a plain Service
	// does not wait on the driver.
	var cur admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: whc.Name}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Webhooks[1].MatchConditions[len(cur.Webhooks[1].MatchConditions)-1].Expression = "false"
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a plain Service to be admitted with auto-claim off and the driver down", func() error {
		return client.IgnoreAlreadyExists(c.Create(ctx, lb("tenant-a", "plain-no-auto-claim", nil)))
	})
}

func ptr[T any](v T) *T { return &v }
