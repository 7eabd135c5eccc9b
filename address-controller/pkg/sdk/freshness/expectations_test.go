package freshness

import (
	"fmt"
	"testing"
	"time"
)

func TestExpectations(t *testing.T) {
	e := NewExpectations[string, string](time.Minute)
	e.Expect("a", "x", t0)
	for _, tc := range []struct {
		name string
		at   time.Time
		want string
		ok   bool
	}{
		{"pending", t0.Add(time.Second), "x", true},
		{"at the ttl", t0.Add(time.Minute), "x", true},
		{"outlived its ttl", t0.Add(2 * time.Minute), "", false},
	} {
		if got, ok := e.Pending("a", tc.at); got != tc.want || ok != tc.ok {
			t.Errorf("%s: Pending = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	e.Expect("b", "y", t0)
	e.Observed("b")
	if _, ok := e.Pending("b", t0); ok {
		t.Fatal("observed but still pending")
	}
	// Entries never looked up again are dropped once expired.
	for i := range 5000 {
		e.Expect(fmt.Sprint(i), "n", t0.Add(time.Duration(i)*time.Second))
	}
	if e.Len() > 2*minSweepAt {
		t.Fatalf("%d entries kept; expired ones should go", e.Len())
	}
}

func TestExpectationsWithoutTTLExpectNothing(t *testing.T) {
	for _, ttl := range []time.Duration{0, -time.Second} {
		e := NewExpectations[string, int](ttl)
		e.Expect("a", 1, t0)
		if _, ok := e.Pending("a", t0); ok || e.Len() != 0 {
			t.Errorf("ttl %s: an expectation was kept", ttl)
		}
	}
}

func TestWriteTracker(t *testing.T) {
	const ttl = 10 * time.Minute
	w := NewWriteTracker[string](ttl)
	for _, tc := range []struct {
		name           string
		wrote, cached  string // wrote "": nothing written
		at             time.Duration
		shows, leftOne bool
	}{
		{"nothing written", "", "5", 0, true, false},
		{"the cache is behind", "10", "9", 0, false, true},
		{"the cache shows it", "10", "10", 0, true, false},
		{"the cache is past it", "10", "12", 0, true, false},
		{"numbers, not text", "99", "100", 0, true, false},
		{"opaque versions differ", "x", "y", 0, false, true},
		{"opaque versions equal", "x", "x", 0, true, false},
		{"unconfirmed past the ttl: one read", "20", "1", ttl + time.Second, false, false},
		{"past twice the ttl: forgotten", "20", "1", 2*ttl + time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.Forget("k")
			if tc.wrote != "" {
				w.Wrote("k", tc.wrote, t0)
			}
			if got := w.Shows("k", tc.cached, t0.Add(tc.at)); got != tc.shows {
				t.Fatalf("Shows = %v, want %v", got, tc.shows)
			}
			if left := w.Len() == 1; left != tc.leftOne {
				t.Fatalf("entry kept: %v, want %v", left, tc.leftOne)
			}
		})
	}
	// After the one read past the ttl, the cache is trusted again.
	w.Wrote("b", "20", t0)
	late := t0.Add(ttl + time.Second)
	if w.Shows("b", "1", late) || !w.Shows("b", "1", late) {
		t.Fatal("an expired, unconfirmed write is not read exactly once")
	}
	// A sweep drops the entries past twice the ttl.
	for i := range 1100 {
		w.Wrote(fmt.Sprintf("old-%d", i), "1", t0)
	}
	later := t0.Add(2*ttl + time.Minute)
	for i := range 1100 {
		w.Wrote(fmt.Sprintf("late-%d", i), "1", later)
	}
	if w.Len() != 1100 {
		t.Fatalf("%d entries kept, want the 1,100 that have not expired", w.Len())
	}
	w.Forget("late-0")
	if !w.Shows("late-0", "0", later) {
		t.Fatal("a forgotten write still holds the cache back")
	}
	off := NewWriteTracker[string](0)
	off.Wrote("k", "10", t0)
	if !off.Shows("k", "1", t0) {
		t.Fatal("a tracker without a ttl tracked a write")
	}
}

func TestWriteTrackerConcurrentUse(t *testing.T) {
	w := NewWriteTracker[int](time.Minute)
	concurrently(8, 2000, func(g, i int) {
		k := (g + i) % 50
		w.Wrote(k, fmt.Sprint(i), t0)
		w.Shows(k, fmt.Sprint(i-1), t0)
		if i%7 == 0 {
			w.Forget(k)
		}
	})
	// What is left is coherent: a write of each key then holds a cache behind it back, and a
	// cache that caught up forgets it.
	for k := range 50 {
		w.Wrote(k, "100000", t0)
		if w.Shows(k, "99999", t0) {
			t.Fatalf("key %d: a cache behind the write shows it", k)
		}
		if !w.Shows(k, "100000", t0) {
			t.Fatalf("key %d: a cache at the write does not show it", k)
		}
	}
	if w.Len() != 0 {
		t.Fatalf("%d entries left once the cache showed every write", w.Len())
	}
}
