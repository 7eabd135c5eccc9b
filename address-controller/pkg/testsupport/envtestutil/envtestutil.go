// Package envtestutil starts a real kube-apiserver and etcd (controller-runtime's envtest) for
// one test and stops them when the test ends. The package's small integration tests use it; the
// controller suites keep their own TestMain, which starts one apiserver for a whole package.
package envtestutil

import (
	"os"
	"testing"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start starts env (an empty Environment when nil) and registers its Stop with t.Cleanup. It
// fails t, saying how to run the test, when KUBEBUILDER_ASSETS does not name the binaries, and
// stops what came up when the start fails.
func Start(t testing.TB, env *envtest.Environment) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test-unit`, or export KUBEBUILDER_ASSETS=$(go run ./tools/cmd/binaries envtest)")
	}
	if env == nil {
		env = &envtest.Environment{}
	}
	cfg, err := env.Start()
	if err != nil {
		// A start that fails after etcd and kube-apiserver came up (installing CRDs, say)
		// leaves them running.
		_ = env.Stop()
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		// envtest kills what does not stop in time: a slow stop is no reason to fail a test.
		if err := env.Stop(); err != nil {
			t.Logf("stopping kube-apiserver and etcd: %v", err)
		}
	})
	return cfg
}

// Client is an uncached controller-runtime client of cfg for Kubernetes' built-in kinds.
func Client(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
