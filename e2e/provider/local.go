package provider

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

// Local runs the cluster as local processes: the same sandbox `make sandbox` starts.
type Local struct{}

func (Local) Name() string { return "local" }

// LocalCluster is a sandbox; tests that need process control (restarts, the audit log) can
// type-assert to it.
type LocalCluster struct {
	*sandbox.Sandbox
}

func (c *LocalCluster) Kubeconfig() string             { return c.Sandbox.Kubeconfig }
func (c *LocalCluster) Config() *rest.Config           { return c.Sandbox.Config }
func (c *LocalCluster) Stop(ctx context.Context) error { return c.Sandbox.Stop() }

func (Local) Start(ctx context.Context) (Cluster, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s [local] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	s, err := sandbox.Start(ctx, sandbox.Options{Logf: logf, ControlPlane: controlplane.Options{
		Dir: os.Getenv("E2E_STATE_DIR"),
		// The chaos test kills the apiserver and etcd repeatedly; controllers that exit while
		// they are down count as crashes, and the test must not lose them to a give-up.
		Restart: controlplane.RestartPolicy{GiveUpAfter: 30},
	},
		// The suite tests the driver's opt-in release of MetalLB's kept allocations for an
		// attached Service (off by default: it would fire on every Service MetalLB is merely
		// slow to serve).
		DriverArgs: []string{"--release-after=30s"},
	})
	if err != nil {
		return nil, err
	}
	return &LocalCluster{Sandbox: s}, nil
}
