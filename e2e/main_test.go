// The end-to-end suite: features run against a real cluster with the real MetalLB controller
// and kube-controller-manager. E2E_PROVIDER picks the cluster ("local" processes by default).
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/cozystack/reserved-ips/e2e/provider"
)

var (
	testenv env.Environment
	cluster provider.Cluster
	// unavailable is why the chosen provider cannot run here; every test is then skipped.
	unavailable string
)

func TestMain(m *testing.M) {
	p, err := provider.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testenv = env.New()
	testenv.Setup(func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		c, err := p.Start(ctx)
		skip, err := provider.Unavailable(err)
		if skip != "" {
			unavailable = skip
			fmt.Fprintf(os.Stderr, "SKIPPING the %s run: %s\n", p.Name(), unavailable)
			return ctx, nil
		}
		if err != nil {
			return ctx, fmt.Errorf("starting the %s cluster: %w", p.Name(), err)
		}
		cluster = c
		cfg.WithKubeconfigFile(c.Kubeconfig())
		return ctx, nil
	})
	testenv.BeforeEachTest(func(ctx context.Context, _ *envconf.Config, t *testing.T) (context.Context, error) {
		if unavailable != "" {
			t.Skip(unavailable)
		}
		return ctx, nil
	})
	testenv.Finish(func(ctx context.Context, cfg *envconf.Config) (context.Context, error) {
		if cluster == nil {
			return ctx, nil
		}
		return ctx, cluster.Stop(ctx)
	})
	os.Exit(testenv.Run(m))
}
