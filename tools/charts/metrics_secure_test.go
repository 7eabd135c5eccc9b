package charts

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// scrape GETs url with token as the bearer (none when empty) and returns the status and body.
func scrape(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The endpoint's certificate is self-signed by controller-runtime; what is tested is who may
	// read it, not the certificate.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The secure metrics endpoint (--metrics-secure, address-controller/pkg/sdk/manager: controller-
// runtime's authentication and authorization filter), with the chart's metrics RBAC on a real
// apiserver: the controller runs as the chart's ServiceAccount (allowed to create TokenReviews
// and SubjectAccessReviews by the chart's metrics-auth ClusterRole), and a scraper is let in
// only with a token whose ServiceAccount the chart binds to its metrics-reader ClusterRole
// (metrics.readers): no token is 401, a token without the binding 403, the reader's 200 with the
// project's metrics.
func TestSecureMetricsEndpoint(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	const ns, scrapers = "cozy-address-controller", "scrapers"
	for _, n := range []string{ns, scrapers, "tenant-metrics"} {
		if err := cp.EnsureNamespace(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Dir(root, "address-controller"))
	if err != nil {
		t.Fatal(err)
	}
	// deploy=false: the CRDs, RBAC and ServiceAccount, without the Deployment; the controller runs
	// below as a local process under that ServiceAccount.
	if _, err := Apply(ctx, cp.Kubeconfig, ns, "address-controller", c, map[string]any{
		"deploy":  false,
		"metrics": map[string]any{"readers": []any{map[string]any{"namespace": scrapers, "name": "reader"}}},
	}); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(t.TempDir(), "address-controller")
	build := exec.Command("go", "build", "-o", bin, "./address-controller/cmd/address-controller")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the core: %v\n%s", err, out)
	}
	kubeconfig, _, err := cp.ServiceAccountKubeconfig(ctx, ns, "address-controller")
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	probePort, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.StartProcess(ctx, controlplane.ProcessSpec{
		Name: "address-controller",
		Path: bin,
		Args: []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--metrics-secure=true",
			"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
			"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
		},
		Ready: controlplane.HTTPCheck(fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort), nil),
	}); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", metricsPort)

	// A claim of a class that does not exist stays Pending: the project's gauges have a series.
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	claim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClaim",
		"metadata": map[string]any{"name": "waits", "namespace": "tenant-metrics"},
		"spec":     map[string]any{"className": "no-such-class", "family": "IPv4"},
	}}
	claims := schema.GroupVersionResource{Group: "local.sdn.cozystack.io", Version: "v1alpha1", Resource: "ipaddressclaims"}
	if _, err := dyn.Resource(claims).Namespace("tenant-metrics").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Ready (the probe server) does not mean the metrics server listens yet: it starts as a
	// runnable of its own, after its authentication and authorization are set up.
	eventually(t, 30*time.Second, "the metrics endpoint to listen", func() (bool, error) {
		_, _, err := scrape(url, "")
		return err == nil, err
	})
	if code, body, err := scrape(url, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("no token: status %d (%v), want 401; body %.200s", code, err, body)
	}
	_, stranger, err := cp.ServiceAccountKubeconfig(ctx, scrapers, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := scrape(url, stranger.BearerToken); err != nil || code != http.StatusForbidden {
		t.Errorf("a ServiceAccount without the metrics-reader binding: status %d (%v), want 403; body %.200s", code, err, body)
	}
	_, reader, err := cp.ServiceAccountKubeconfig(ctx, scrapers, "reader")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the reader to scrape the project's metrics", func() (bool, error) {
		code, body, err := scrape(url, reader.BearerToken)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("status %d: %.200s", code, body)
		}
		for _, want := range []string{
			`address_controller_claims{phase="Pending"} 1`,
			"address_controller_oldest_pending_claim_timestamp_seconds ",
			"address_controller_claim_bind_duration_seconds_bucket",
			"controller_runtime_reconcile_total",
		} {
			if !strings.Contains(body, want) {
				return false, fmt.Errorf("no %q in the scrape", want)
			}
		}
		return true, nil
	})
}
