package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// coreWriteBudget is the core's share of the write budget (docs/design.md#the-write-budget) for one
// reserved address, from claim creation to Bound, events included, on this suite's apiserver: the
// claim's finalizer and provisioner annotation (one merged patch), its Bound status, the address's
// protection finalizer and its Bound phase. No Pending status: the CRD defaults the phase, and a
// claim that only waits for its driver is left quiet (quietUntil). The chart's protection policy,
// which this suite does not install, puts the finalizer on at creation and takes the core to three;
// the e2e TestWriteBudgetOnTheSandbox counts that, with every controller, against the budget of 7.
const coreWriteBudget = 4

// auditRecord is one write in the apiserver's audit log.
type auditRecord struct {
	Verb      string
	URI       string
	Namespace string
	Resource  string
	Name      string
	Code      int
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
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user || ev.Stamp.Before(since) {
			continue
		}
		if strings.Contains(ev.RequestURI, "/leases/") {
			continue
		}
		out = append(out, auditRecord{Verb: ev.Verb, URI: ev.RequestURI, Namespace: ev.ObjectRef.Namespace,
			Resource: ev.ObjectRef.Resource, Name: ev.ObjectRef.Name, Code: ev.ResponseStatus.Code})
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

// A driver writes its status conditions on an address it has just created, at the moment the
// core adds its protection finalizer and derives the phase. The core's two writes must not be
// refused for it (each refusal is a wasted write and a retry: about 0.8 per address in the
// benchmark), and must not lose the driver's conditions or finalizer either.
func TestDriverStatusWritesCostTheCoreNoRefusedWrite(t *testing.T) {
	ns := newNamespace(t)
	// A class no running driver serves: this test plays the driver.
	newClass(t, "status-race", "race.drivers.example.com")
	const n = 12
	since := time.Now()
	var addrs []string
	for i := range n {
		c := newClaim(t, ns, fmt.Sprintf("c%d", i), "status-race", ipamv1.IPv4)
		waitStamped(t, ns, c.Name) // the core has seen it (Pending alone is the schema's default)
		eventually(t, "the claim's uid", func() (bool, error) {
			return c.UID != "", admin.Get(context.Background(), client.ObjectKeyFromObject(c), c)
		})
		ip := fmt.Sprintf("198.51.100.%d", 200+i)
		a := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip)),
				Finalizers: []string{"teardown.race.drivers.example.com"}},
			Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: "status-race",
				ClaimRef: &ipamv1.ClaimReference{Namespace: ns, Name: c.Name, UID: c.UID}},
		}
		create(t, a)
		addrs = append(addrs, a.Name)
		// The driver's status writes, as metallb-iad makes them right after the create.
		for j, st := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionTrue} {
			if j > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			orig := a.DeepCopy()
			meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: "Held", Status: st,
				Reason: "Test", Message: "the test's driver", ObservedGeneration: a.Generation})
			if err := admin.Status().Patch(context.Background(), a, client.MergeFrom(orig)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, name := range addrs {
		waitClaimPhase(t, ns, fmt.Sprintf("c%d", i), ipamv1.ClaimBound)
		a := waitAddressPhase(t, name, ipamv1.AddressBound)
		if !controllerutil.ContainsFinalizer(a, ipamv1.FinalizerAddress) || !controllerutil.ContainsFinalizer(a, "teardown.race.drivers.example.com") {
			t.Errorf("address %s has finalizers %v, want the core's and the driver's", name, a.Finalizers)
		}
		if !meta.IsStatusConditionTrue(a.Status.Conditions, "Held") {
			t.Errorf("address %s lost the driver's condition: %+v", name, a.Status.Conditions)
		}
	}
	var refused []string
	for _, w := range auditedRecords(t, coreUser, since) {
		if w.Resource == "ipaddresses" && slices.Contains(addrs, w.Name) && w.Code >= 400 {
			refused = append(refused, fmt.Sprintf("%s %s: %d", w.Verb, w.URI, w.Code))
		}
	}
	if len(refused) > 0 {
		t.Fatalf("the apiserver refused %d of the core's writes to %d addresses:\n%s", len(refused), n, strings.Join(refused, "\n"))
	}
}
