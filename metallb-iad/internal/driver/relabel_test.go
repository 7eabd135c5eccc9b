package driver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
)

// A placeholder this driver made a hold of is hidden from the claim's passes while the cache
// still shows it provisioning, and only while the relabel is expected: past ExpectFor the cache
// is trusted again at once. (Hiding it one pass more would let that pass take its name for free
// and create a duplicate; the relabel is an expectation, not a write that asks for a read.)
func TestARelabelHidesThePlaceholderOnlyWhileExpected(t *testing.T) {
	d := &Driver{ExpectFor: time.Minute}
	d.expect = freshness.NewExpectations[string, string](d.ExpectFor)
	d.written = freshness.NewWriteTracker[string](d.ExpectFor)
	s := service("tenant", "placeholder")
	s.ResourceVersion = "5"
	d.expect.Expect(relabelledKey(string(s.UID)), "7", unitT0) // the relabel left it at 7

	if got := d.notRelabelled([]*corev1.Service{s}, unitT0.Add(time.Second)); len(got) != 0 {
		t.Fatal("a cached copy from before the relabel is not hidden")
	}
	if got := d.notRelabelled([]*corev1.Service{s}, unitT0.Add(time.Minute+time.Second)); len(got) != 1 {
		t.Fatal("past ExpectFor, the relabel still hides the placeholder")
	}
	d.expect.Expect(relabelledKey(string(s.UID)), "7", unitT0)
	s.ResourceVersion = "7"
	if got := d.notRelabelled([]*corev1.Service{s}, unitT0.Add(time.Second)); len(got) != 1 {
		t.Fatal("a cached copy that shows the relabel is hidden")
	}
	if _, ok := d.expect.Pending(relabelledKey(string(s.UID)), unitT0.Add(time.Second)); ok {
		t.Fatal("a relabel the cache showed is still expected")
	}
}
