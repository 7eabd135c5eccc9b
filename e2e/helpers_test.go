package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// crClient returns a controller-runtime client for the cluster.
func crClient(t *testing.T, cfg *envconf.Config) client.Client {
	t.Helper()
	return cfg.Client().Resources().GetControllerRuntimeClient()
}

// applyExample server-side applies a file of the repository's examples/ directory, the same
// file the README tells users to apply.
func applyExample(ctx context.Context, t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeapply.Apply(ctx, cluster.Config(), "e2e", data)
	if err != nil {
		t.Fatalf("applying examples/%s: %v", name, err)
	}
	return objs
}

// eventually polls cond every 200ms until it returns true, failing the test with what after
// timeout.
func eventually(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
	}
}

// consistently fails the test if cond turns false (or errs) at any poll within d.
func consistently(ctx context.Context, t *testing.T, d time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := cond(ctx)
		if err != nil || !ok {
			t.Fatalf("expected %s to hold for %s (err: %v)", what, d, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// reconcileTotals reads controller-runtime's controller_runtime_reconcile_total from a
// process's metrics endpoint, summed per controller over every result.
func reconcileTotals(ctx context.Context, url string) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	totals := map[string]int{}
	for _, m := range reconcileTotalRE.FindAllStringSubmatch(string(body), -1) {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, err
		}
		totals[m[1]] += int(n)
	}
	return totals, nil
}

var reconcileTotalRE = regexp.MustCompile(`(?m)^controller_runtime_reconcile_total\{controller="([^"]+)"[^}]*\} (\S+)$`)
