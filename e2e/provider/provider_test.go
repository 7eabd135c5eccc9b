package provider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// name), and the host's route is read from ip -o route get.
func TestKindBridgeNames(t *testing.T) {
	const id = "8f31a6d28273c0ffee0123456789abcdef0123456789abcdef0123456789abcd"
	for in, want := range map[string]string{
		id + "|<no value>|198.18.1.0/24 2001:db8:1::/64 \n": "br-8f31a6d28273",
		id + "||198.18.1.0/24 \n":                           "br-8f31a6d28273",
		id + "|kind0|198.18.1.0/24\n":                       "kind0",
		"abc":                                               "br-abc",
	} {
		if got, _ := networkBridge(in); got != want {
			t.Errorf("networkBridge(%q) = %q, want %q", in, got, want)
		}
	}
	if _, subnets := networkBridge(id + "|<no value>|198.18.1.0/24 2001:db8:1::/64 \n"); !slices.Equal(subnets, []string{"198.18.1.0/24", "2001:db8:1::/64"}) {
		t.Errorf("subnets %q", subnets)
	}
	for in, want := range map[string]route{
		"198.18.1.2 dev br-8f31a6d28273 src 198.18.1.1 uid 0 \\    cache \n":              {dev: "br-8f31a6d28273"},
		"local 198.18.1.2 dev lo table local src 198.18.1.2 uid 0 \\    cache <local> \n": {dev: "lo", local: true},
		"198.18.1.2 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0 \\    cache \n":              {dev: "eth0", via: true},
		"":               {},
		"198.18.1.2 dev": {},
	} {
		if got := parseRoute(in); got != want {
			t.Errorf("parseRoute(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// checkKindBridge passes when the host's route to the first node goes through the network's
// bridge, blames a stale bridge (and says how to delete it) only when another bridge takes the
// route directly, and otherwise says the nodes are out of reach without telling anyone to delete
// an interface. Fake docker and ip commands answer what a host in each case would.
func TestCheckKindBridge(t *testing.T) {
	bin, sys := t.TempDir(), t.TempDir()
	for name, script := range map[string]string{
		"docker": "#!/bin/sh\nprintf '%s' \"$FAKE_INSPECT\"\n",
		"ip":     "#!/bin/sh\n[ -n \"$FAKE_IP_ERR\" ] && { echo \"$FAKE_IP_ERR\" >&2; exit 2; }\nprintf '%s' \"$FAKE_ROUTE\"\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, dir := range []string{"br-deadbeef0000/brif", "br-live0000000/brif/veth1234567", "eth0", "tun0"} {
		if err := os.MkdirAll(filepath.Join(sys, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := sysClassNet
	sysClassNet = sys
	t.Cleanup(func() { sysClassNet = old })

	const ours = "8f31a6d28273c0ffee0123456789abcdef|<no value>|198.18.1.0/24 2001:db8:1::/64 "
	for _, tc := range []struct {
		name, inspect, route, ipErr string
		want                        []string // in the error; none: no error
		not                         string
	}{
		{name: "its own bridge", inspect: ours, route: "198.18.1.2 dev br-8f31a6d28273 src 198.18.1.1 uid 0 \\    cache "},
		{name: "a stale bridge", inspect: ours, route: "198.18.1.2 dev br-deadbeef0000 src 198.18.1.1 uid 0 \\    cache ",
			want: []string{"through the bridge br-deadbeef0000, which has no ports, not through the network's own bridge br-8f31a6d28273",
				"If another engine or tool still runs with it, remove its network there", "otherwise delete the bridge (ip link delete br-deadbeef0000)"}},
		{name: "a bridge in use", inspect: ours, route: "198.18.1.2 dev br-live0000000 src 198.18.1.1 uid 0 \\    cache ",
			want: []string{"through the bridge br-live0000000, not through", "in use (ports veth1234567)"}, not: "ip link delete"},
		{name: "a direct route through a device that is no bridge", inspect: ours, route: "198.18.1.2 dev tun0 src 198.18.0.5 uid 0 \\    cache ",
			want: []string{"out of this host's reach", "dev tun0"}, not: "ip link delete"},
		{name: "through a gateway", inspect: ours, route: "198.18.1.2 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0 \\    cache ",
			want: []string{"out of this host's reach", "another network namespace", "via 10.0.0.1 dev eth0"}, not: "ip link delete"},
		{name: "a local address", inspect: ours, route: "local 198.18.1.2 dev lo table local src 198.18.1.2 uid 0 \\    cache <local> ",
			want: []string{"out of this host's reach"}, not: "ip link delete"},
		{name: "the network made with other subnets", inspect: "8f31a6d28273c0ffee|<no value>|172.30.0.0/16 ",
			want: []string{`has the subnets ["172.30.0.0/16"]`, "docker network rm reserved-ips-kind"}},
		{name: "the network made without its IPv6 subnet", inspect: "8f31a6d28273c0ffee|<no value>|198.18.1.0/24 ",
			want: []string{`has the subnets ["198.18.1.0/24"]`, "docker network rm reserved-ips-kind"}},
		{name: "no route", inspect: ours, ipErr: "RTNETLINK answers: Network is unreachable",
			want: []string{"looking up the host's route to 198.18.1.2", "Network is unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FAKE_INSPECT", tc.inspect)
			t.Setenv("FAKE_ROUTE", tc.route)
			t.Setenv("FAKE_IP_ERR", tc.ipErr)
			err := checkKindBridge(t.Context())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nlacks %q", err, w)
				}
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("%v\nsays %q", err, tc.not)
			}
		})
	}
}
