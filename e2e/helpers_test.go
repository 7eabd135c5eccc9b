package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/controlplane"
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
	if err := poll(ctx, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// poll is eventually without the test: it returns the error eventually fails with.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	// last is the condition's last error; telling is its last one from a call the poll's own
	// deadline did not cut short, which says more about why the wait failed (a call's own
	// timeout, such as a scrape's, is telling).
	var last, telling error
	lastTelling := false
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(pctx context.Context) (bool, error) {
		ok, err := cond(pctx)
		if err != nil {
			last, lastTelling = err, pctx.Err() == nil
			if lastTelling {
				telling = err
			}
			return false, nil
		}
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case telling != nil && !lastTelling:
		return fmt.Errorf("timed out after %s waiting for %s (last error: %v; the last before the deadline cut it short: %v)", timeout, what, last, telling)
	default:
		return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
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
// A scrape that takes longer than 10s fails as such rather than running into the caller's deadline.
func reconcileTotals(ctx context.Context, url string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s (%s): %w", url, time.Since(start).Round(time.Millisecond), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s (%s): %w", url, time.Since(start).Round(time.Millisecond), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
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

// objectsOf is what one controller of a restarted process must reconcile: every object of a
// kind (listed as metadata), less those skip names.
type objectsOf struct {
	list schema.GroupVersionKind
	skip func(metav1.PartialObjectMetadata) bool
}

// waitEveryObjectReconciled waits until each controller of the local process named process has
// reconciled at least as many objects as its kind has (from the process's metrics). The objects
// are counted afresh at each poll, so that one deleted before the process listed (another test's,
// going away) does not hold the wait up; the error names the controller that is short, or the
// scrape that failed, and shows the process's state and the end of its log.
func waitEveryObjectReconciled(ctx context.Context, t *testing.T, c client.Client, local *provider.LocalCluster, process string, timeout time.Duration, kinds map[string]objectsOf) {
	t.Helper()
	url := local.Endpoints[process+"/metrics"]
	if url == "" {
		t.Fatalf("the local cluster has no metrics endpoint for %s", process)
	}
	err := poll(ctx, timeout, "the restarted "+process+" to reconcile every object", func(ctx context.Context) (bool, error) {
		got, err := reconcileTotals(ctx, url)
		if err != nil {
			return false, err
		}
		for ctrl, k := range kinds {
			var l metav1.PartialObjectMetadataList
			l.SetGroupVersionKind(k.list)
			if err := c.List(ctx, &l); err != nil {
				return false, err
			}
			n := len(l.Items)
			if k.skip != nil {
				n = len(slices.DeleteFunc(l.Items, k.skip))
			}
			if got[ctrl] < n {
				return false, fmt.Errorf("%s reconciled %d of %d objects (all totals: %v)", ctrl, got[ctrl], n, got)
			}
		}
		return true, nil
	})
	if err == nil {
		return
	}
	if p := local.Process(process); p != nil {
		// The readiness probe is bounded: the process may be the one that stopped answering.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st := p.Status(sctx, true)
		cancel()
		t.Fatalf("%v\n%s: pid %d, %s, ready %t, %d restarts, last exit %q; the end of %s:\n%s",
			err, process, st.Pid, st.State, st.Ready, st.Restarts, st.LastExit, st.Log, controlplane.LogTail(st.Log, 40))
	}
	t.Fatal(err)
}

var reconcileTotalRE = regexp.MustCompile(`(?m)^controller_runtime_reconcile_total\{controller="([^"]+)"[^}]*\} (\S+)$`)
