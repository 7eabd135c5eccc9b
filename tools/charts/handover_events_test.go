package charts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// handoverRefusal is MetalLB's message (v0.15.2 through v0.16.2, controller/service.go and its allocator) when it
// handles a Service pinned to an IP it still counts as used by the Services in users.
func handoverRefusal(ns, name string, users ...string) string {
	key := ns + "/" + name
	return fmt.Sprintf("Failed to allocate IP for %q: can't change sharing key for %q, address also in use by %s", key, key, strings.Join(users, ","))
}

// The hand-over-events policy on a real kube-apiserver, installed by Helm from the chart:
// MetalLB's AllocationFailed about a Service whose IP it still counts as the driver's
// placeholder's, and its ClearAssignment about a detached Service whose IP the placeholder keeps,
// are not recorded (core/v1 and events.k8s.io/v1, any namespace but the driver's);
// the same report naming any Service outside the driver's namespace, any report about a Service
// in the driver's namespace (the driver reads those), and every other event are.
func TestHandoverEventsPolicyOnTheAPIServer(t *testing.T) {
	const ns = driverNamespace
	// Parking off: this policy does not depend on it.
	w := eventsPolicyCluster(t, map[string]any{"admissionPolicy": map[string]any{"parking": false}})
	coreEvent, newEvent := w.core, w.events
	refused := func(err error) bool { return apierrors.IsForbidden(err) }
	eventually(t, 30*time.Second, "the hand-over-events policy to take effect", func() (bool, error) {
		err := coreEvent("tenant-events", "AllocationFailed", handoverRefusal("tenant-events", "web", ns+"/hold-ip-203-0-113-10"))
		return refused(err), err
	})
	for _, evNS := range []string{"tenant-events", "plain-events"} {
		for _, users := range [][]string{
			{ns + "/hold-ip-203-0-113-10"},
			{ns + "/hold-ip-203-0-113-10", ns + "/claim-0b1f-v4"},
		} {
			msg := handoverRefusal(evNS, "web", users...)
			if err := coreEvent(evNS, "AllocationFailed", msg); !refused(err) {
				t.Errorf("core/v1: %q in %s was recorded (err %v)", msg, evNS, err)
			} else if !strings.Contains(err.Error(), "handed over") {
				t.Errorf("core/v1: the denial does not say why: %v", err)
			}
			if err := newEvent(evNS, "AllocationFailed", msg); !refused(err) {
				t.Errorf("events.k8s.io/v1: %q in %s was recorded (err %v)", msg, evNS, err)
			}
		}
	}
	// MetalLB clears a detached Service's address itself when the hold keeps it under the sharing
	// key the Service no longer carries.
	clear := `current IP for "tenant-events/web" not allowed by config, will attempt for new IP assignment: ` +
		`can't change sharing key for "tenant-events/web", address also in use by ` + ns + "/hold-ip-203-0-113-10"
	if err := coreEvent("tenant-events", "ClearAssignment", clear); !refused(err) {
		t.Errorf("core/v1: %q was recorded (err %v)", clear, err)
	}
	if err := newEvent("tenant-events", "ClearAssignment", clear); !refused(err) {
		t.Errorf("events.k8s.io/v1: %q was recorded (err %v)", clear, err)
	}
	// An update that turns a recorded report into the hand-over report is refused too.
	if err := w.rewrite(t, handoverRefusal("tenant-events", "web", ns+"/hold-ip-203-0-113-10")); !refused(err) {
		t.Errorf("an update to the hand-over report was recorded (err %v)", err)
	}
	// Everything else is recorded.
	for _, tt := range []struct{ what, ns, reason, msg string }{
		{"a conflict with a tenant's Service", "tenant-events", "AllocationFailed", handoverRefusal("tenant-events", "web", "tenant-events/other")},
		{"a conflict with a tenant's Service and a placeholder", "tenant-events", "AllocationFailed", handoverRefusal("tenant-events", "web", ns+"/hold-ip-203-0-113-10", "plain-events/db")},
		{"a Service in a namespace whose name starts like the driver's", "tenant-events", "AllocationFailed", handoverRefusal("tenant-events", "web", ns+"-other/hold-ip-203-0-113-10")},
		{"the driver's namespace with no Service name", "tenant-events", "AllocationFailed", handoverRefusal("tenant-events", "web", ns+"/")},
		{"a report about a placeholder (the driver reads those)", ns, "AllocationFailed", handoverRefusal(ns, "hold-ip-203-0-113-10", ns+"/claim-0b1f-v4")},
		{"an exhausted pool", "tenant-events", "AllocationFailed", `Failed to allocate IP for "tenant-events/web": no available IPs`},
		{"a port conflict", "tenant-events", "AllocationFailed", `Failed to allocate IP for "tenant-events/web": port 80/TCP is already in use on "203.0.113.10"`},
		{"another reason quoting the hand-over", "tenant-events", "nolbIPsIPFamily", handoverRefusal("tenant-events", "web", ns+"/hold-ip-203-0-113-10")},
		{"a ClearAssignment naming a tenant's Service", "tenant-events", "ClearAssignment", handoverRefusal("tenant-events", "web", "tenant-events/other")},
	} {
		if err := coreEvent(tt.ns, tt.reason, tt.msg); err != nil {
			t.Errorf("core/v1: %s was not recorded: %v", tt.what, err)
		}
		if err := newEvent(tt.ns, tt.reason, tt.msg); err != nil {
			t.Errorf("events.k8s.io/v1: %s was not recorded: %v", tt.what, err)
		}
	}
}
