package charts

import (
	"strings"
	"testing"
)

// Issue 29, defect 3: the driver's own parking is the fallback where the admission policies are
// missing, so turning the policies off (admissionPolicy.enabled: false) must leave it on; only
// admissionPolicy.parking: false turns it off.
func TestDriverParkingFlagFollowsParkingOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy map[string]any
		want   string
	}{
		{"defaults", nil, "--parking=true"},
		{"admission policies off", map[string]any{"enabled": false}, "--parking=true"},
		{"admission policies off, parking off", map[string]any{"enabled": false, "parking": false}, "--parking=false"},
		{"parking off", map[string]any{"parking": false}, "--parking=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.policy != nil {
				values["admissionPolicy"] = tc.policy
			}
			objs := render(t, "metallb-iad", values)
			var flags []string
			for _, a := range toStrings(dig(objs["Deployment/metallb-iad"], "spec", "template", "spec", "containers", 0, "args")) {
				if strings.HasPrefix(a, "--parking") {
					flags = append(flags, a)
				}
			}
			if len(flags) != 1 || flags[0] != tc.want {
				t.Errorf("parking flags %v, want [%s]", flags, tc.want)
			}
		})
	}
}
