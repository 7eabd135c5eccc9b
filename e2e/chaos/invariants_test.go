package chaos

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// settled is a converged cluster: claim a (IPv4, Retain) attached to Service web, claim b
// (IPv4, Delete) held by its placeholder, and an Available address held too.
func settled() Snapshot {
	claim := func(name, class, ip string) ipamv1.IPAddressClaim {
		return ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, UID: types.UID("uid-claim-" + name)},
			Spec:       ipamv1.IPAddressClaimSpec{ClassName: class, Family: ipamv1.IPv4},
			Status: ipamv1.IPAddressClaimStatus{Phase: ipamv1.ClaimBound, Addresses: []ipamv1.ClaimedAddress{
				{Name: ipamv1.AddressName(netip.MustParseAddr(ip)), Address: ip, Family: ipamv1.IPv4}}},
		}
	}
	address := func(ip, class string, policy ipamv1.ReclaimPolicy, claim string) ipamv1.IPAddress {
		a := ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
			Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: class, ReclaimPolicy: policy}}
		if claim != "" {
			a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "t", Name: claim, UID: types.UID("uid-claim-" + claim)}
		}
		return a
	}
	a := address("198.18.10.130", "retain", ipamv1.ReclaimRetain, "a")
	a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: "t", Name: "web", UID: "uid-svc-xweb"}
	b := address("198.18.20.130", "delete", ipamv1.ReclaimDelete, "b")
	free := address("198.18.10.131", "retain", ipamv1.ReclaimRetain, "")
	return Snapshot{
		Namespace: "t",
		Classes:   map[string]*ipamv1.IPAddressClass{"retain": {}, "delete": {}},
		Pools: map[string][]netip.Prefix{"retain": {netip.MustParsePrefix("198.18.10.0/29"), netip.MustParsePrefix("198.18.10.128/25")},
			"delete": {netip.MustParsePrefix("198.18.20.128/25")}},
		Ranges:  []netip.Prefix{netip.MustParsePrefix("198.18.10.0/24"), netip.MustParsePrefix("198.18.20.0/24")},
		Claims:  []ipamv1.IPAddressClaim{claim("a", "retain", "198.18.10.130"), claim("b", "delete", "198.18.20.130")},
		Address: []ipamv1.IPAddress{a, b, free},
		Services: []corev1.Service{
			snapSvc("t", "web", []string{"198.18.10.130"}, map[string]string{claimAnnotation: "a", pinnedMarker: "true"}, nil),
			snapSvc(DriverNamespace, "hold-b", []string{"198.18.20.130"}, nil, map[string]string{labelAddress: b.Name}),
			snapSvc(DriverNamespace, "hold-free", []string{"198.18.10.131"}, nil, map[string]string{labelAddress: free.Name}),
		},
	}
}

// snapSvc is a Service of a snapshot showing ips.
func snapSvc(ns, name string, ips []string, ann, labels map[string]string) corev1.Service {
	s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-svc-x" + name), Annotations: ann, Labels: labels}}
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func invariants(v []Violation) []string {
	var out []string
	for _, x := range v {
		if !slices.Contains(out, x.Invariant) {
			out = append(out, x.Invariant)
		}
	}
	return out
}

func TestCheck(t *testing.T) {
	if v := Check(settled()); len(v) != 0 {
		t.Fatalf("a settled cluster violates: %v", v)
	}
	for _, tc := range []struct {
		name   string
		mutate func(s *Snapshot)
		want   []string
	}{
		{"a Pending claim", func(s *Snapshot) { s.Claims[1].Status.Phase = ipamv1.ClaimPending }, []string{InvClaimBound}},
		{"claimRef of another uid", func(s *Snapshot) { s.Address[1].Spec.ClaimRef.UID = "old" },
			[]string{InvOnePerFamily, InvReclaim}},
		{"the hold placeholder gone (defect: IP thrown away)", func(s *Snapshot) { s.Services = s.Services[:2] }, []string{InvHeldOnce}},
		{"two Services serve an attached IP", func(s *Snapshot) {
			s.Services[2].Status.LoadBalancer.Ingress = append(s.Services[2].Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "198.18.10.130"})
		}, []string{InvHeldOnce}},
		{"a placeholder without its address", func(s *Snapshot) { s.Address = s.Address[:2] }, []string{InvNoOrphanHold}},
		{"an attached Service shares its IP with its hold, both keyed", func(s *Snapshot) {
			s.Services[0].Annotations[allowSharedIP] = sharingPrefix + "uid-claim-a"
			s.Services = append(s.Services, snapSvc(DriverNamespace, "hold-a", []string{"198.18.10.130"},
				map[string]string{allowSharedIP: sharingPrefix + "uid-claim-a"}, map[string]string{labelAddress: s.Address[0].Name}))
		}, nil},
		{"a hold beside an attached Service without the key", func(s *Snapshot) {
			s.Services = append(s.Services, snapSvc(DriverNamespace, "hold-a", []string{"198.18.10.130"},
				map[string]string{allowSharedIP: sharingPrefix + "uid-claim-a"}, map[string]string{labelAddress: s.Address[0].Name}))
		}, []string{InvHeldOnce, InvNoOrphanHold}},
		{"a hold with another claim's key beside a keyed attached Service", func(s *Snapshot) {
			s.Services[0].Annotations[allowSharedIP] = sharingPrefix + "uid-claim-a"
			s.Services = append(s.Services, snapSvc(DriverNamespace, "hold-a", []string{"198.18.10.130"},
				map[string]string{allowSharedIP: sharingPrefix + "uid-claim-b"}, map[string]string{labelAddress: s.Address[0].Name}))
		}, []string{InvHeldOnce, InvNoOrphanHold}},
		{"a hold without the key beside a keyed attached Service", func(s *Snapshot) {
			s.Services[0].Annotations[allowSharedIP] = sharingPrefix + "uid-claim-a"
			s.Services = append(s.Services, snapSvc(DriverNamespace, "hold-a", []string{"198.18.10.130"},
				nil, map[string]string{labelAddress: s.Address[0].Name}))
		}, []string{InvHeldOnce, InvNoOrphanHold}},
		{"a Delete address outlives its claim", func(s *Snapshot) { s.Claims = s.Claims[:1] }, []string{InvReclaim}},
		{"a Service linked to a Bound claim shows nothing", func(s *Snapshot) { s.Services[0].Status.LoadBalancer.Ingress = nil },
			[]string{InvHeldOnce, InvServiceShowsPin}},
		{"a detached Service keeps the IP", func(s *Snapshot) { delete(s.Services[0].Annotations, claimAnnotation) },
			[]string{InvServiceShowsPin, InvNoForeignAddress}},
		{"a claim stuck deleting", func(s *Snapshot) { s.Claims[0].DeletionTimestamp = &metav1.Time{} },
			[]string{InvNothingDeleting, InvReclaim, InvServiceShowsPin, InvNoForeignAddress}},
		{"the pool shrank past a Bound claim's IP, claim not Lost", func(s *Snapshot) {
			s.Pools["delete"] = nil
		}, []string{InvClaimBound}},
		{"the pool shrank past an attached claim's IP, claim not Lost, reported once", func(s *Snapshot) {
			s.Pools["retain"] = s.Pools["retain"][:1]
			s.Services[0].Status.LoadBalancer.Ingress = nil
		}, []string{InvClaimBound}},
	} {
		s := settled()
		tc.mutate(&s)
		got := invariants(Check(s))
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: violated %v, want %v\n%v", tc.name, got, want, Check(s))
		}
	}

	// A Lost claim with a reason, whose IP the pool no longer covers, is fine.
	s := settled()
	s.Pools["delete"] = nil
	s.Claims[1].Status.Phase = ipamv1.ClaimLost
	s.Claims[1].Status.Conditions = []metav1.Condition{{Type: ipamv1.ConditionBound, Status: metav1.ConditionFalse,
		Reason: "AddressLost", Message: "the pool no longer covers 198.18.20.130"}}
	s.Services = s.Services[:1]
	s.Services = append(s.Services, settled().Services[2])
	if v := Check(s); len(v) != 0 {
		t.Fatalf("a Lost claim with a reason violates: %v", v)
	}
}
