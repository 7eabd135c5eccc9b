package freshness

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func TestMemoryGetPutUpdateDelete(t *testing.T) {
	m := Memory[string, int]{TTL: time.Minute}
	if _, ok := m.Get("a", t0); ok {
		t.Fatal("an empty memory has an entry")
	}
	m.Put("a", 1, t0)
	for _, tc := range []struct {
		name string
		at   time.Time
		want int
		ok   bool
	}{
		{"at once", t0, 1, true},
		{"within the ttl", t0.Add(time.Minute), 1, true},
		{"past the ttl", t0.Add(time.Minute + time.Nanosecond), 0, false},
		{"dropped once expired", t0, 0, false},
	} {
		if v, ok := m.Get("a", tc.at); v != tc.want || ok != tc.ok {
			t.Errorf("%s: Get = %d, %v; want %d, %v", tc.name, v, ok, tc.want, tc.ok)
		}
	}
	// Update makes a new entry at now, keeps an old one's time, and drops on keep=false.
	add := func(v int, ok bool) (int, bool) { return v + 1, true }
	m.Update("b", t0, add)
	m.Update("b", t0.Add(50*time.Second), add)
	if v, ok := m.Get("b", t0.Add(55*time.Second)); v != 2 || !ok {
		t.Fatalf("after two updates: %d, %v", v, ok)
	}
	if _, ok := m.Get("b", t0.Add(61*time.Second)); ok {
		t.Fatal("an update renewed the entry's time")
	}
	m.Put("c", 5, t0)
	m.Update("c", t0, func(v int, ok bool) (int, bool) {
		if !ok || v != 5 {
			t.Errorf("update saw %d, %v", v, ok)
		}
		return 0, false
	})
	if m.Len() != 0 {
		t.Fatalf("%d entries left, want none", m.Len())
	}
	m.Put("d", 1, t0)
	m.Delete("d")
	if _, ok := m.Get("d", t0); ok {
		t.Fatal("deleted, yet there")
	}
}

func TestMemoryZeroValueNeverExpires(t *testing.T) {
	var m Memory[int, string]
	m.Put(1, "x", t0)
	if v, ok := m.Get(1, t0.Add(1000*time.Hour)); !ok || v != "x" {
		t.Fatalf("the zero memory forgot: %q %v", v, ok)
	}
}

// Entries never looked up again are dropped once expired, when the memory grows.
func TestMemorySweepsExpiredEntries(t *testing.T) {
	m := Memory[string, int]{TTL: time.Minute}
	for i := range 5000 {
		m.Put(fmt.Sprint(i), i, t0.Add(time.Duration(i)*time.Second))
	}
	if m.Len() > 2*minSweepAt {
		t.Fatalf("%d entries kept; expired ones should go", m.Len())
	}
}

func TestMemoryConcurrentUse(t *testing.T) {
	m := Memory[int, int]{TTL: time.Minute}
	concurrently(8, 2000, func(g, i int) {
		k := (g*2000 + i) % 300
		now := t0.Add(time.Duration(i) * time.Millisecond)
		switch i % 4 {
		case 0:
			m.Put(k, i, now)
		case 1:
			m.Get(k, now)
		case 2:
			m.Update(k, now, func(v int, _ bool) (int, bool) { return v + 1, true })
		default:
			m.Delete(k)
		}
	})
	// What is left is coherent: every key reads back what a last Put gives it, and a Delete
	// empties the memory.
	for k := range 300 {
		m.Put(k, k, t0)
	}
	for k := range 300 {
		if v, ok := m.Get(k, t0); !ok || v != k {
			t.Fatalf("key %d reads %d, %v", k, v, ok)
		}
		m.Delete(k)
	}
	if m.Len() != 0 {
		t.Fatalf("%d entries after every key was deleted", m.Len())
	}
}

// concurrently runs f(g, i) for i below n in each of goroutines goroutines g, and waits.
func concurrently(goroutines, n int, f func(g, i int)) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				f(g, i)
			}
		}()
	}
	wg.Wait()
}
