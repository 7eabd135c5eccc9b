package plan

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/servicecache"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func TestPlaceholderNamesAreValidAndDeterministic(t *testing.T) {
	uid := "4c9a5b8e-1f0e-4f7b-9f8e-2b1d5c6a7e90"
	a, b := ProvisioningName(uid, ipamv1.IPv4, 0), ProvisioningName(uid, ipamv1.IPv4, 0)
	if a != b {
		t.Fatalf("not deterministic: %s vs %s", a, b)
	}
	names := map[string]bool{}
	for _, n := range []string{
		a, ProvisioningName(uid, ipamv1.IPv6, 0), ProvisioningName(uid, ipamv1.IPv4, 1), ProvisioningName("other", ipamv1.IPv4, 0),
		HoldName("ip-2001-0db8-0000-0000-0000-0000-0000-0007"), HoldName("ip-203-0-113-7"),
	} {
		if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
			t.Errorf("%q is not a valid Service name: %v", n, errs)
		}
		if names[n] {
			t.Errorf("%q produced twice", n)
		}
		names[n] = true
	}
}

func TestLinkedClaim(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	if name, auto := LinkedClaim(svc); name != "web" || !auto {
		t.Fatalf("without the annotation: %s, auto=%v; want the Service's own name through auto-claim", name, auto)
	}
	svc.Annotations = map[string]string{ipamv1.AnnotationServiceClaim: "reserved"}
	if name, auto := LinkedClaim(svc); name != "reserved" || auto {
		t.Fatalf("with the annotation: %s, auto=%v", name, auto)
	}
}

func TestPinValueOrdersIPv4First(t *testing.T) {
	got := PinValue([]ipamv1.ClaimedAddress{{Address: "2001:db8::1", Family: ipamv1.IPv6}, {Address: "203.0.113.1", Family: ipamv1.IPv4}})
	if got != "203.0.113.1,2001:db8::1" {
		t.Fatal(got)
	}
}

func TestFamiliesFit(t *testing.T) {
	svc := func(f ...corev1.IPFamily) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: f}}
	}
	for _, tc := range []struct {
		svc   *corev1.Service
		claim ipamv1.IPFamily
		want  bool
	}{
		{svc(corev1.IPv4Protocol), ipamv1.IPv4, true},
		{svc(corev1.IPv6Protocol), ipamv1.IPv6, true},
		{svc(corev1.IPv6Protocol, corev1.IPv4Protocol), ipamv1.Dual, true},
		{svc(corev1.IPv4Protocol), ipamv1.Dual, false},
		{svc(corev1.IPv4Protocol, corev1.IPv6Protocol), ipamv1.IPv4, false},
		{svc(corev1.IPv6Protocol), ipamv1.IPv4, false},
	} {
		if got := FamiliesFit(tc.svc, tc.claim); got != tc.want {
			t.Errorf("FamiliesFit(%v, %s) = %v", tc.svc.Spec.IPFamilies, tc.claim, got)
		}
	}
}

func TestForeignPins(t *testing.T) {
	ours := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		metallb.AnnotationLoadBalancerIPs: "203.0.113.1", AnnotationPinned: "true"}}}
	if got := ForeignPins(ours); len(got) != 0 {
		t.Fatalf("the driver's own pin counted as foreign: %v", got)
	}
	// The driver's sharing key beside its pin is the driver's; the same key without the pin's
	// marker, or another key, is not.
	keyed := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		metallb.AnnotationLoadBalancerIPs: "203.0.113.1", AnnotationPinned: "true", metallb.AnnotationAllowSharedIP: SharingKey("claim-uid")}}}
	if got := ForeignPins(keyed); len(got) != 0 {
		t.Fatalf("the driver's sharing key counted as foreign: %v", got)
	}
	for _, a := range []map[string]string{
		{metallb.AnnotationAllowSharedIP: SharingKey("claim-uid")},
		{metallb.AnnotationLoadBalancerIPs: "203.0.113.1", AnnotationPinned: "true", metallb.AnnotationAllowSharedIP: "mine"},
		{metallb.AnnotationLoadBalancerIPs: "203.0.113.1", AnnotationPinned: "true", metallb.AnnotationAllowSharedIP: SharingKeyPrefix},
		{metallb.AnnotationLoadBalancerIPs: "203.0.113.1", AnnotationPinned: "true", metallb.LegacyPrefix + "allow-shared-ip": SharingKey("claim-uid")},
	} {
		if got := ForeignPins(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: a}}); !slices.ContainsFunc(got, func(p string) bool { return strings.HasSuffix(p, "allow-shared-ip") }) {
			t.Fatalf("%v: the sharing annotation not counted as foreign: %v", a, got)
		}
	}
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"metallb.universe.tf/address-pool": "p"}},
		Spec:       corev1.ServiceSpec{LoadBalancerIP: "203.0.113.9"},
	}
	if got := strings.Join(ForeignPins(theirs), ","); got != "metallb.universe.tf/address-pool,spec.loadBalancerIP" {
		t.Fatalf("got %s", got)
	}
	// Parked by the chart's admission policy: requests nothing. The same value under the legacy
	// prefix, or another pool, is an admin's choice.
	parked := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{autoclaim.ParkingAnnotation: autoclaim.ParkingPool}}}
	if got := ForeignPins(parked); len(got) != 0 {
		t.Fatalf("the parking pool counted as foreign: %v", got)
	}
	for _, a := range []map[string]string{{"metallb.universe.tf/address-pool": autoclaim.ParkingPool}, {autoclaim.ParkingAnnotation: "parked"}} {
		if got := ForeignPins(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: a}}); len(got) != 1 {
			t.Fatalf("%v: got %v", a, got)
		}
	}
}

func TestClassVerdict(t *testing.T) {
	no, yes := false, true
	pool := func(auto *bool, addresses ...string) *metallb.IPAddressPool {
		if len(addresses) == 0 {
			addresses = []string{"203.0.113.0/28"}
		}
		return &metallb.IPAddressPool{Spec: metallb.IPAddressPoolSpec{AutoAssign: auto, Addresses: addresses}}
	}
	v4 := []ipamv1.IPFamily{ipamv1.IPv4}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	class := func(name, poolName string, created time.Time) ipamv1.IPAddressClass {
		return ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec: ipamv1.IPAddressClassSpec{Provisioner: Provisioner, Parameters: map[string]string{ClassParameterPool: poolName}}}
	}
	me := class("me", "p", at)
	for _, tc := range []struct {
		name   string
		class  ipamv1.IPAddressClass
		pool   *metallb.IPAddressPool
		rivals []ipamv1.IPAddressClass
		want   string
		// cluster are the families of the cluster's Service CIDRs (nil: unknown).
		cluster []ipamv1.IPFamily
	}{
		{"no pool parameter", class("me", "", at), nil, nil, ReasonPoolNotSet, nil},
		{"pool missing", me, nil, nil, ReasonPoolNotFound, nil},
		{"autoAssign unset means true", me, pool(nil), nil, ReasonPoolAutoAssigns, nil},
		{"autoAssign true", me, pool(&yes), nil, ReasonPoolAutoAssigns, nil},
		{"accepted", me, pool(&no), []ipamv1.IPAddressClass{me}, ReasonAccepted, nil},
		{"older rival", me, pool(&no), []ipamv1.IPAddressClass{class("old", "p", at.Add(-time.Hour)), me}, ReasonPoolClaimedByClass, nil},
		{"younger rival", me, pool(&no), []ipamv1.IPAddressClass{class("young", "p", at.Add(time.Hour))}, ReasonAccepted, nil},
		{"same age, lower name wins", me, pool(&no), []ipamv1.IPAddressClass{class("a", "p", at)}, ReasonPoolClaimedByClass, nil},
		{"rival on another pool", me, pool(&no), []ipamv1.IPAddressClass{class("old", "q", at.Add(-time.Hour))}, ReasonAccepted, nil},
		{"an IPv6 pool on an IPv4-only cluster", me, pool(&no, "2001:db8::/120"), nil, ReasonPoolFamiliesUnserved, v4},
		{"a dual pool on an IPv4-only cluster", me, pool(&no, "2001:db8::/120", "203.0.113.0/28"), nil, ReasonAccepted, v4},
		{"an IPv6 pool, the cluster's families unknown", me, pool(&no, "2001:db8::/120"), nil, ReasonAccepted, nil},
		{"a pool without addresses", me, pool(&no, "junk"), nil, ReasonPoolFamiliesUnserved, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := ClassVerdict(&tc.class, tc.pool, tc.rivals, "cozy-metallb", tc.cluster)
			if reason != tc.want || msg == "" {
				t.Fatalf("got %s (%q), want %s", reason, msg, tc.want)
			}
		})
	}
}

// What the driver reports of a class beside Accepted: the families of its pool the cluster's
// Services can have, and the namespaces the pool's serviceAllocation serves.
func TestClassReport(t *testing.T) {
	v4, both := []ipamv1.IPFamily{ipamv1.IPv4}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"plan": "gold"}}
	for _, tc := range []struct {
		name     string
		spec     metallb.IPAddressPoolSpec
		cluster  []ipamv1.IPFamily
		families []ipamv1.IPFamily
		served   *ipamv1.NamespaceSet
	}{
		{"an IPv4 pool, open", metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"}}, both, v4, nil},
		{"a dual pool on an IPv4-only cluster", metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28", "2001:db8::/120"}}, v4, v4, nil},
		{"a dual pool on a dual cluster", metallb.IPAddressPoolSpec{Addresses: []string{"2001:db8::1-2001:db8::9", "203.0.113.0/28"}}, both, both, nil},
		{"a dual pool, the cluster unknown", metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28", "2001:db8::/120"}}, nil, both, nil},
		{"service selectors alone restrict no namespace", metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"},
			ServiceAllocation: &metallb.ServiceAllocation{ServiceSelectors: []metav1.LabelSelector{sel}}}, nil, v4, nil},
		{"namespaces listed and selected", metallb.IPAddressPoolSpec{Addresses: []string{"203.0.113.0/28"},
			ServiceAllocation: &metallb.ServiceAllocation{Namespaces: []string{"tenant-a", "tenant-a", strings.Repeat("x", 64)}, NamespaceSelectors: []metav1.LabelSelector{sel}}},
			nil, v4, &ipamv1.NamespaceSet{Names: []string{"tenant-a"}, Selectors: []metav1.LabelSelector{sel}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			families, served := ClassReport(&metallb.IPAddressPool{Spec: tc.spec}, tc.cluster)
			if !reflect.DeepEqual(families, tc.families) || !reflect.DeepEqual(served, tc.served) {
				t.Fatalf("got %v %+v, want %v %+v", families, served, tc.families, tc.served)
			}
		})
	}
	if f, s := ClassReport(nil, nil); f != nil || s != nil {
		t.Fatalf("a missing pool reports %v %+v", f, s)
	}
}

func TestServiceCacheKeepsWhatTheDriverReads(t *testing.T) {
	p := corev1.IPFamilyPolicySingleStack
	in := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "n", UID: "u", ResourceVersion: "7",
			Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1",
				"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Service"}`,
				ipamv1.AnnotationServiceClaim:                      "web",
				metallb.AnnotationLoadBalancerIPs:                  "203.0.113.1",
				AnnotationPinned:                                   "true",
				// A tenant's writing, as large as the apiserver lets annotations be.
				"example.com/blob":            strings.Repeat("x", 200<<10),
				ipamv1.AnnotationServiceClass: strings.Repeat("y", 50<<10)},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "x"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "o"}}, Finalizers: []string{"example.com/f"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy: &p, Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}},
			ExternalIPs: []string{"203.0.113.9"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}}},
	}
	out, _ := servicecache.StripKeeping(DriverAnnotations...)(in)
	s := out.(*corev1.Service)
	if len(in.Annotations) != 7 {
		t.Fatalf("Strip changed the object it was given: %v", in.Annotations)
	}
	if s.Name != "s" || s.ResourceVersion != "7" || s.Labels["l"] != "1" || s.Annotations[ipamv1.AnnotationServiceClaim] != "web" ||
		s.Annotations[metallb.AnnotationLoadBalancerIPs] != "203.0.113.1" || s.Annotations[AnnotationPinned] != "true" ||
		s.Annotations[ipamv1.AnnotationServiceClass] != servicecache.TooLong ||
		s.Spec.Type != corev1.ServiceTypeLoadBalancer || len(s.Spec.IPFamilies) != 1 || len(s.Status.LoadBalancer.Ingress) != 1 ||
		len(s.Spec.ExternalIPs) != 1 {
		t.Fatalf("lost a field the driver reads: %+v", s)
	}
	if s.ManagedFields != nil || s.Spec.Selector != nil || s.Spec.Ports != nil || len(s.Annotations) != 4 ||
		s.OwnerReferences != nil || s.Finalizers != nil {
		t.Fatalf("kept fields the driver never reads: %+v", s)
	}
	// The core keeps its own annotations, not the driver's.
	out, _ = servicecache.Strip(in)
	if a := out.(*corev1.Service).Annotations; len(a) != 3 || a[AnnotationPinned] != "" {
		t.Fatalf("the core's cache keeps %v", a)
	}
}

// Every Service the driver makes carries the mark the core filters its cache on: the core keeps
// no copy of the driver's placeholders (one per reserved address) or release Services.
func TestTheDriversServicesCarryTheDriverMark(t *testing.T) {
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c", UID: "u"}}
	for _, s := range []*corev1.Service{
		ProvisioningService("d", "p", claim, ipamv1.IPv4, "pool", ""),
		HoldService("d", "a", netip.MustParseAddr("203.0.113.7"), "pool", SharingKey("u")),
		ReleaseService("d", "r", "a"),
	} {
		if s.Labels[ipamv1.LabelDriverService] != Provisioner {
			t.Errorf("%s (role %s) has labels %v, want %s: %s", s.Name, s.Labels[LabelRole], s.Labels, ipamv1.LabelDriverService, Provisioner)
		}
	}
}
