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

// waitMetalLBPassEnded waits until MetalLB's log, from offset on, shows the end of a pass over
// every Service.
func waitMetalLBPassEnded(ctx context.Context, t *testing.T, logPath string, offset int64) {
	t.Helper()
	eventually(ctx, t, 60*time.Second, "MetalLB to end a pass over every Service", func(context.Context) (bool, error) {
		data, err := os.ReadFile(logPath)
		if err != nil || int64(len(data)) < offset {
			return false, err
		}
		for _, line := range strings.Split(string(data[offset:]), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			if m["controller"] == "ServiceReconciler - reprocessAll" && m["end reconcile"] != nil {
				return true, nil
			}
		}
		return false, nil
	})
}

// noReleaseServices fails the test when the driver created, since, a Service in its namespace
// under one of the names (a release Service takes the name of the Service MetalLB keeps an IP
// for), read from the apiserver's audit log.
func noReleaseServices(t *testing.T, since time.Time, names ...string) {
	t.Helper()
	local := localCluster(t, "it reads the apiserver's audit log")
	driver := "system:serviceaccount:" + driverNamespace + ":metallb-iad"
	evs, err := controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
		return e.User.Username == driver && e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "services" &&
			e.ObjectRef.Namespace == driverNamespace && slices.Contains(names, e.ObjectRef.Name) && !e.Stamp.Before(since)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		t.Errorf("the driver created a release Service %s/%s at %s: the patched MetalLB kept nothing to release",
			e.ObjectRef.Namespace, e.ObjectRef.Name, e.Stamp.Format(time.RFC3339))
	}
}

// neverKept fails the test when the address says, or said, KeptByMetalLB.
func neverKept(ctx context.Context, t *testing.T, c client.Client, address string) {
	t.Helper()
	var a ipamv1.IPAddress
	if err := c.Get(ctx, client.ObjectKey{Name: address}, &a); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionHeld); cond != nil && cond.Reason == "KeptByMetalLB" {
		t.Errorf("address %s says KeptByMetalLB on the patched MetalLB: %s", address, cond.Message)
	}
	if n := addressEventCount(ctx, t, c, address, "KeptByMetalLB"); n > 0 {
		t.Errorf("address %s was said KeptByMetalLB %d times on the patched MetalLB", address, n)
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
