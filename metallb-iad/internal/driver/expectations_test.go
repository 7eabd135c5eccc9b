package driver

import (
	"fmt"
	"testing"
	"time"
)

func TestExpectationsExpireAndStayBounded(t *testing.T) {
	e := newExpectations(time.Minute)
	e.Expect("a", "x", unitT0)
	if name, ok := e.Pending("a", unitT0.Add(time.Second)); !ok || name != "x" {
		t.Fatalf("pending: %q %v", name, ok)
	}
	if _, ok := e.Pending("a", unitT0.Add(2*time.Minute)); ok {
		t.Fatal("an expectation outlived its ttl")
	}
	e.Expect("b", "y", unitT0)
	e.Observed("b")
	if _, ok := e.Pending("b", unitT0); ok {
		t.Fatal("observed but still pending")
	}
	// Entries never looked up again are dropped once expired.
	for i := range 5000 {
		e.Expect(fmt.Sprint(i), "n", unitT0.Add(time.Duration(i)*time.Second))
	}
	if e.Len() > 2048 {
		t.Fatalf("%d entries kept; expired ones should go", e.Len())
	}
}
