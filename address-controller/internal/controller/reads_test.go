package controller

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// coreReads counts the core's uncached reads of IPAddresses by kind: "list by claimRef" (a list
// with a field selector on the CRD's claimRef fields), "list" (any other list) and "get".
var coreReads = &readCounter{n: map[string]int{}}

type readCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *readCounter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

type countingTransport struct{ next http.RoundTripper }

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" && strings.Contains(req.URL.Path, "/ipaddresses") {
		kind := "get"
		switch {
		case strings.HasSuffix(req.URL.Path, "/ipaddresses") && strings.Contains(req.URL.Query().Get("fieldSelector"), "spec.claimRef"):
			kind = "list by claimRef"
		case strings.HasSuffix(req.URL.Path, "/ipaddresses"):
			kind = "list"
		}
		coreReads.mu.Lock()
		coreReads.n[kind]++
		coreReads.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}

// Before a write, a claim pass reads the claim and its addresses from the apiserver (refresh).
// It reads each address by name: a list by claimRef makes the apiserver filter every address of
// the cluster, once per write of every claim, which at 10,000 addresses was the core's
// bottleneck (docs/benchmarks.md). Claims provisioned through a driver never list.
func TestClaimPassesReadTheirAddressesByName(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "reads", driverName)
	const n = 10
	lists, gets := coreReads.get("list by claimRef"), coreReads.get("get")
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
	time.Sleep(time.Second)
	if got := coreReads.get("list by claimRef") - lists; got > 0 {
		t.Errorf("the core listed addresses by claimRef %d times for %d claims, want none", got, n)
	}
	// Each write pass read its claim and its addresses by name (not vacuous: the refresh ran).
	if got := coreReads.get("get") - gets; got < 2*n {
		t.Errorf("%d uncached gets of addresses for %d claims: the refresh did not read them", got, n)
	}
}
