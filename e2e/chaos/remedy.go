package chaos

import (
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// RestartWindow is how long after a kill of MetalLB's controller a Service deletion counts as
// made in its restart window: MetalLB handles no Service event until its first pass over every
// Service succeeds, and under chaos (the apiserver and etcd killed and stalled too) that pass
// can take a while.
const RestartWindow = 2 * time.Minute

// keptNames finds the "namespace/name" Services that a KeptByMetalLB message says MetalLB keeps
// the IP for ("… as used by ns/a, ns/b, which no longer exists …").
var keptNames = regexp.MustCompile(`as used by (.+?), which no longer exists`)

// Kept is an address whose Held condition says MetalLB keeps its IP for deleted Services.
type Kept struct {
	Address  string
	Services []string
}

// KeptByMetalLB lists the addresses whose Held condition says KeptByMetalLB, with the Services
// it names.
func KeptByMetalLB(snap Snapshot) []Kept {
	var out []Kept
	for _, a := range snap.Address {
		c := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld)
		if c == nil || c.Reason != "KeptByMetalLB" {
			continue
		}
		k := Kept{Address: a.Name}
		if m := keptNames.FindStringSubmatch(c.Message); m != nil {
			for _, s := range strings.Split(m[1], ",") {
				k.Services = append(k.Services, strings.TrimSpace(s))
			}
		}
		out = append(out, k)
	}
	return out
}

// Explained says whether the admin remedy (restarting MetalLB's controller) answers a
// KeptByMetalLB state: every Service it names was deleted by the run (deleted: "ns/name" → when)
// within RestartWindow after a kill of MetalLB's controller (kills). Anything else is a state
// the controllers reported without cause, which a restart would only hide.
func Explained(k Kept, deleted map[string]time.Time, kills []time.Time) bool {
	if len(k.Services) == 0 {
		return false
	}
	for _, s := range k.Services {
		at, ok := deleted[s]
		if !ok || !slices.ContainsFunc(kills, func(kill time.Time) bool {
			return !at.Before(kill) && at.Sub(kill) <= RestartWindow
		}) {
			return false
		}
	}
	return true
}
