package policycel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testNamespace = "cozy-metallb-iad"

var driverUser = "system:serviceaccount:" + testNamespace + ":metallb-iad"

func loadPolicy(t testing.TB) (*Policy, Rule) {
	t.Helper()
	root := filepath.Join("..", "..")
	if r := os.Getenv("POLICYCEL_ROOT"); r != "" {
		root = r // another checkout's chart, e.g. a branch that changes the policy
	}
	p, err := Load(root, testNamespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, Rule{DriverUser: driverUser, AllowedGroups: DefaultAllowedGroups, ExternalIPs: p.MentionsExternalIPs()}
}

// Random Service writes: the chart's policy, evaluated with the apiserver's CEL environment,
// denies every change of a protected field by anyone but the driver and the admins, and admits
// everything else; a denial names the field and the user.
func FuzzServicePinsPolicy(f *testing.F) {
	p, rule := loadPolicy(f)
	for _, seed := range [][]byte{
		{}, {1}, {0, 0, 0, 1}, {1, 0, 0, 2, 1}, {1, 1, 0, 2, 1}, {1, 2, 0, 2, 1}, {0, 0},
		{1, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 5, 5, 0, 0, 1, 1, 0, 1},
		{1, 4, 2, 3, 1}, {1, 3, 2, 3, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := GenRequest(b, driverUser)
		got, err := p.Evaluate(req)
		if err != nil {
			t.Fatalf("the policy fails to evaluate (a Fail policy then denies everything): %v\nrequest %+v", err, req)
		}
		if want := rule.Allows(req); got.Allowed != want {
			t.Fatalf("policy allowed=%v (%q), DESIGN §6 says %v (changed %v)\nuser %s %v\nold %v\nnew %v",
				got.Allowed, got.Message, want, rule.Changed(req), req.Username, req.Groups, req.OldObject, req.Object)
		}
		if !got.Allowed && !strings.Contains(got.Message, req.Username) {
			t.Fatalf("denial message does not name the user %s: %q", req.Username, got.Message)
		}
	})
}

func TestPolicyIsTheChartsAndCompiles(t *testing.T) {
	p, _ := loadPolicy(t)
	if len(p.Spec.Validations) == 0 || len(p.Spec.Variables) == 0 {
		t.Fatalf("rendered policy has %d validations and %d variables", len(p.Spec.Validations), len(p.Spec.Variables))
	}
	// A plain tenant pin is denied, the same write by the driver admitted.
	req := GenRequest(nil, driverUser)
	req.Object["metadata"].(map[string]any)["annotations"] = map[string]any{"metallb.io/loadBalancerIPs": "203.0.113.7"}
	if d, err := p.Evaluate(req); err != nil || d.Allowed {
		t.Fatalf("tenant pin: %+v %v", d, err)
	}
	req.Username, req.Groups = driverUser, nil
	if d, err := p.Evaluate(req); err != nil || !d.Allowed {
		t.Fatalf("driver pin: %+v %v", d, err)
	}
}
