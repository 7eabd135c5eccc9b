package bench

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ServiceIPs is a Service's name and the IPs in its status.loadBalancer.ingress.
type ServiceIPs struct {
	Key string // namespace/name
	IPs []string
	// SharingKey is its metallb.io/allow-shared-ip annotation.
	SharingKey string
}

// driverKeyPrefix starts the MetalLB sharing keys of the driver: a Service attached to a claim
// shares its IP with the address's hold under the claim's key.
const driverKeyPrefix = "metallb.drivers.local.sdn.cozystack.io/"

// Expectations say what the cluster must show once the benchmark is done.
type Expectations struct {
	// Attached maps an attach Service's key to its claim's addresses: the Service must show
	// exactly these.
	Attached map[string][]string
	// Plain lists Services that must show exactly one IP of their own.
	Plain []string
	// Claims maps a claim's key to its addresses: no address may be on two claims.
	Claims map[string][]string
}

// Check compares the cluster's Services (every namespace) with the expectations and returns
// every problem found, sorted; none means the run was correct. Beyond the expectations, no IP
// may be on two Services, but for two that share it under one sharing key of the driver (an
// attached Service and its address's hold).
func Check(services []ServiceIPs, want Expectations) []string {
	var problems []string
	byKey := map[string][]string{}
	holders := map[string][]string{}
	sharingKeys := map[string][]string{} // ip → the sharing keys of its Services
	for _, s := range services {
		byKey[s.Key] = s.IPs
		for _, ip := range s.IPs {
			holders[ip] = append(holders[ip], s.Key)
			sharingKeys[ip] = append(sharingKeys[ip], s.SharingKey)
		}
	}
	for ip, keys := range holders {
		if k := slices.Compact(slices.Sorted(slices.Values(sharingKeys[ip]))); len(keys) == 2 && len(k) == 1 && strings.HasPrefix(k[0], driverKeyPrefix) {
			continue // an attached Service and its address's hold
		}
		if len(keys) > 1 {
			sort.Strings(keys)
			problems = append(problems, fmt.Sprintf("IP %s is on %d Services: %s", ip, len(keys), strings.Join(keys, ", ")))
		}
	}
	for key, ips := range want.Attached {
		got, ok := byKey[key]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("Service %s is missing", key))
		case len(ips) == 0:
			problems = append(problems, fmt.Sprintf("Service %s: its claim has no address", key))
		case !sameSet(got, ips):
			problems = append(problems, fmt.Sprintf("Service %s shows %v, its claim holds %v", key, sorted(got), sorted(ips)))
		}
	}
	for _, key := range want.Plain {
		got, ok := byKey[key]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("Service %s is missing", key))
		case len(got) != 1:
			problems = append(problems, fmt.Sprintf("Service %s shows %d IPs %v, want 1", key, len(got), got))
		}
	}
	claimOf := map[string][]string{}
	for key, ips := range want.Claims {
		for _, ip := range ips {
			claimOf[ip] = append(claimOf[ip], key)
		}
	}
	for ip, keys := range claimOf {
		if len(keys) > 1 {
			sort.Strings(keys)
			problems = append(problems, fmt.Sprintf("IP %s is bound to %d claims: %s", ip, len(keys), strings.Join(keys, ", ")))
		}
	}
	sort.Strings(problems)
	return problems
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }
