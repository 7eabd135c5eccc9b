package charts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// parkedRefusal is MetalLB's message (v0.15.2 through v0.16.2, controller/service.go and its allocator) when it
// looks at a parked Service.
func parkedRefusal(ns, name string) string {
	return fmt.Sprintf("Failed to allocate IP for %q: unknown pool %q", ns+"/"+name, parkingPool)
}

// The parking-events policy on a real kube-apiserver, installed by Helm from the chart: MetalLB's
// AllocationFailed about the parking pool is not recorded (core/v1 and events.k8s.io/v1, in any
// namespace), while every other event, AllocationFailed for another reason included, is.
func TestParkingEventsPolicyOnTheAPIServer(t *testing.T) {
	w := eventsPolicyCluster(t, map[string]any{})
	coreEvent, newEvent := w.core, w.events
	refused := func(err error) bool { return apierrors.IsForbidden(err) }
	// The policy reaches the apiserver's admission through its informers.
	eventually(t, 30*time.Second, "the parking-events policy to take effect", func() (bool, error) {
		err := coreEvent("tenant-events", "AllocationFailed", parkedRefusal("tenant-events", "web"))
		return refused(err), err
	})
	for _, evNS := range []string{"tenant-events", "plain-events"} {
		if err := coreEvent(evNS, "AllocationFailed", parkedRefusal(evNS, "web")); !refused(err) {
			t.Errorf("core/v1: MetalLB's refusal of the parking pool in %s was recorded (err %v)", evNS, err)
		} else if !strings.Contains(err.Error(), "parked") {
			t.Errorf("core/v1: the denial does not say why: %v", err)
		}
		if err := newEvent(evNS, "AllocationFailed", parkedRefusal(evNS, "web")); !refused(err) {
			t.Errorf("events.k8s.io/v1: MetalLB's refusal of the parking pool in %s was recorded (err %v)", evNS, err)
		}
	}
	// An update that turns a recorded report into the parking refusal (client-go's recorder
	// patches an event it has said before) is refused too.
	if err := w.rewrite(t, parkedRefusal("tenant-events", "web")); !refused(err) {
		t.Errorf("an update to MetalLB's refusal of the parking pool was recorded (err %v)", err)
	}
	// Everything else is recorded.
	for _, tt := range []struct{ what, reason, msg string }{
		{"AllocationFailed for an exhausted pool", "AllocationFailed", `Failed to allocate IP for "tenant-events/web": no available IPs`},
		{"AllocationFailed for a pool that does not exist", "AllocationFailed", `Failed to allocate IP for "tenant-events/web": unknown pool "gold"`},
		{"another reason quoting the parking pool", "ClearAssignment", `current IP not allowed by config: unknown pool "` + parkingPool + `"`},
	} {
		if err := coreEvent("tenant-events", tt.reason, tt.msg); err != nil {
			t.Errorf("core/v1: %s was not recorded: %v", tt.what, err)
		}
		if err := newEvent("tenant-events", tt.reason, tt.msg); err != nil {
			t.Errorf("events.k8s.io/v1: %s was not recorded: %v", tt.what, err)
		}
	}
}
