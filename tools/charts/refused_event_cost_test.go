package charts

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// eventRequests counts a client's requests on events by "VERB CODE".
type eventRequests struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *eventRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && strings.Contains(req.URL.Path, "/events") {
		c.mu.Lock()
		c.n[fmt.Sprintf("%s %d", req.Method, resp.StatusCode)]++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *eventRequests) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Issue 29, defect 4: what a report the parking-events policy refuses costs MetalLB. MetalLB
// records events with client-go's recorder (core/v1 Events, through controller-runtime's
// manager), as this test does: the first report about a Service is a create answered 403; each
// repeat is a patch of the event the recorder believes it made, answered 404, then a create
// answered 403 — two requests. The driver's README states these numbers.
func TestRefusedMetalLBEventCost(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	if err := cp.InstallCRDs(ctx, filepath.Join(Dir(root, "address-controller"), "files", "crds")); err != nil {
		t.Fatal(err)
	}
	const ns, tenant = "cozy-metallb-iad", "tenant-cost"
	for _, n := range []string{ns, cp.MetalLBNamespace, tenant} {
		if err := cp.EnsureNamespace(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Load(Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, cp.Kubeconfig, ns, "metallb-iad", c, map[string]any{"deploy": false, "metallbNamespace": cp.MetalLBNamespace}); err != nil {
		t.Fatal(err)
	}
	w := &metallbEvents{ctx: ctx, client: cp.Client}
	eventually(t, 30*time.Second, "the parking-events policy to take effect", func() (bool, error) {
		err := w.core(tenant, "AllocationFailed", parkedRefusal(tenant, "web"))
		return apierrors.IsForbidden(err), err
	})

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	counts := &eventRequests{n: map[string]int{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counts.next = rt; return counts })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "metallb-controller"})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "web", UID: "web-uid"}}

	const reports = 3
	for range reports {
		rec.Eventf(svc, corev1.EventTypeWarning, "AllocationFailed", "%s", parkedRefusal(tenant, "web"))
	}
	want := map[string]int{"POST 403": reports, "PATCH 404": reports - 1}
	eventually(t, 30*time.Second, fmt.Sprintf("the recorder's requests to be %v", want), func() (bool, error) {
		got := counts.snapshot()
		return got["POST 403"] == want["POST 403"] && got["PATCH 404"] == want["PATCH 404"], fmt.Errorf("requests %v", got)
	})
	// The recorder writes its events in order, one at a time: once an event recorded after the
	// reports is written, the reports cost all they will.
	rec.Eventf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "sentinel", UID: "sentinel-uid"}},
		corev1.EventTypeNormal, "Sentinel", "%s", "recorded after the reports")
	eventually(t, 30*time.Second, "the event recorded after the reports to be written", func() (bool, error) {
		return counts.snapshot()["POST 201"] == 1, nil
	})
	got := counts.snapshot()
	delete(got, "POST 201")
	if len(got) != len(want) || got["POST 403"] != want["POST 403"] || got["PATCH 404"] != want["PATCH 404"] {
		t.Errorf("%d refused reports cost %v, want %v", reports, got, want)
	}
	t.Logf("%d identical refused reports: %v", reports, got)
}
