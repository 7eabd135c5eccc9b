// Package provider abstracts the cluster the e2e suite runs against, so the same features run
// on local processes (the default) and, later, on a kind cluster.
package provider

import (
	"context"
	"errors"
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

// Unavailable decides what a run does when its provider cannot start here (err wraps
// ErrUnavailable): skip every test, saying why, or, when E2E_REQUIRE is set (as make does once
// it has found the provider usable), fail the run, so that a suite that was meant to run never
// passes by skipping.
func Unavailable(err error) (skip string, fatal error) {
	if !errors.Is(err, ErrUnavailable) {
		return "", err
	}
	if os.Getenv("E2E_REQUIRE") != "" {
		return "", fmt.Errorf("%w (E2E_REQUIRE is set: the run must not skip)", err)
	}
	return err.Error(), nil
}
