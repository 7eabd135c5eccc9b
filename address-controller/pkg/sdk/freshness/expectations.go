package freshness

import (
	"time"
)

// Expectations remember what a controller just created or deleted until its cache shows it, as
// the ReplicaSet controller does (docs/design.md#the-freshness-kit): a pass that runs before the
// cache caught up must neither create a second object nor delete one twice. The value under a
// key is what was written (a name, a uid). Each entry expires after the TTL, so a write the
// cache never shows (a lost watch event) delays but never blocks.
type Expectations[K comparable, V any] struct {
	mem Memory[K, V]
}

// NewExpectations returns expectations whose entries live for ttl. A ttl of zero or less
// expects nothing: every pass decides from the cache as it is.
func NewExpectations[K comparable, V any](ttl time.Duration) *Expectations[K, V] {
	return &Expectations[K, V]{mem: Memory[K, V]{TTL: ttl}}
}

// Expect records that a write under key, naming v, awaits the cache.
func (e *Expectations[K, V]) Expect(key K, v V, now time.Time) {
	if e.mem.TTL <= 0 {
		return
	}
	e.mem.Put(key, v, now)
}

// Pending returns what was recorded under key while it has not expired.
func (e *Expectations[K, V]) Pending(key K, now time.Time) (V, bool) {
	return e.mem.Get(key, now)
}

// Observed forgets key: the cache shows the write (or it no longer matters).
func (e *Expectations[K, V]) Observed(key K) { e.mem.Delete(key) }

// Len is the number of entries (tests, metrics).
func (e *Expectations[K, V]) Len() int { return e.mem.Len() }

// WriteTracker remembers the resourceVersion of a controller's last write of each object until
// its cache shows it (docs/design.md#a-view-that-includes-your-own-writes): a pass whose cached
// object shows it decides from the cache; one that lags reads the object from the apiserver
// first. A write the cache does not show within the TTL (the object went, or the cache is far
// behind) asks for one read more and is dropped.
type WriteTracker[K comparable] struct {
	ttl time.Duration
	mem Memory[K, written]
}

type written struct {
	rv string
	at time.Time
}

// NewWriteTracker returns a tracker whose entries ask for reads for ttl. A ttl of zero or less
// tracks nothing: the cache is always trusted.
func NewWriteTracker[K comparable](ttl time.Duration) *WriteTracker[K] {
	// Past ttl an entry still asks for one read (Shows), so it is swept only after twice that.
	return &WriteTracker[K]{ttl: ttl, mem: Memory[K, written]{TTL: 2 * ttl}}
}

// Wrote records a write that left the object under key at resourceVersion rv.
func (w *WriteTracker[K]) Wrote(key K, rv string, now time.Time) {
	if w.ttl <= 0 {
		return
	}
	w.mem.Put(key, written{rv: rv, at: now}, now)
}

// Shows reports whether the cache, holding the object under key at resourceVersion cached, shows
// this controller's last write of it (or there is none to show), by RVAtLeast; a write
// it shows is forgotten. An entry past the TTL reports false once (one read from the apiserver),
// and is forgotten: then the cache is trusted again.
func (w *WriteTracker[K]) Shows(key K, cached string, now time.Time) bool {
	shows := true
	w.mem.Update(key, now, func(e written, ok bool) (written, bool) {
		switch {
		case !ok:
			return e, false
		case RVAtLeast(cached, e.rv):
			return e, false
		case now.Sub(e.at) > w.ttl:
			shows = false
			return e, false
		}
		shows = false
		return e, true
	})
	return shows
}

// Forget drops the entry under key (the object is gone, or was replaced).
func (w *WriteTracker[K]) Forget(key K) { w.mem.Delete(key) }

// Len is the number of entries (tests, metrics).
func (w *WriteTracker[K]) Len() int { return w.mem.Len() }
