package chaos

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func TestKeptByMetalLBReadsTheNamedServices(t *testing.T) {
	snap := settled()
	snap.Address[1].Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: "KeptByMetalLB",
		Message: "MetalLB still counts 198.18.20.130 as used by t/s1, t/s2, which no longer exists (MetalLB missed the deletion while its controller was restarting); restart MetalLB's controller to free the address"}}
	snap.Address[2].Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: "WaitingForMetalLB"}}
	got := KeptByMetalLB(snap)
	if len(got) != 1 || got[0].Address != snap.Address[1].Name || len(got[0].Services) != 2 || got[0].Services[0] != "t/s1" || got[0].Services[1] != "t/s2" {
		t.Fatalf("KeptByMetalLB = %+v", got)
	}
}

func TestExplained(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	kills := []time.Time{t0}
	for _, tc := range []struct {
		name    string
		kept    Kept
		deleted map[string]time.Time
		want    bool
	}{
		{"deleted a second after a kill", Kept{Services: []string{"t/s1"}}, map[string]time.Time{"t/s1": t0.Add(time.Second)}, true},
		{"deleted at the end of the window", Kept{Services: []string{"t/s1"}}, map[string]time.Time{"t/s1": t0.Add(RestartWindow)}, true},
		{"deleted after the window", Kept{Services: []string{"t/s1"}}, map[string]time.Time{"t/s1": t0.Add(RestartWindow + time.Second)}, false},
		{"deleted before the kill", Kept{Services: []string{"t/s1"}}, map[string]time.Time{"t/s1": t0.Add(-time.Second)}, false},
		{"never deleted by the run", Kept{Services: []string{"t/s1"}}, nil, false},
		{"one of two unexplained", Kept{Services: []string{"t/s1", "t/s2"}}, map[string]time.Time{"t/s1": t0.Add(time.Second)}, false},
		{"no name read", Kept{}, map[string]time.Time{"t/s1": t0.Add(time.Second)}, false},
	} {
		if got := Explained(tc.kept, tc.deleted, kills); got != tc.want {
			t.Errorf("%s: Explained = %v, want %v", tc.name, got, tc.want)
		}
	}
}
