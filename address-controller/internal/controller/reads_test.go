package controller

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// claimRefLists records the field selectors of the core's uncached lists of IPAddresses by
// claimRef (the CRD's selectable spec.claimRef fields).
var claimRefLists = &selectorLog{}

type selectorLog struct {
	mu        sync.Mutex
	selectors []string
}

// count is how many of the lists selected claims of namespace ns.
func (l *selectorLog) count(ns string) int {
	return l.countContaining("spec.claimRef.namespace=" + ns)
}

// countContaining is how many of the entries contain sub.
func (l *selectorLog) countContaining(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.selectors {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// claimReads records the core's uncached reads of single claims (refresh), by path.
var claimReads = &selectorLog{}

type countingTransport struct{ next http.RoundTripper }

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/ipaddressclaims/") && req.URL.Query().Get("watch") == "" {
		claimReads.mu.Lock()
		claimReads.selectors = append(claimReads.selectors, req.URL.Path)
		claimReads.mu.Unlock()
	}
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/ipaddresses") {
		if sel := req.URL.Query().Get("fieldSelector"); strings.Contains(sel, "spec.claimRef") {
			claimRefLists.mu.Lock()
			claimRefLists.selectors = append(claimRefLists.selectors, sel)
			claimRefLists.mu.Unlock()
		}
	}
	return t.next.RoundTrip(req)
}

// Before a write on a cache that does not show its own last write yet, a claim pass reads the
// claim and its addresses from the apiserver (refresh). Unless it binds, it reads each address
// by name: a list by claimRef makes the apiserver filter
// every address of the cluster, once per write of every claim, which at 10,000 addresses was the
// core's bottleneck (docs/benchmarks.md). Claims provisioned through a driver never bind, so
// never list while they live (every one of them was written, so refreshed, several times: with
// a list per refresh this test saw 20 lists for its 10 claims). A claim that binds an address
// an admin made lists, once per bind.
func TestClaimPassesReadTheirAddressesByName(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "reads", driverName)
	const n = 10
	for i := range n {
		newClaim(t, ns, fmt.Sprintf("c%d", i), "reads", ipamv1.IPv4)
	}
	var addrs []string
	for i := range n {
		c := waitClaimPhase(t, ns, fmt.Sprintf("c%d", i), ipamv1.ClaimBound)
		addrs = append(addrs, c.Status.Addresses[0].Name)
	}
	for _, a := range addrs {
		waitAddressPhase(t, a, ipamv1.AddressBound)
	}
	settled(t)
	if got := claimRefLists.count(ns); got > 0 {
		t.Errorf("the core listed addresses by claimRef %d times for %d claims provisioned by a driver, want none", got, n)
	}
	// Nor does it read a claim from the apiserver before each write: the finalizer and stamp are
	// decided from its cache (own_writes.go), the Bound status after one read. Reading before
	// every write read these 10 claims 23 times.
	if got := claimReads.countContaining("/namespaces/" + ns + "/ipaddressclaims/"); got > n+n/2 {
		t.Errorf("the core read claims uncached %d times for %d claims, want at most %d", got, n, n+n/2)
	}

	// Binding an admin's Available address: one list, for the bind.
	newClass(t, "reads-available", noDriver)
	newAddress(t, "203.0.113.142", "reads-available", nil)
	newClaim(t, ns, "bind", "reads-available", ipamv1.IPv4)
	waitClaimPhase(t, ns, "bind", ipamv1.ClaimBound)
	settled(t)
	if got := claimRefLists.count(ns); got < 1 || got > 2 {
		t.Errorf("the core listed addresses by claimRef %d times for one bind, want once (twice if a pass lost a race)", got)
	}
}

// The memory of this controller's binds keeps an address until the cache lists it for the claim
// or the apiserver shows it gone or bound elsewhere, and forgets a claim that went.
func TestBindMemory(t *testing.T) {
	m := newBindMemory()
	now := time.Unix(1000, 0)
	c, other := types.NamespacedName{Namespace: "t", Name: "c"}, types.NamespacedName{Namespace: "t", Name: "d"}
	m.bound(c, "ip-a", now)
	m.bound(c, "ip-b", now)
	m.bound(c, "ip-a", now)
	m.bound(other, "ip-c", now)
	if got := m.of(c, now); !slices.Equal(got, []string{"ip-a", "ip-b"}) {
		t.Fatalf("remembered %v", got)
	}
	m.observed(c, []ipamv1.IPAddress{{ObjectMeta: metav1.ObjectMeta{Name: "ip-a"}}}, now)
	if got := m.of(c, now); !slices.Equal(got, []string{"ip-b"}) {
		t.Fatalf("after the cache listed ip-a: %v", got)
	}
	m.gone(c, "ip-b", now)
	if got := m.of(c, now); len(got) != 0 {
		t.Fatalf("after ip-b was seen gone: %v", got)
	}
	if m.mem.Len() != 1 {
		t.Fatal("an empty entry is kept")
	}
	m.forget(other)
	if m.mem.Len() != 0 {
		t.Fatalf("%d entries left", m.mem.Len())
	}
	// A bind the cache has not shown is remembered however long the cache lags: a pass that
	// writes from the cache must not lose it (only the cache or the apiserver ends it).
	m.bound(c, "ip-e", now)
	m.bound(c, "ip-f", now.Add(ownWriteTTL))
	if got := m.of(c, now.Add(10*ownWriteTTL)); !slices.Equal(got, []string{"ip-e", "ip-f"}) {
		t.Fatalf("binds the cache never showed, long after: %v", got)
	}
}
