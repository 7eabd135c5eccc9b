package driverkit

import (
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

func claim(uid string, phase ipamv1.ClaimPhase, fam ipamv1.IPFamily, stamped string) *ipamv1.IPAddressClaim {
	c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "c", UID: types.UID("u" + uid)},
		Spec: ipamv1.IPAddressClaimSpec{Family: fam}, Status: ipamv1.IPAddressClaimStatus{Phase: phase, ClassName: "k"}}
	if stamped != "" {
		c.Annotations = map[string]string{ipamv1.AnnotationProvisioner: stamped}
	}
	return c
}

func TestNeedsProvisioning(t *testing.T) {
	now := metav1.Now()
	deleting := claim("1", ipamv1.ClaimPending, ipamv1.IPv4, "me")
	deleting.DeletionTimestamp = &now
	noClass := claim("1", ipamv1.ClaimPending, ipamv1.IPv4, "me")
	noClass.Status.ClassName = ""
	stampedClass := noClass.DeepCopy()
	stampedClass.Annotations[ipamv1.AnnotationResolvedClass] = "k"
	named := claim("1", ipamv1.ClaimPending, ipamv1.IPv4, "me")
	named.Spec.AddressName = "ip-203-0-113-1"
	for _, tc := range []struct {
		name  string
		claim *ipamv1.IPAddressClaim
		want  bool
	}{
		{"stamped pending", claim("1", ipamv1.ClaimPending, ipamv1.IPv4, "me"), true},
		{"stamped without phase yet", claim("1", "", ipamv1.IPv4, "me"), true},
		{"stamped for another driver", claim("1", ipamv1.ClaimPending, ipamv1.IPv4, "other"), false},
		{"not stamped", claim("1", ipamv1.ClaimPending, ipamv1.IPv4, ""), false},
		{"bound", claim("1", ipamv1.ClaimBound, ipamv1.IPv4, "me"), false},
		{"lost", claim("1", ipamv1.ClaimLost, ipamv1.IPv4, "me"), false},
		{"deleting", deleting, false},
		{"no class resolved (stamped by hand)", noClass, false},
		{"class in the stamp, status not written yet", stampedClass, true},
		{"names an address (the core binds it or says why not)", named, false},
	} {
		if got := NeedsProvisioning(tc.claim, "me"); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func addr(ip, ns, name, uid string) ipamv1.IPAddress {
	a := ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(ip))},
		Spec: ipamv1.IPAddressSpec{Address: ip}}
	if name != "" {
		a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: ns, Name: name, UID: types.UID(uid)}
	}
	return a
}

func TestFamiliesPresent(t *testing.T) {
	c := claim("1", ipamv1.ClaimPending, ipamv1.Dual, "me")
	now := metav1.Now()
	dying := addr("2001:db8::1", "t", "c", "u1")
	dying.DeletionTimestamp = &now
	for _, tc := range []struct {
		name   string
		addrs  []ipamv1.IPAddress
		want   map[ipamv1.IPFamily]bool
		wantMF []ipamv1.IPFamily
	}{
		{"none", nil, map[ipamv1.IPFamily]bool{}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}},
		{"v4 with uid", []ipamv1.IPAddress{addr("203.0.113.1", "t", "c", "u1")}, map[ipamv1.IPFamily]bool{ipamv1.IPv4: true}, []ipamv1.IPFamily{ipamv1.IPv6}},
		{"v4 uid not completed yet", []ipamv1.IPAddress{addr("203.0.113.1", "t", "c", "")}, map[ipamv1.IPFamily]bool{ipamv1.IPv4: true}, []ipamv1.IPFamily{ipamv1.IPv6}},
		{"older claim of the same name", []ipamv1.IPAddress{addr("203.0.113.1", "t", "c", "old")}, map[ipamv1.IPFamily]bool{}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}},
		{"another claim", []ipamv1.IPAddress{addr("203.0.113.1", "t", "d", "u1")}, map[ipamv1.IPFamily]bool{}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}},
		{"address being deleted", []ipamv1.IPAddress{dying}, map[ipamv1.IPFamily]bool{}, []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6}},
		{"both", []ipamv1.IPAddress{addr("203.0.113.1", "t", "c", "u1"), addr("2001:db8::1", "t", "c", "u1")},
			map[ipamv1.IPFamily]bool{ipamv1.IPv4: true, ipamv1.IPv6: true}, nil},
	} {
		got := FamiliesPresent(c, tc.addrs)
		if len(got) != len(tc.want) || got[ipamv1.IPv4] != tc.want[ipamv1.IPv4] || got[ipamv1.IPv6] != tc.want[ipamv1.IPv6] {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		mf := MissingFamilies(c, got)
		if len(mf) != len(tc.wantMF) {
			t.Errorf("%s: missing %v, want %v", tc.name, mf, tc.wantMF)
		}
	}
}

func TestPreBoundAddress(t *testing.T) {
	class := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "k"}}
	c := claim("1", ipamv1.ClaimPending, ipamv1.IPv6, "me")
	a := PreBoundAddress(netip.MustParseAddr("2001:db8::7"), class, c, "fin")
	if a.Name != "ip-2001-0db8-0000-0000-0000-0000-0000-0007" || a.Spec.Address != "2001:db8::7" || a.Spec.ClassName != "k" ||
		a.Spec.ReclaimPolicy != ipamv1.ReclaimRetain || a.Spec.ClaimRef.UID != c.UID || a.Finalizers[0] != "fin" {
		t.Fatalf("unexpected address %+v", a)
	}
	class.Spec.ReclaimPolicy = ipamv1.ReclaimDelete
	if PreBoundAddress(netip.MustParseAddr("203.0.113.1"), class, c, "fin").Spec.ReclaimPolicy != ipamv1.ReclaimDelete {
		t.Fatal("reclaim policy not copied from the class")
	}
}

func TestTeardownMayStart(t *testing.T) {
	now := metav1.Now()
	a := addr("203.0.113.1", "", "", "")
	if TeardownMayStart(&a) {
		t.Fatal("a live address may not be torn down")
	}
	a.DeletionTimestamp = &now
	a.Finalizers = []string{ipamv1.FinalizerAddress, "driver"}
	if TeardownMayStart(&a) {
		t.Fatal("teardown started while the core still protects the address")
	}
	a.Finalizers = []string{"driver"}
	if !TeardownMayStart(&a) {
		t.Fatal("teardown did not start once the core let go")
	}
}

func TestRecheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		waited time.Duration
		want   time.Duration
	}{
		{0, time.Second}, {2 * time.Second, time.Second}, {40 * time.Second, 10 * time.Second},
		{4 * time.Minute, time.Minute}, {10 * time.Hour, time.Minute},
	} {
		if got := Recheck(t0, t0.Add(tc.waited), time.Second); got != tc.want {
			t.Errorf("after %v: got %v, want %v", tc.waited, got, tc.want)
		}
	}
	if Sooner(0, 3) != 3 || Sooner(3, 0) != 3 || Sooner(2, 3) != 2 {
		t.Fatal("Sooner")
	}
}

// ClaimClass follows the core's record: spec, then the status's sticky class, then the class
// the core stamped with the provisioner; never a default of its own.
func TestClaimClass(t *testing.T) {
	claim := func(spec, status, stamped string) *ipamv1.IPAddressClaim {
		c := &ipamv1.IPAddressClaim{Spec: ipamv1.IPAddressClaimSpec{ClassName: spec}, Status: ipamv1.IPAddressClaimStatus{ClassName: status}}
		if stamped != "" {
			c.Annotations = map[string]string{ipamv1.AnnotationResolvedClass: stamped}
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		claim *ipamv1.IPAddressClaim
		want  string
	}{
		{"spec", claim("k", "", ""), "k"},
		{"spec before the rest", claim("k", "other", "third"), "k"},
		{"status before the stamp", claim("", "k", "other"), "k"},
		{"the stamp (status not written yet)", claim("", "", "k"), "k"},
		{"nothing resolved yet", claim("", "", ""), ""},
	} {
		if got := ClaimClass(tc.claim); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
