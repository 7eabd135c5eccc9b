// Package policymodel checks tools/policycel's models of the driver chart's admission policies
// against the core's own code, which the tools module does not import. No cluster.
package policymodel

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/metallb-iad/pkg/parking"
	"github.com/cozystack/reserved-ips/tools/policycel"
)

func toService(t *testing.T, obj map[string]any) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(runtime.DeepCopyJSON(obj), &svc); err != nil {
		t.Fatal(err)
	}
	return &svc
}

// coreSays is the parking decision from the core's auto-claim rules (autoclaim.SkipAsked):
// a LoadBalancer Service that asked for no address through MetalLB, a load-balancer class or
// spec.loadBalancerIP is parked when it names a claim, or when auto-claim would serve it from a
// class of this driver and it is new or shows no address.
func coreSays(t *testing.T, req policycel.ParkRequest) string {
	svc := toService(t, req.Object)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != "" ||
		svc.Spec.LoadBalancerIP != "" {
		return ""
	}
	for _, k := range autoclaim.MetalLBAnnotations {
		if _, ok := svc.Annotations[k]; ok {
			return ""
		}
	}
	if svc.Annotations[ipamv1.AnnotationServiceClaim] != "" {
		return policycel.ParkClaimedPolicy
	}
	if autoclaim.SkipAsked(svc) != "" {
		return ""
	}
	if req.OldObject != nil && (len(svc.Status.LoadBalancer.Ingress) > 0 || len(toService(t, req.OldObject).Status.LoadBalancer.Ingress) > 0) {
		return ""
	}
	ns, nsLabels := namespaceOf(req)
	var ours []ipamv1.IPAddressClass
	for _, c := range req.Classes {
		if u := toClass(t, c); u.Spec.Provisioner == policycel.Provisioner {
			ours = append(ours, *u)
		}
	}
	if named := svc.Annotations[ipamv1.AnnotationServiceClass]; named != "" {
		// The class the Service names: the core claims from it; it parks the Service when it is
		// this driver's, not being deleted, and serves the namespace.
		for i := range ours {
			if u := &ours[i]; u.Name == named && u.DeletionTimestamp == nil && parking.ServesNamespace(u, ns, nsLabels) {
				return policycel.ParkAutoClaimedPolicy
			}
		}
		return ""
	}
	// The core's own choice of the auto-claim class (autoclaim.PickClass). The policy sees one
	// class at a time, so it parks when the core would pick a class of this driver among this
	// driver's classes: whenever the core picks one of them, and also when a newer marked class of
	// another driver serves the namespace too (the Service stays parked, with its claim from the
	// other class; docs/design.md records it).
	if chosen, _ := autoclaim.PickClass(ours, ns, nsLabels); chosen != nil {
		if all := allClasses(t, req); pick(all, ns, nsLabels) == nil {
			t.Fatalf("parked for class %s, but the core would make no claim", chosen.Name)
		}
		return policycel.ParkAutoClaimedPolicy
	}
	return ""
}

func pick(classes []ipamv1.IPAddressClass, ns string, nsLabels map[string]string) *ipamv1.IPAddressClass {
	c, _ := autoclaim.PickClass(classes, ns, nsLabels)
	return c
}

func allClasses(t *testing.T, req policycel.ParkRequest) []ipamv1.IPAddressClass {
	var out []ipamv1.IPAddressClass
	for _, c := range req.Classes {
		out = append(out, *toClass(t, c))
	}
	return out
}

// outcome is a parking decision without the class it names (the policies name the first class
// that applies, the core the one it picks).
func outcome(why string) string {
	return strings.SplitN(why, "/", 2)[0]
}

// webhookSays is the driver's parking webhook's decision (metallb-iad's parking.Decide, which
// parks where the cluster has no MutatingAdmissionPolicy), named as the policies' outcomes are.
func webhookSays(t *testing.T, req policycel.ParkRequest) string {
	ns, nsLabels := namespaceOf(req)
	r := parking.Request{Object: toService(t, req.Object), NamespaceLabels: nsLabels}
	r.Object.Namespace = ns
	if req.OldObject != nil {
		r.OldObject = toService(t, req.OldObject)
	}
	for _, c := range req.Classes {
		r.Classes = append(r.Classes, *toClass(t, c))
	}
	switch why := parking.Decide(r); {
	case why == parking.NamesAClaim:
		return policycel.ParkClaimedPolicy
	case strings.HasPrefix(why, parking.AutoClaimedFrom+"/"):
		return policycel.ParkAutoClaimedPolicy + strings.TrimPrefix(why, parking.AutoClaimedFrom)
	case why == "":
		return ""
	default:
		t.Fatalf("parking.Decide gave %q", why)
		return ""
	}
}

// namespaceOf is the name and labels of the request's namespace.
func namespaceOf(req policycel.ParkRequest) (string, map[string]string) {
	md, _ := req.Namespace["metadata"].(map[string]any)
	labels := map[string]string{}
	l, _ := md["labels"].(map[string]any)
	for k, v := range l {
		labels[k] = v.(string)
	}
	name, _ := md["name"].(string)
	return name, labels
}

func toClass(t *testing.T, obj map[string]any) *ipamv1.IPAddressClass {
	t.Helper()
	var c ipamv1.IPAddressClass
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(runtime.DeepCopyJSON(obj), &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// The chart's parking policies (evaluated offline with the apiserver's CEL compiler), policycel's
// plain-Go model and the driver's parking webhook (which parks below Kubernetes 1.36) all decide
// as the core's own auto-claim rules do, over a seeded
// sample of generated Service writes and classes; the constants are the core's.
func TestParkingAgreesWithTheCore(t *testing.T) {
	if policycel.Provisioner != parking.Provisioner {
		t.Fatalf("policycel's provisioner %q, the webhook's %q", policycel.Provisioner, parking.Provisioner)
	}
	if policycel.ParkingPool != autoclaim.ParkingPool || policycel.ParkingAnnotation != autoclaim.ParkingAnnotation ||
		policycel.AnnotationServiceClaim != ipamv1.AnnotationServiceClaim || policycel.AnnotationServiceClass != ipamv1.AnnotationServiceClass ||
		policycel.AnnotationAutoClaim != ipamv1.AnnotationAutoClaim || policycel.AnnotationAutoClaimClass != ipamv1.AnnotationAutoClaimClass ||
		policycel.LabelDriverService != ipamv1.LabelDriverService {
		t.Fatal("policycel's constants differ from the core's")
	}
	p, err := policycel.LoadParking(filepath.Join("..", ".."), "cozy-metallb-iad", nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 21))
	seen := map[string]int{}
	for range 20000 {
		b := make([]byte, 48)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		req := policycel.GenParkRequest(b)
		want := coreSays(t, req)
		if got := outcome(policycel.ParkingRule(req)); got != want {
			t.Fatalf("policycel.ParkingRule says %q, the core's rules %q\nold %v\nnew %v\nclasses %v", got, want, req.OldObject, req.Object, req.Classes)
		}
		if got := outcome(webhookSays(t, req)); got != want {
			t.Fatalf("the parking webhook (parking.Decide) says %q, the core's rules %q\nold %v\nnew %v\nclasses %v", got, want, req.OldObject, req.Object, req.Classes)
		}
		res, err := p.Evaluate(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := outcome(strings.Join(res.Applied, ",")); got != want {
			t.Fatalf("the chart's policies applied %q, the core's rules say %q\nold %v\nnew %v\nclasses %v", got, want, req.OldObject, req.Object, req.Classes)
		}
		seen[strings.SplitN(want, "/", 2)[0]]++
	}
	t.Logf("outcomes: %v", seen)
	for _, o := range []string{"", policycel.ParkClaimedPolicy, policycel.ParkAutoClaimedPolicy} {
		if seen[o] < 20 {
			t.Errorf("outcome %q occurred %d times: the sample does not cover it", o, seen[o])
		}
	}
}

// Several marked classes: the core takes the newest that serves the Service's namespace, and
// every parking rule parks exactly the Services it will claim for from a class of this driver.
func TestParkingWithSeveralMarkedClasses(t *testing.T) {
	p, err := policycel.LoadParking(filepath.Join("..", ".."), "cozy-metallb-iad", nil)
	if err != nil {
		t.Fatal(err)
	}
	class := func(name, provisioner, created string, selector map[string]any) map[string]any {
		c := map[string]any{"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddressClass",
			"metadata": map[string]any{"name": name, "creationTimestamp": created,
				"annotations": map[string]any{ipamv1.AnnotationAutoClaimClass: "true"}},
			"spec":   map[string]any{"provisioner": provisioner},
			"status": map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"}}}}
		if selector != nil {
			c["spec"].(map[string]any)["namespaceSelector"] = selector
		}
		return c
	}
	gold := map[string]any{"matchLabels": map[string]any{"tier": "gold"}}
	unaccepted := func(c map[string]any) map[string]any {
		delete(c, "status")
		return c
	}
	const older, newer = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"
	for _, tc := range []struct {
		name      string
		classes   []map[string]any
		nsLabels  map[string]any
		coreClass string // the class the core claims from ("" for none)
		parked    bool
	}{
		{"an older class serves all, a newer one gold: unlabelled namespace",
			[]map[string]any{class("all", policycel.Provisioner, older, nil), class("gold", policycel.Provisioner, newer, gold)},
			nil, "all", true},
		{"an older class serves all, a newer one gold: gold namespace",
			[]map[string]any{class("all", policycel.Provisioner, older, nil), class("gold", policycel.Provisioner, newer, gold)},
			map[string]any{"tier": "gold"}, "gold", true},
		{"only a gold class: unlabelled namespace",
			[]map[string]any{class("gold", policycel.Provisioner, newer, gold)},
			nil, "", false},
		{"another driver's newer class that refuses the namespace",
			[]map[string]any{class("all", policycel.Provisioner, older, nil), class("other", "other.drivers.example.com", newer, gold)},
			nil, "all", true},
		{"another driver's older class that serves the namespace",
			[]map[string]any{class("other", "other.drivers.example.com", older, nil), class("gold", policycel.Provisioner, newer, gold)},
			nil, "other", false},
		// Whether its driver has accepted a class yet does not change the pick: parking and the
		// core agree either way.
		{"a newer class not accepted yet",
			[]map[string]any{class("all", policycel.Provisioner, older, nil), unaccepted(class("late", policycel.Provisioner, newer, nil))},
			nil, "late", true},
		// The policies see one class at a time: the Service stays parked while its claim is of
		// the other driver's class (never a MetalLB address it does not own).
		{"another driver's newer class that serves the namespace too",
			[]map[string]any{class("all", policycel.Provisioner, older, nil), class("other", "other.drivers.example.com", newer, nil)},
			nil, "other", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := map[string]any{"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": "web", "namespace": "tenant-example"},
				"spec":     map[string]any{"type": "LoadBalancer"}}
			md := map[string]any{"name": "tenant-example"}
			if tc.nsLabels != nil {
				md["labels"] = tc.nsLabels
			}
			req := policycel.ParkRequest{Object: svc, Classes: tc.classes, Namespace: map[string]any{"metadata": md}}
			ns, nsLabels := namespaceOf(req)
			got := ""
			if c := pick(allClasses(t, req), ns, nsLabels); c != nil {
				got = c.Name
			}
			if got != tc.coreClass {
				t.Fatalf("the core picks class %q, want %q", got, tc.coreClass)
			}
			want := ""
			if tc.parked {
				want = policycel.ParkAutoClaimedPolicy
			}
			if got := coreSays(t, req); got != want {
				t.Errorf("coreSays %q, want %q", got, want)
			}
			if got := outcome(policycel.ParkingRule(req)); got != want {
				t.Errorf("policycel.ParkingRule says %q, want %q", got, want)
			}
			if got := outcome(webhookSays(t, req)); got != want {
				t.Errorf("the parking webhook says %q, want %q", got, want)
			}
			res, err := p.Evaluate(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := outcome(strings.Join(res.Applied, ",")); got != want {
				t.Errorf("the chart's policies applied %q, want %q", got, want)
			}
		})
	}
}
