package driver

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// stampAsCore creates a claim as the core leaves it once it asked this driver for addresses:
// stamped with the driver and the class, its status not written yet.
func stampAsCore(t *testing.T, ns, name, class string, fam ipamv1.IPFamily) *ipamv1.IPAddressClaim {
	t.Helper()
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{ipamv1.AnnotationProvisioner: plan.Provisioner, ipamv1.AnnotationResolvedClass: class}},
		Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: fam}}
	if err := admin.Create(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

// placeholdersOf lists the provisioning placeholders made for a claim.
func placeholdersOf(t *testing.T, claim *ipamv1.IPAddressClaim) []string {
	t.Helper()
	var list corev1.ServiceList
	if err := admin.List(context.Background(), &list, client.InNamespace(testDriverNS),
		client.MatchingLabels{plan.LabelRole: plan.RoleProvisioning, plan.LabelClaimUID: string(claim.UID)}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// The driver reports with Accepted what a class can serve, from its pool: the families of the
// pool's addresses that this cluster's Services can have (the test apiserver's Service CIDR is
// IPv4 only, so a pool with an IPv6 range serves IPv4 alone), and the namespaces the pool's
// serviceAllocation lists or selects. It provisions nothing for a claim the class cannot serve,
// stamped or not: not the IPv4 half of a Dual claim, nothing for a namespace the pool leaves
// out. The core refuses such claims from the same report (its own tests).
func TestDriverReportsWhatAClassServesAndProvisionsNothingElse(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newNamespace(t, "tenancy-in")
	newNamespace(t, "tenancy-out")
	no := false
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"tenancy.example.com/plan": "gold"}}
	if err := admin.Create(ctx, &metallb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Namespace: testMetalLBNS, Name: "tenancy"},
		Spec: metallb.IPAddressPoolSpec{Addresses: []string{"198.18.46.16/28", "2001:db8:46::/120"}, AutoAssign: &no,
			ServiceAllocation: &metallb.ServiceAllocation{Namespaces: []string{"tenancy-in", testDriverNS}, NamespaceSelectors: []metav1.LabelSelector{sel}}}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "tenancy"},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: plan.Provisioner, Parameters: map[string]string{plan.ClassParameterPool: "tenancy"}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the class to be accepted", func() (bool, error) {
		c := acceptance(t, "tenancy")
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})

	dual := stampAsCore(t, "tenancy-in", "dual", "tenancy", ipamv1.Dual)
	six := stampAsCore(t, "tenancy-in", "six", "tenancy", ipamv1.IPv6)
	out := stampAsCore(t, "tenancy-out", "out", "tenancy", ipamv1.IPv4)
	four := stampAsCore(t, "tenancy-in", "four", "tenancy", ipamv1.IPv4)
	eventually(t, "a placeholder for the IPv4 claim of a served namespace", func() (bool, error) {
		return len(placeholdersOf(t, four)) == 1, nil
	})
	settled(t, "tenancy-in")
	consistently(t, 2*time.Second, "no placeholder for what the class cannot serve", func() (bool, error) {
		for _, c := range []*ipamv1.IPAddressClaim{dual, six, out} {
			if p := placeholdersOf(t, c); len(p) > 0 {
				t.Fatalf("claim %s/%s (%s) has placeholders %v", c.Namespace, c.Name, c.Spec.Family, p)
			}
		}
		return true, nil
	})
	// What the core refuses them from: the report, written with Accepted.
	wantServed := &ipamv1.NamespaceSet{Names: []string{"tenancy-in", testDriverNS}, Selectors: []metav1.LabelSelector{sel}}
	var class ipamv1.IPAddressClass
	if err := admin.Get(ctx, client.ObjectKey{Name: "tenancy"}, &class); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(class.Status.Families, []ipamv1.IPFamily{ipamv1.IPv4}) || !equality.Semantic.DeepEqual(class.Status.ServedNamespaces, wantServed) {
		t.Fatalf("the class reports families %v and namespaces %+v, want [IPv4] and %+v", class.Status.Families, class.Status.ServedNamespaces, wantServed)
	}

	// The pool's allocation changes: the report follows.
	var pool metallb.IPAddressPool
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testMetalLBNS, Name: "tenancy"}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.ServiceAllocation = nil
	if err := admin.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the class's report to serve every namespace", func() (bool, error) {
		err := admin.Get(ctx, client.ObjectKey{Name: "tenancy"}, &class)
		return class.Status.ServedNamespaces == nil, err
	})
	eventually(t, "a placeholder for the claim of the namespace the pool now serves", func() (bool, error) {
		return len(placeholdersOf(t, out)) == 1, nil
	})
}
