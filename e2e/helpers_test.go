package e2e

import (
	"context"
	"os"
	"path/filepath"
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
