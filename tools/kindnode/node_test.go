package kindnode

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePolicyReadsEachCandidate(t *testing.T) {
	out := `containerd:
  Installed: (none)
  Candidate: 1.6.20~ds1-1+deb12u2
  Version table:
     1.6.20~ds1-1+deb12u2 500
        500 http://deb.debian.org/debian bookworm/main amd64 Packages
runc:
  Installed: 1.1.5+ds1-1+deb12u1
  Candidate: 1.1.5+ds1-1+deb12u1
`
	want := map[string]string{"containerd": "1.6.20~ds1-1+deb12u2", "runc": "1.1.5+ds1-1+deb12u1"}
	if got := parsePolicy(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// The key moves with a package's version and nothing else of the package set's text.
func TestKeyFollowsPackageVersions(t *testing.T) {
	saved := candidates
	t.Cleanup(func() { candidates = saved })
	candidates = map[string]string{"containerd": "1.6.20"}
	a := Key()
	if Key() != a {
		t.Fatal("the key is not stable")
	}
	candidates = map[string]string{"containerd": "1.6.21"}
	if b := Key(); b == a {
		t.Fatal("a new containerd version kept the key")
	}
	if !strings.HasPrefix(Ref(), "reserved-ips/kind-node:") {
		t.Fatalf("ref %s", Ref())
	}
}

// No network of the kind run is in a private range.
func TestNetworksAreOffPrivateRanges(t *testing.T) {
	for _, cidr := range strings.Split(strings.Join([]string{Network.Subnet, Network.IPv6Subnet, Network.PodSubnet,
		Network.ServiceSubnet, Network.NodePodRange, Network.NodePodRange6}, ","), ",") {
		if !strings.HasPrefix(cidr, "198.18.") && !strings.HasPrefix(cidr, "198.19.") && !strings.HasPrefix(cidr, "2001:db8:") {
			t.Errorf("%s is outside 198.18.0.0/15 and 2001:db8::/32", cidr)
		}
	}
}
