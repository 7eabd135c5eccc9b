// Package freshness is the kit every controller of the project (the core and any driver) uses to
// remember, between passes, what its cache does not show yet and what it must carry from one pass
// to the next (docs/design.md#the-freshness-kit):
//
//   - Memory: one per-key memory whose entries expire after a time to live;
//   - Expectations: what a controller just created or deleted, until its cache shows it (the
//     shape of Kubernetes' ControllerExpectations);
//   - WriteTracker: the resourceVersion each of its writes left, until its cache shows it.
//
// The package is pure: no client, only the time a caller passes in.
package freshness

import (
	"sync"
	"time"
)

// minSweepAt is the smallest size at which a Memory looks for expired entries: below it, an
// expired entry costs little and is dropped when it is next looked up.
const minSweepAt = 1024

// Memory is a per-key memory safe for concurrent use. An entry expires TTL after it was written
// (Put; Update keeps an existing entry's time), and is dropped when next looked up or when the
// memory grows past twice the size it had at its last sweep: with a TTL, it holds at most what
// was written within about two TTLs. It has no size bound that would drop a live entry: an
// expectation dropped early is a duplicate create, a wrong write. The zero value is a memory
// whose entries never expire (its callers bound it by deleting what they no longer need); set
// TTL before first use.
type Memory[K comparable, V any] struct {
	// TTL is how long an entry lives after it was written; zero: for ever.
	TTL time.Duration

	mu      sync.Mutex
	m       map[K]entry[V]
	sweepAt int
}

type entry[V any] struct {
	v  V
	at time.Time
}

// Put remembers v under key, written now.
func (m *Memory[K, V]) Put(key K, v V, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.put(key, entry[V]{v: v, at: now}, now)
}

// Get returns the value under key while it has not expired (an expired one is dropped).
func (m *Memory[K, V]) Get(key K, now time.Time) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key, now)
	return e.v, ok
}

// Update replaces the value under key with what f returns from the current one (ok false and v
// the zero value when there is none or it expired); f's keep false drops the entry. An entry
// Update keeps keeps the time it was written at (now for a new one). f runs under the memory's
// lock: it must not call the memory.
func (m *Memory[K, V]) Update(key K, now time.Time, f func(v V, ok bool) (V, bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key, now)
	v, keep := f(e.v, ok)
	switch {
	case !keep:
		delete(m.m, key)
	case ok:
		m.m[key] = entry[V]{v: v, at: e.at}
	default:
		m.put(key, entry[V]{v: v, at: now}, now)
	}
}

// Delete forgets key.
func (m *Memory[K, V]) Delete(key K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

// Len is the number of entries, expired ones not yet dropped included (tests, metrics).
func (m *Memory[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// live is the entry under key unless it expired (dropped then). Called with mu held.
func (m *Memory[K, V]) live(key K, now time.Time) (entry[V], bool) {
	e, ok := m.m[key]
	if ok && m.expired(e, now) {
		delete(m.m, key)
		return entry[V]{}, false
	}
	return e, ok
}

func (m *Memory[K, V]) expired(e entry[V], now time.Time) bool {
	return m.TTL > 0 && now.Sub(e.at) > m.TTL
}

// put writes e under key, sweeping expired entries as the memory grows. Called with mu held.
func (m *Memory[K, V]) put(key K, e entry[V], now time.Time) {
	if m.m == nil {
		m.m = map[K]entry[V]{}
	}
	m.m[key] = e
	if len(m.m) >= m.sweepAt {
		m.sweep(now)
		m.sweepAt = max(2*len(m.m), minSweepAt)
	}
}

func (m *Memory[K, V]) sweep(now time.Time) {
	if m.TTL <= 0 {
		return
	}
	for k, e := range m.m {
		if m.expired(e, now) {
			delete(m.m, k)
		}
	}
}
