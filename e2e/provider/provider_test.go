package provider

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// A provider that cannot start skips the run, unless E2E_REQUIRE says the run must happen; any
// other error is the run's error either way.
func TestUnavailableSkipsUnlessRequired(t *testing.T) {
	unavailable := fmt.Errorf("%w: kind needs a running Docker engine", ErrUnavailable)
	other := errors.New("creating the kind cluster: boom")

	t.Setenv("E2E_REQUIRE", "")
	if skip, err := Unavailable(unavailable); skip != unavailable.Error() || err != nil {
		t.Errorf("unavailable, not required: skip %q, err %v; want a skip saying why", skip, err)
	}
	if skip, err := Unavailable(other); skip != "" || err != other {
		t.Errorf("another error: skip %q, err %v; want the error", skip, err)
	}
	if skip, err := Unavailable(nil); skip != "" || err != nil {
		t.Errorf("no error: skip %q, err %v", skip, err)
	}

	t.Setenv("E2E_REQUIRE", "1")
	if skip, err := Unavailable(unavailable); skip != "" || !errors.Is(err, ErrUnavailable) {
		t.Errorf("unavailable, required: skip %q, err %v; want the run to fail", skip, err)
	}
}

// Only the suite's own clusters whose run is gone are stale: not a running run's, not one made in
// another pid namespace (whose pids this run cannot see), not another tool's, not a name without a
// pid; and none when the namespace is unknown.
func TestStaleClustersAreTheSuitesWhoseRunIsGone(t *testing.T) {
	names := []string{"reserved-ips-e2e-77-100", "reserved-ips-e2e-77-200", "reserved-ips-e2e-88-100", "reserved-ips-e2e-100",
		"reserved-ips-node-100", "kind", "reserved-ips-e2e-77-x", "reserved-ips-e2e-77-0"}
	runs := func(pid int) bool { return pid == 200 }
	if got, want := StaleClusters(names, "77", runs), []string{"reserved-ips-e2e-77-100"}; !slices.Equal(got, want) {
		t.Errorf("stale: %v, want %v", got, want)
	}
	if got := StaleClusters(names, "unknown", runs); len(got) != 0 {
		t.Errorf("stale with an unknown namespace: %v", got)
	}
	if ns := pidNamespace(); ns == "unknown" || strings.Trim(ns, "0123456789") != "" {
		t.Errorf("this process's pid namespace reads as %q", ns)
	}
	if !processRuns(os.Getpid()) {
		t.Error("this process is said not to run")
	}
	if processRuns(1 << 30) { // above any pid_max
		t.Error("a pid above pid_max is said to run")
	}
}
