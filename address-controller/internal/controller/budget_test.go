package controller

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// coreWriteBudget is the core's share of DESIGN §5a's write budget for one reserved address,
// from claim creation to Bound, events included. The contract fixes five writes the core cannot
// avoid: the claim's finalizer and provisioner annotation (one merged patch), its Pending status
// (the driver provisions only for a claim whose status names its class), its Bound status, the
// address's protection finalizer, and the address's Bound phase.
const coreWriteBudget = 5

// auditRecord is one write in the apiserver's audit log.
type auditRecord struct {
	Verb      string
	URI       string
	Namespace string
	Resource  string
	Name      string
}

// auditedRecords returns the writes user made since `since`, with the object each concerns.
func auditedRecords(t *testing.T, user string, since time.Time) []auditRecord {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Verb       string    `json:"verb"`
			RequestURI string    `json:"requestURI"`
			Stamp      time.Time `json:"requestReceivedTimestamp"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource  string `json:"resource"`
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user || ev.Stamp.Before(since) {
			continue
		}
		if strings.Contains(ev.RequestURI, "/leases/") {
			continue
		}
		out = append(out, auditRecord{Verb: ev.Verb, URI: ev.RequestURI, Namespace: ev.ObjectRef.Namespace,
			Resource: ev.ObjectRef.Resource, Name: ev.ObjectRef.Name})
	}
	return out
}

// The core's writes for claims bound through a driver stay within its share of the write
// budget, counted from the apiserver's audit log: every write of the core's identity about the
// test's claims, their addresses, and events about either.
func TestCoreWritesPerAddressThroughTheDriver(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "budget", driverName)
	const n = 5
	since := time.Now()
	for i := range n {
		newClaim(t, ns, fmt.Sprintf("c%d", i), "budget", ipamv1.IPv4)
	}
	var addrs []string
	for i := range n {
		c := waitClaimPhase(t, ns, fmt.Sprintf("c%d", i), ipamv1.ClaimBound)
		addrs = append(addrs, c.Status.Addresses[0].Name)
	}
	for _, a := range addrs {
		waitAddressPhase(t, a, ipamv1.AddressBound)
	}
	ours := func() []string {
		var out []string
		for _, w := range auditedRecords(t, coreUser, since) {
			mine := w.Namespace == ns ||
				(w.Resource == "ipaddresses" && slices.Contains(addrs, w.Name)) ||
				(w.Resource == "events" && slices.ContainsFunc(addrs, func(a string) bool { return strings.HasPrefix(w.Name, a+".") }))
			if mine {
				out = append(out, w.Verb+" "+w.URI)
			}
		}
		return out
	}
	// Settled: nothing more comes for a while.
	consistently(t, "the core's writes to stay within its budget", 3*time.Second, func() (bool, error) {
		if w := ours(); len(w) > coreWriteBudget*n {
			return false, fmt.Errorf("%d writes for %d addresses (%.1f each, budget %d):\n%s",
				len(w), n, float64(len(w))/n, coreWriteBudget, strings.Join(w, "\n"))
		}
		return true, nil
	})
	t.Logf("the core made %d writes for %d addresses bound through the driver", len(ours()), n)
}
