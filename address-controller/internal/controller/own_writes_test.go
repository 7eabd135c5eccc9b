package controller

import (
	"fmt"
	"testing"
	"time"
)

func TestOwnWrites(t *testing.T) {
	var w ownWrites
	now := time.Unix(1000, 0)
	if !w.shows("claim/t/c", "5", now) {
		t.Fatal("nothing written, yet the cache does not show it")
	}
	w.wrote("claim/t/c", "10", now)
	if w.shows("claim/t/c", "9", now) {
		t.Fatal("a cache at 9 shows the write at 10")
	}
	if !w.shows("claim/t/c", "12", now) {
		t.Fatal("a cache at 12 does not show the write at 10")
	}
	if w.len() != 0 {
		t.Fatal("a write the cache showed is kept")
	}
	// Not numbers: equal only.
	w.wrote("address/a", "x", now)
	if w.shows("address/a", "y", now) || !w.shows("address/a", "x", now) {
		t.Fatal("opaque versions compared wrongly")
	}
	// An entry the cache does not confirm in time asks for one read, then is dropped; a sweep
	// drops the expired ones.
	w.wrote("address/b", "20", now)
	if w.shows("address/b", "1", now.Add(ownWriteTTL+time.Second)) {
		t.Fatal("an expired, unconfirmed write is taken as shown")
	}
	if !w.shows("address/b", "1", now.Add(ownWriteTTL+time.Second)) {
		t.Fatal("an expired write still holds the cache back after its read")
	}
	for i := range 1100 {
		w.wrote(fmt.Sprintf("claim/t/%d", i), "1", now)
	}
	later := now.Add(2*ownWriteTTL + time.Minute)
	for i := range 1100 {
		w.wrote(fmt.Sprintf("claim/t/late-%d", i), "1", later)
	}
	if w.len() != 1100 {
		t.Fatalf("%d entries kept, want the 1,100 that have not expired (a sweep drops the rest)", w.len())
	}
	w.forget("claim/t/late-0")
	if !w.shows("claim/t/late-0", "0", later) {
		t.Fatal("a forgotten write still holds the cache back")
	}
}
