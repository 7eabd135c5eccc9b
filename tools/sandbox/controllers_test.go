package sandbox

import (
	"os"
	"slices"
	"testing"
)

// The sandbox (so the e2e suite and the benchmark) runs each controller with the environment
// its chart's Deployment gives it: the chart's memoryTarget as GOMEMLIMIT.
func TestControllersRunWithTheChartsMemoryTarget(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		os.Unsetenv("GOMEMLIMIT")
		t.Cleanup(func() { os.Setenv("GOMEMLIMIT", v) })
	}
	for _, c := range []Controller{AddressController, MetalLBIAD} {
		env, err := chartEnv(root, c)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(env, "GOMEMLIMIT=100MiB") {
			t.Errorf("%s runs with %v, want the chart's GOMEMLIMIT=100MiB", c.Name, env)
		}
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	if env, _ := chartEnv(root, MetalLBIAD); len(env) != 0 {
		t.Errorf("an explicit GOMEMLIMIT is overridden: %v", env)
	}
}
