package policycel

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func loadParking(t testing.TB) *Parking {
	t.Helper()
	root := filepath.Join("..", "..")
	if r := os.Getenv("POLICYCEL_ROOT"); r != "" {
		root = r // another checkout's chart
	}
	p, err := LoadParking(root, testNamespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkParking evaluates the chart's parking policies over req and compares the result with
// ParkingRule: the Service is parked by the expected policy (for the expected class) with
// exactly ParkingPool, and nothing else about it changes.
func checkParking(t testing.TB, p *Parking, req ParkRequest) string {
	t.Helper()
	before := jsonOf(t, req.Object)
	got, err := p.Evaluate(req)
	if err != nil {
		t.Fatalf("the parking policies fail to evaluate (failurePolicy Ignore then silently parks nothing): %v\nold %v\nnew %v\nclasses %v",
			err, req.OldObject, req.Object, req.Classes)
	}
	if jsonOf(t, req.Object) != before {
		t.Fatal("the evaluation changed its input")
	}
	want := ParkingRule(req)
	applied := strings.Join(got.Applied, ",")
	if applied != want {
		t.Fatalf("policies applied %q, the parking rule says %q\nold %v\nnew %v\nclasses %v", applied, want, req.OldObject, req.Object, req.Classes)
	}
	out := runtime.DeepCopyJSON(got.Object)
	if want != "" {
		ann, _ := out["metadata"].(map[string]any)["annotations"].(map[string]any)
		if ann[ParkingAnnotation] != ParkingPool {
			t.Fatalf("parked with %s=%v, want %s", ParkingAnnotation, ann[ParkingAnnotation], ParkingPool)
		}
		delete(ann, ParkingAnnotation)
		if len(ann) == 0 {
			delete(out["metadata"].(map[string]any), "annotations")
		}
	}
	if !reflect.DeepEqual(normalize(t, out), normalize(t, req.Object)) {
		t.Fatalf("parking changed more than the pool annotation:\nbefore %v\nafter  %v", req.Object, got.Object)
	}
	return want
}

func normalize(t testing.TB, obj map[string]any) any {
	var v any
	if err := json.Unmarshal([]byte(jsonOf(t, obj)), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Random Service writes and classes: the chart's parking policies, evaluated with the apiserver's
// admission CEL compiler, park exactly the Services docs/design.md#parking says (a parkable Service
// that names a claim, or that auto-claim would serve from a class of this driver, the latter never
// when an existing Service shows an address), with exactly ParkingPool.
func FuzzParkingPolicies(f *testing.F) {
	p := loadParking(f)
	for _, seed := range [][]byte{
		{}, {0, 0}, {0, 0, 0, 0, 3}, {0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0},
		{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 2, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkParking(t, p, GenParkRequest(b))
	})
}

// A seeded sample of generated writes through the same comparison, as a plain test: every
// outcome (parked by either policy, left alone) must occur, so the generator covers them.
func TestParkingPoliciesRandomSample(t *testing.T) {
	p := loadParking(t)
	rng := rand.New(rand.NewPCG(10, 10))
	seen := map[string]int{}
	for range 20000 {
		b := make([]byte, 48)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		got := checkParking(t, p, GenParkRequest(b))
		seen[strings.SplitN(got, "/", 2)[0]]++
	}
	t.Logf("outcomes: %v", seen)
	for _, want := range []string{"", ParkClaimedPolicy, ParkAutoClaimedPolicy} {
		if seen[want] < 20 {
			t.Errorf("outcome %q occurred %d times in 20000 samples: the generator does not cover it", want, seen[want])
		}
	}
}

func lbService(ann map[string]string) map[string]any {
	s := service()
	s["spec"].(map[string]any)["type"] = "LoadBalancer"
	if len(ann) > 0 {
		a := map[string]any{}
		for k, v := range ann {
			a[k] = v
		}
		s["metadata"].(map[string]any)["annotations"] = a
	}
	return s
}

func class(name, provisioner string, autoClaim bool) map[string]any {
	c := map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClass",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"provisioner": provisioner}}
	if autoClaim {
		c["metadata"].(map[string]any)["annotations"] = map[string]any{AnnotationAutoClaimClass: "true"}
	}
	c["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"}}}
	return c
}

func withIngress(s map[string]any) map[string]any {
	s = runtime.DeepCopyJSON(s)
	s["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": "203.0.113.20"}}}}
	return s
}

// The cases of docs/design.md#parking, one by one.
func TestParkingPolicies(t *testing.T) {
	p := loadParking(t)
	if len(p.Specs) != 2 {
		t.Fatalf("%d parking policies", len(p.Specs))
	}
	claim := map[string]string{AnnotationServiceClaim: "web-ip"}
	gold, other := class("gold", Provisioner, false), class("silver", "other.drivers.example.com", false)
	autoGold, autoOther := class("gold", Provisioner, true), class("silver", "other.drivers.example.com", true)
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range claim {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	lbClass := lbService(claim)
	lbClass["spec"].(map[string]any)["loadBalancerClass"] = "example.com/lb"
	lbIP := lbService(claim)
	lbIP["spec"].(map[string]any)["loadBalancerIP"] = "203.0.113.21"
	clusterIP := lbService(claim)
	clusterIP["spec"].(map[string]any)["type"] = "ClusterIP"
	for _, tc := range []struct {
		name     string
		old, obj map[string]any
		classes  []map[string]any
		want     string
	}{
		{"names a claim", nil, lbService(claim), nil, ParkClaimedPolicy},
		{"names a claim, update with an address", withIngress(lbService(claim)), withIngress(lbService(claim)), nil, ParkClaimedPolicy},
		{"names an empty claim", nil, lbService(map[string]string{AnnotationServiceClaim: ""}), nil, ""},
		{"not a LoadBalancer", nil, clusterIP, nil, ""},
		{"loadBalancerClass", nil, lbClass, nil, ""},
		{"spec.loadBalancerIP", nil, lbIP, nil, ""},
		{"a MetalLB pin", nil, lbService(with(map[string]string{"metallb.io/loadBalancerIPs": "203.0.113.22"})), nil, ""},
		{"a deprecated MetalLB pool", nil, lbService(with(map[string]string{"metallb.universe.tf/address-pool": "pool-a"})), nil, ""},
		{"a MetalLB sharing key", nil, lbService(with(map[string]string{"metallb.io/allow-shared-ip": "k"})), nil, ""},
		{"parked already", nil, lbService(with(map[string]string{ParkingAnnotation: ParkingPool})), nil, ""},
		{"class of this driver named", nil, lbService(map[string]string{AnnotationServiceClass: "gold"}), []map[string]any{gold, other}, ParkAutoClaimedPolicy + "/gold"},
		{"class of another driver named", nil, lbService(map[string]string{AnnotationServiceClass: "silver"}), []map[string]any{gold, other}, ""},
		{"class named that does not exist", nil, lbService(map[string]string{AnnotationServiceClass: "bronze"}), []map[string]any{gold, other}, ""},
		{"no class, an auto-claim class of this driver", nil, lbService(nil), []map[string]any{other, autoGold}, ParkAutoClaimedPolicy + "/gold"},
		{"no class, auto-claim class of another driver", nil, lbService(nil), []map[string]any{gold, autoOther}, ""},
		{"no class, no auto-claim class", nil, lbService(nil), []map[string]any{gold, other}, ""},
		{"no class, no classes at all", nil, lbService(nil), nil, ""},
		{"named class wins over the auto-claim mark", nil, lbService(map[string]string{AnnotationServiceClass: "silver"}), []map[string]any{autoGold, other}, ""},
		{"opted out", nil, lbService(map[string]string{AnnotationAutoClaim: "FALSE"}), []map[string]any{autoGold}, ""},
		{"auto-claim true", nil, lbService(map[string]string{AnnotationAutoClaim: "true"}), []map[string]any{autoGold}, ParkAutoClaimedPolicy + "/gold"},
		{"update, no address", lbService(nil), lbService(map[string]string{"example.com/x": "y"}), []map[string]any{autoGold}, ParkAutoClaimedPolicy + "/gold"},
		{"update of a Service showing an address", withIngress(lbService(nil)), withIngress(lbService(map[string]string{"example.com/x": "y"})), []map[string]any{autoGold}, ""},
		{"update without status of a Service showing an address", withIngress(lbService(nil)), lbService(map[string]string{"example.com/x": "y"}), []map[string]any{autoGold}, ""},
		{"tenant drops the parking annotation of a claimed Service", lbService(with(map[string]string{ParkingAnnotation: ParkingPool})), lbService(claim), nil, ParkClaimedPolicy},
		{"driver unpins a Service that still names its claim", lbService(with(map[string]string{"metallb.io/loadBalancerIPs": "203.0.113.23", "metallb.drivers.local.sdn.cozystack.io/pinned": "true"})), withIngress(lbService(claim)), nil, ParkClaimedPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ParkRequest{Object: tc.obj, OldObject: tc.old, Classes: tc.classes}
			if got := checkParking(t, p, req); got != tc.want {
				t.Fatalf("the rule says %q, the case expects %q: the case or the rule is wrong", got, tc.want)
			}
		})
	}
}

// The provisioner the auto-claim policy (and this model) compares with is the driver's own
// constant, read from the driver's source (its package is internal to the driver's module).
func TestProvisionerIsTheDrivers(t *testing.T) {
	// The driver's name, which its planners and its parking webhook take from package parking.
	got := goConsts(t, filepath.Join("..", "..", "metallb-iad", "pkg", "parking", "parking.go"))["Provisioner"]
	if got != Provisioner {
		t.Fatalf("the driver's Provisioner is %q, the parking model's %q", got, Provisioner)
	}
	p := loadParking(t)
	var mentioned bool
	for _, mc := range p.Specs[1].MatchConditions {
		mentioned = mentioned || strings.Contains(mc.Expression, "'"+got+"'")
	}
	if !mentioned {
		t.Fatalf("the auto-claim parking policy does not compare with the driver's provisioner %q", got)
	}
}

// goConsts reads the string constants of a Go source file.
func goConsts(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, n := range v.Names {
				if i < len(v.Values) {
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

// The parking value and the annotations the policies and this model use are the core's, read
// from its source (this module does not import the core's).
func TestParkingConstantsAreTheCores(t *testing.T) {
	core := filepath.Join("..", "..", "address-controller")
	ac := goConsts(t, filepath.Join(core, "pkg", "sdk", "autoclaim", "autoclaim.go"))
	wk := goConsts(t, filepath.Join(core, "api", "v1alpha1", "wellknown.go"))
	for _, c := range []struct{ name, core, ours string }{
		{"autoclaim.ParkingPool", ac["ParkingPool"], ParkingPool},
		{"autoclaim.ParkingAnnotation", ac["ParkingAnnotation"], ParkingAnnotation},
		{"AnnotationServiceClaim", wk["AnnotationServiceClaim"], AnnotationServiceClaim},
		{"AnnotationServiceClass", wk["AnnotationServiceClass"], AnnotationServiceClass},
		{"AnnotationAutoClaim", wk["AnnotationAutoClaim"], AnnotationAutoClaim},
		{"AnnotationAutoClaimClass", wk["AnnotationAutoClaimClass"], AnnotationAutoClaimClass},
	} {
		if c.core == "" || c.core != c.ours {
			t.Errorf("the core's %s is %q, policycel's %q", c.name, c.core, c.ours)
		}
	}
}

// Below Kubernetes 1.36 the driver's parking webhooks park in place of the policies, and the
// apiserver sends them only the writes their matchConditions admit. Over random writes and
// classes, with the auto-claim-enabled condition as the driver keeps it (true exactly when a class
// of this driver is marked for auto-claim): every write the policies park is sent to a webhook (it
// never misses one); a Service that names no claim nor class is never sent while no class is
// marked (a cluster without auto-claim does not depend on the driver for plain Services); and some
// writes are not sent at all.
func TestParkingWebhookIsCalledForEveryWriteThePoliciesPark(t *testing.T) {
	root := filepath.Join("..", "..")
	off, err := LoadParkingWebhook(root, "cozy-metallb-iad", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	on, err := LoadParkingWebhook(root, "cozy-metallb-iad", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range off.Specs {
		if w.FailurePolicy == nil || *w.FailurePolicy != "Fail" {
			t.Errorf("%s: failurePolicy %v, want Fail by default", w.Name, w.FailurePolicy)
		}
	}
	rng := rand.New(rand.NewPCG(44, 44))
	called, skipped, plainSent := 0, 0, 0
	for range 20000 {
		b := make([]byte, 48)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		req := GenParkRequest(b)
		w := off
		if autoClaimMarked(req.Classes) {
			w = on
		}
		calls, err := w.Calls(req)
		if err != nil {
			t.Fatalf("the webhooks' matchConditions fail to evaluate (the failurePolicy would then refuse the write): %v\nold %v\nnew %v", err, req.OldObject, req.Object)
		}
		if rule := ParkingRule(req); rule != "" && len(calls) == 0 {
			t.Fatalf("the policies park this write (%s), no webhook is called for it\nold %v\nnew %v\nclasses %v", rule, req.OldObject, req.Object, req.Classes)
		}
		ann := annotations(req.Object)
		plain := str(ann[AnnotationServiceClaim]) == "" && str(ann[AnnotationServiceClass]) == ""
		offCalls, err := off.Calls(req)
		if err != nil {
			t.Fatal(err)
		}
		if plain && len(offCalls) > 0 {
			t.Fatalf("with no class marked for auto-claim, a Service that names no claim nor class is sent to %v\nnew %v", offCalls, req.Object)
		}
		if plain && len(calls) > 0 {
			plainSent++
		}
		if len(calls) > 0 {
			called++
		} else {
			skipped++
		}
	}
	t.Logf("called for %d writes (%d that name no claim nor class, with auto-claim on), not for %d", called, plainSent, skipped)
	if skipped < 1000 || called < 200 || plainSent < 10 {
		t.Errorf("called %d, skipped %d, plain ones sent %d: the sample does not exercise the conditions", called, skipped, plainSent)
	}
}

// autoClaimMarked: a class of this driver, not being deleted, is marked for auto-claim.
func autoClaimMarked(classes []map[string]any) bool {
	for _, c := range classes {
		md, _ := c["metadata"].(map[string]any)
		marks, _ := md["annotations"].(map[string]any)
		if str(spec(c)["provisioner"]) == Provisioner && md["deletionTimestamp"] == nil && marks[AnnotationAutoClaimClass] == "true" {
			return true
		}
	}
	return false
}
