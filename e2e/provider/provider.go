// Package provider abstracts the cluster the e2e suite runs against, so the same features run
// on local processes (the default) and, later, on a kind cluster.
package provider

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
)

// Cluster is a running cluster with MetalLB (namespace cozy-metallb) and the project's
// components set up.
type Cluster interface {
	// Kubeconfig is the path of an admin kubeconfig.
	Kubeconfig() string
	// Config is the admin REST config.
	Config() *rest.Config
	// Stop tears the cluster down and leaves no process behind.
	Stop(ctx context.Context) error
}

// Provider creates clusters.
type Provider interface {
	Name() string
	Start(ctx context.Context) (Cluster, error)
}

// FromEnv picks the provider named by E2E_PROVIDER ("local" when unset).
func FromEnv() (Provider, error) {
	switch name := os.Getenv("E2E_PROVIDER"); name {
	case "", "local":
		return Local{}, nil
	case "kind":
		return Kind{}, nil
	default:
		return nil, fmt.Errorf("unknown E2E_PROVIDER %q (known: local, kind)", name)
	}
}
