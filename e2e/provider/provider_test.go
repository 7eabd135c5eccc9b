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

// The kind network's bridge is the one Docker names after the network (or the one its options
// name), and the device of the host's route is read from ip -o route get.
func TestKindBridgeNames(t *testing.T) {
	for in, want := range map[string]string{
		"8f31a6d28273c0ffee0123456789abcdef0123456789abcdef0123456789abcd <no value>\n": "br-8f31a6d28273",
		"8f31a6d28273c0ffee0123456789abcdef0123456789abcdef0123456789abcd \n":           "br-8f31a6d28273",
		"8f31a6d28273c0ffee0123456789abcdef0123456789abcdef0123456789abcd kind0\n":      "kind0",
		"abc": "br-abc",
	} {
		if got := networkBridge(in); got != want {
			t.Errorf("networkBridge(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"198.18.1.2 dev br-8f31a6d28273 src 198.18.1.1 uid 0 \\    cache \n":              "br-8f31a6d28273",
		"local 198.18.1.2 dev lo table local src 198.18.1.2 uid 0 \\    cache <local> \n": "lo",
		"198.18.1.2 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0 \\    cache \n":              "eth0",
		"":               "",
		"198.18.1.2 dev": "",
	} {
		if got := routeDevice(in); got != want {
			t.Errorf("routeDevice(%q) = %q, want %q", in, got, want)
		}
	}
}
