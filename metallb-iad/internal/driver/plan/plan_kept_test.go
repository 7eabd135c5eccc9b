package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// manyNames is "n0/s0, n1/s1, ..." for n names.
func manyNames(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "n%d/s%d", i, i)
	}
	return b.String()
}

func TestKeptCandidates(t *testing.T) {
	attached := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "web"}}
	const said = "Failed to allocate IP for \"t/web\": [\"198.51.100.1\"]: can't change sharing key for \"t/web\", address also in use by "
	for _, tc := range []struct {
		name     string
		messages []string
		attached *corev1.Service
		want     []types.NamespacedName
	}{
		{"no report", []string{"", ""}, nil, nil},
		{"another failure", []string{"Failed to allocate IP: unknown pool \"p\""}, nil, nil},
		{"a tenant's Service", []string{said + "a/gone"}, nil, []types.NamespacedName{{Namespace: "a", Name: "gone"}}},
		{"the driver's own names are released, not reported", []string{said + "cozy-metallb-iad/hold-x, a/gone"}, nil,
			[]types.NamespacedName{{Namespace: "a", Name: "gone"}}},
		{"the attached Service itself is not its own keeper", []string{said + "t/web"}, attached, nil},
		{"a name said twice counts once", []string{said + "a/gone", said + "a/gone, b/other"}, nil,
			[]types.NamespacedName{{Namespace: "a", Name: "gone"}, {Namespace: "b", Name: "other"}}},
		// A report in a tenant's namespace may be the tenant's own: it names no more than a few
		// Services, each a read of the apiserver, and only names a Service can have.
		{"a report naming thousands of Services is read for a few", []string{said + manyNames(5000)}, nil,
			[]types.NamespacedName{{Namespace: "n0", Name: "s0"}, {Namespace: "n1", Name: "s1"}, {Namespace: "n2", Name: "s2"}, {Namespace: "n3", Name: "s3"}}},
		{"what no Service can be named is not a name", []string{said + "A/x, a/-x, a/" + strings.Repeat("x", 64) + ", a/x/y, /x, a/"}, nil, nil},
	} {
		if got := KeptCandidates(tc.messages, "cozy-metallb-iad", tc.attached); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestKeptVerdict(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		gone        map[string]time.Time
		said        bool
		want        []string
		wantRecheck time.Duration
	}{
		{"nothing gone", nil, false, nil, 0},
		{"just seen gone: not yet, looked at again when due", map[string]time.Time{"a/x": now.Add(-5 * time.Second)}, false, nil, KeptGrace - 5*time.Second},
		{"gone for the grace", map[string]time.Time{"a/x": now.Add(-KeptGrace)}, false, []string{"a/x"}, 0},
		{"one due, one not", map[string]time.Time{"a/x": now.Add(-time.Minute), "b/y": now.Add(-10 * time.Second)}, false, []string{"a/x"}, KeptGrace - 10*time.Second},
		{"said before (the driver restarted and forgot): no new grace", map[string]time.Time{"a/x": now}, true, []string{"a/x"}, 0},
	} {
		got, recheck := KeptVerdict(tc.gone, now, tc.said)
		if !slices.Equal(got, tc.want) || recheck != tc.wantRecheck {
			t.Errorf("%s: %v, %s; want %v, %s", tc.name, got, recheck, tc.want, tc.wantRecheck)
		}
	}
}
