package policycel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	// Writes whose only difference is spec.externalIPs, for each user and each old/new pair: the
	// short seeds above end before the generator's external-IP bytes.
	for user := range 5 {
		for _, ext := range [][2]byte{{0, 1}, {1, 3}, {3, 1}, {1, 2}, {2, 2}} {
			f.Add(externalIPSeed(byte(user), ext[0], ext[1]))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := GenRequest(b, driverUser)
		got, err := p.Evaluate(req)
		if err != nil {
			t.Fatalf("the policy fails to evaluate (a Fail policy then denies everything): %v\nrequest %+v", err, req)
		}
		if want := rule.Allows(req); got.Allowed != want {
			t.Fatalf("policy allowed=%v (%q), the service-pins rule says %v (changed %v)\nuser %s %v\nold %v\nnew %v",
				got.Allowed, got.Message, want, rule.Changed(req), req.Username, req.Groups, req.OldObject, req.Object)
		}
		if !got.Allowed && !strings.Contains(got.Message, req.Username) {
			t.Fatalf("denial message does not name the user %s: %q", req.Username, got.Message)
		}
	})
}

// externalIPSeed is GenRequest's input for an update by Users()[user] that changes nothing but
// spec.externalIPs, from externalIPValues[old] to externalIPValues[new].
func externalIPSeed(user, old, new byte) []byte {
	b := []byte{1, user}
	b = append(b, make([]byte, 3*(len(ProtectedAnnotations)+len(unprotectedAnnotations))+3)...)
	return append(b, old, new, 1)
}

// The external-IP guard (CVE-2020-8554): a tenant may not add or change external IPs, may keep or
// remove them; the driver and admins may do anything; a denial says what to do instead.
func TestExternalIPGuard(t *testing.T) {
	p, _ := loadPolicy(t)
	if !p.MentionsExternalIPs() {
		t.Fatal("the chart's default policy does not guard spec.externalIPs")
	}
	for _, tc := range []struct {
		name          string
		user, old, nu byte
		allowed       bool
	}{
		{"tenant adds one", 0, 0, 1, false},
		{"tenant appends one", 0, 1, 3, false},
		{"tenant replaces one", 0, 1, 2, false},
		{"tenant keeps them", 0, 3, 3, true},
		{"tenant removes one", 0, 3, 1, true},
		{"tenant removes all", 0, 1, 0, true},
		{"driver adds one", 1, 0, 1, true},
		{"admin group adds one", 2, 0, 1, true},
		{"driver's name in another namespace adds one", 3, 0, 1, false},
		{"look-alike admin group adds one", 4, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := GenRequest(externalIPSeed(tc.user, tc.old, tc.nu), driverUser)
			if got, want := req.Object["spec"].(map[string]any)["externalIPs"], externalIPValues[tc.nu]; len(want) > 0 && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed builds externalIPs %v, want %v: the generator's layout changed", got, want)
			}
			d, err := p.Evaluate(req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.allowed {
				t.Fatalf("allowed=%v (%q), want %v", d.Allowed, d.Message, tc.allowed)
			}
			if !d.Allowed {
				for _, want := range []string{"spec.externalIPs", req.Username, "IPAddressClaim", "type LoadBalancer"} {
					if !strings.Contains(d.Message, want) {
						t.Errorf("denial %q does not say %q", d.Message, want)
					}
				}
			}
		})
	}
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

// parkedSeed is GenRequest's input for a write by Users()[user] whose only protected annotation
// is key (index into ProtectedAnnotations), from annotationValues[old] to annotationValues[new]
// (on CREATE when create).
func parkedSeed(create bool, user byte, key int, old, new byte) []byte {
	b := []byte{1, user}
	if create {
		b[0] = 0
	}
	b = append(b, make([]byte, 3*(len(ProtectedAnnotations)+len(unprotectedAnnotations))+6)...)
	b[2+3*key], b[2+3*key+1], b[2+3*key+2] = old, new, 1
	return b
}

// The parking value of MetalLB's pool annotation (ParkingPool, which the parking
// policies set) is no protected request: a tenant may create a Service with it, add it, drop it;
// any other change of the pool annotation, the same value under another key, or a look-alike
// value stays denied.
func TestServicePinsPolicyLetsTenantsParkAndUnpark(t *testing.T) {
	p, rule := loadPolicy(t)
	const none, poolA, parked, lookAlike = 0, 5, 6, 7
	if *annotationValues[parked] != ParkingPool || *annotationValues[poolA] != "pool-a" {
		t.Fatal("the generator's values changed")
	}
	pool := slices.Index(ProtectedAnnotations, ParkingAnnotation)
	oldPool := slices.Index(ProtectedAnnotations, "metallb.universe.tf/address-pool")
	pin := slices.Index(ProtectedAnnotations, "metallb.io/loadBalancerIPs")
	for _, tc := range []struct {
		name    string
		create  bool
		key     int
		old, nu byte
		allowed bool
	}{
		{"create parked", true, pool, none, parked, true},
		{"park on update", false, pool, none, parked, true},
		{"unpark on update", false, pool, parked, none, true},
		{"keep parked", false, pool, parked, parked, true},
		{"parked to a pool", false, pool, parked, poolA, false},
		{"a pool to parked", false, pool, poolA, parked, false},
		{"create with a pool", true, pool, none, poolA, false},
		{"create with a look-alike", true, pool, none, lookAlike, false},
		{"parked to a look-alike", false, pool, parked, lookAlike, false},
		{"parked under the deprecated key", true, oldPool, none, parked, false},
		{"parked value as a pin", true, pin, none, parked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := GenRequest(parkedSeed(tc.create, 0, tc.key, tc.old, tc.nu), driverUser)
			if got := annotations(req.Object)[ProtectedAnnotations[tc.key]]; tc.nu != none && got != *annotationValues[tc.nu] {
				t.Fatalf("seed builds %s=%v: the generator's layout changed", ProtectedAnnotations[tc.key], got)
			}
			if (req.OldObject == nil) != tc.create {
				t.Fatal("the generator's layout changed")
			}
			d, err := p.Evaluate(req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.allowed || rule.Allows(req) != tc.allowed {
				t.Fatalf("policy allowed=%v (%q), rule %v, want %v\nold %v\nnew %v", d.Allowed, d.Message, rule.Allows(req), tc.allowed, req.OldObject, req.Object)
			}
		})
	}
}

// A seeded sample of generated writes (as the fuzz test makes them) compared with the rule, as a
// plain test; tenants' writes that park or unpark must be among them and be admitted.
func TestServicePinsPolicyRandomSample(t *testing.T) {
	p, rule := loadPolicy(t)
	rng := rand.New(rand.NewPCG(6, 6))
	parkedByTenant := 0
	pool := slices.Index(ProtectedAnnotations, ParkingAnnotation)
	for n := range 5000 {
		b := make([]byte, 48)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		if n%2 == 1 {
			// A tenant's write whose pool annotation goes between absent and parked; the other
			// fields as random as elsewhere.
			b[1] = 0
			b[2+3*pool], b[2+3*pool+1], b[2+3*pool+2] = []byte{0, 6}[rng.IntN(2)], []byte{0, 6}[rng.IntN(2)], 1
		}
		req := GenRequest(b, driverUser)
		got, err := p.Evaluate(req)
		if err != nil {
			t.Fatal(err)
		}
		if want := rule.Allows(req); got.Allowed != want {
			t.Fatalf("policy allowed=%v (%q), the rule says %v (changed %v)\nuser %s\nold %v\nnew %v",
				got.Allowed, got.Message, want, rule.Changed(req), req.Username, req.OldObject, req.Object)
		}
		na, oa := annotations(req.Object), annotations(req.OldObject)
		if req.Username == Users(driverUser)[0].Name && got.Allowed &&
			(na[ParkingAnnotation] == ParkingPool) != (oa[ParkingAnnotation] == ParkingPool) {
			parkedByTenant++
		}
	}
	if parkedByTenant < 20 {
		t.Fatalf("only %d admitted tenant writes park or unpark a Service: the sample does not exercise the exemption", parkedByTenant)
	}
}
