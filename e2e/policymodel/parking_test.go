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
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
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
	for _, c := range req.Classes {
		u := toClass(t, c)
		if u.Spec.Provisioner != policycel.Provisioner || u.DeletionTimestamp != nil {
			continue
		}
		// Auto-claim makes no claim from a class for a namespace the class does not serve.
		if (svc.Annotations[ipamv1.AnnotationServiceClass] != "" && u.Name == svc.Annotations[ipamv1.AnnotationServiceClass] ||
			svc.Annotations[ipamv1.AnnotationServiceClass] == "" && u.Annotations[ipamv1.AnnotationAutoClaimClass] == "true") &&
			driverkit.RefusesNamespace(u, ns, nsLabels) == driverkit.NamespaceAdmitted {
			return policycel.ParkAutoClaimedPolicy + "/" + u.Name
		}
	}
	return ""
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
		if got := policycel.ParkingRule(req); got != want {
			t.Fatalf("policycel.ParkingRule says %q, the core's rules %q\nold %v\nnew %v\nclasses %v", got, want, req.OldObject, req.Object, req.Classes)
		}
		if got := webhookSays(t, req); got != want {
			t.Fatalf("the parking webhook (parking.Decide) says %q, the core's rules %q\nold %v\nnew %v\nclasses %v", got, want, req.OldObject, req.Object, req.Classes)
		}
		res, err := p.Evaluate(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(res.Applied, ","); got != want {
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
