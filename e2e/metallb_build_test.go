package e2e

// The suite runs on stock MetalLB or on MetalLB built with the project's patches
// (METALLB_VERSION=v0.16.1+patched, tools/binaries/metallb/patches, docs/metallb-patches.md).
// The tests of the two behaviours the patches fix assert the fix on the patched build; the tests
// of the driver's answers to the restart window assert there that the answer is never needed:
// MetalLB keeps nothing for a deleted Service, so the driver creates no release Service and no
// address ever says KeptByMetalLB.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// patchedMetalLB says the suite's MetalLB carries the project's patches.
func patchedMetalLB() bool {
	return strings.HasSuffix(binaries.MetalLBVersion, binaries.PatchedSuffix)
}

// metallbLog returns the path of MetalLB's controller log and its size now (the offset from
// which a wait reads what comes next).
func metallbLog(t *testing.T) (string, int64) {
	t.Helper()
	local := localCluster(t, "it reads MetalLB's log")
	for _, p := range local.Processes() {
		if p.Spec.Name == "metallb-controller" {
			st, err := os.Stat(p.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			return p.LogPath, st.Size()
		}
	}
	t.Fatal("no metallb-controller process")
	return "", 0
}

// waitMetalLBPass waits until MetalLB's log, from offset on, shows a pass over every Service
// that started there and ended: a pass that began before the offset does not count.
func waitMetalLBPass(ctx context.Context, t *testing.T, logPath string, offset int64) {
	t.Helper()
	eventually(ctx, t, 60*time.Second, "MetalLB to start and end a pass over every Service", func(context.Context) (bool, error) {
		data, err := os.ReadFile(logPath)
		if err != nil || int64(len(data)) < offset {
			return false, err
		}
		started := false
		for _, line := range strings.Split(string(data[offset:]), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil || m["controller"] != "ServiceReconciler - reprocessAll" {
				continue
			}
			if m["start reconcile"] != nil {
				started = true
			}
			if started && m["end reconcile"] != nil {
				return true, nil
			}
		}
		return false, nil
	})
}

// noReleaseServices fails the test when the driver created, since, any Service in its namespace
// but the ones named (the scene's own new hold): a release Service takes the name of a Service
// MetalLB keeps an IP for, known from MetalLB's refusal or guessed (the hold's and the
// placeholders' names), so any other create is one. Read from the apiserver's audit log.
func noReleaseServices(t *testing.T, since time.Time, except ...string) {
	t.Helper()
	local := localCluster(t, "it reads the apiserver's audit log")
	driver := "system:serviceaccount:" + driverNamespace + ":metallb-iad"
	evs, err := controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
		return e.User.Username == driver && e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "services" &&
			e.ObjectRef.Namespace == driverNamespace && !slices.Contains(except, e.ObjectRef.Name) && !e.Stamp.Before(since)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		t.Errorf("the driver created Service %s/%s at %s, a release: the patched MetalLB kept nothing to release",
			e.ObjectRef.Namespace, e.ObjectRef.Name, e.Stamp.Format(time.RFC3339))
	}
}

// neverKept fails the test when the address says, or said, that MetalLB keeps its IP for a
// deleted Service: KeptByMetalLB (a name the driver cannot release) or StaleAllocation (one it
// releases), as its Held condition or in its events.
func neverKept(ctx context.Context, t *testing.T, c client.Client, address string) {
	t.Helper()
	var a ipamv1.IPAddress
	if err := c.Get(ctx, client.ObjectKey{Name: address}, &a); err != nil {
		t.Fatal(err)
	}
	kept := []string{"KeptByMetalLB", "StaleAllocation"}
	if cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld); cond != nil && slices.Contains(kept, cond.Reason) {
		t.Errorf("address %s says %s on the patched MetalLB: %s", address, cond.Reason, cond.Message)
	}
	for _, reason := range append(kept, "StaleAllocationReleased") {
		if n := addressEventCount(ctx, t, c, address, reason); n > 0 {
			t.Errorf("address %s had %d %s events on the patched MetalLB", address, n, reason)
		}
	}
}

// noRefusalNaming fails the test when MetalLB refused a Service of ns because the IP was in use
// by holder (namespace/name).
func noRefusalNaming(ctx context.Context, t *testing.T, c client.Client, ns, holder string) {
	t.Helper()
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "AllocationFailed" && strings.Contains(e.Note, "in use by "+holder) {
			t.Errorf("MetalLB refused %s: %s", fmt.Sprintf("%s/%s", ns, e.Regarding.Name), e.Note)
		}
	}
}
