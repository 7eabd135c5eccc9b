package freshness

import "testing"

func TestRVAtLeast(t *testing.T) {
	for _, tc := range []struct {
		have, want string
		ok         bool
	}{
		{"10", "10", true},
		{"11", "10", true},
		{"9", "10", false},
		{"100", "99", true}, // numbers, not strings: "100" < "99" as text
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"", "10", false},
		{"10", "", false},
	} {
		if got := RVAtLeast(tc.have, tc.want); got != tc.ok {
			t.Errorf("RVAtLeast(%q, %q) = %v, want %v", tc.have, tc.want, got, tc.ok)
		}
	}
}
