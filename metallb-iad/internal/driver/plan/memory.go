package plan

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// MetallbMemory is what the driver remembers of MetalLB beyond what the API objects show, one
// entry per address. MetalLB's own state cannot be read, only inferred from what it writes and
// reports; each address pass compares what MetalLB shows for the address's IP with what the API
// says it should, and these are the inferences it carries from one pass to the next:
//
//   - the wait for MetalLB to let go of an allocation it kept, and when the names it may keep it
//     under were last released (plan_release.go);
//   - the names of placeholders deleted while they held or were served the IP (the names MetalLB
//     may keep it under);
//   - the attached Service's wait unserved (plan_notserved.go);
//   - the times a Service's stale ingress of the IP was cleared (staleHolder), the last
//     clearLimit within clearMemoryFor;
//   - since when the Services of other namespaces that MetalLB's latest reports name have been
//     seen gone (plan_kept.go).
//
// None of it decides what is written to the apiserver's objects by itself: it only spaces
// retries out and bounds them. An entry goes with its address (forget), and an entry with
// nothing left in it is dropped, so the memory is bounded by the addresses of the pools.
type MetallbMemory struct {
	mu sync.Mutex
	m  map[string]*addressMemory
}

type addressMemory struct {
	Stale    staleWait
	deleted  []string
	Unserved UnservedWait
	Cleared  map[types.UID][]time.Time
	gone     map[string]time.Time
}

func (a *addressMemory) empty() bool {
	return a.Stale == (staleWait{}) && len(a.deleted) == 0 && a.Unserved.Since.IsZero() && len(a.Cleared) == 0 && len(a.gone) == 0
}

// maxDeletedNames bounds the names remembered per address.
const maxDeletedNames = 4

func NewMetallbMemory() *MetallbMemory { return &MetallbMemory{m: map[string]*addressMemory{}} }

// update runs f on the address's entry (made when missing) and drops the entry if f left it
// empty.
func (m *MetallbMemory) update(address string, f func(*addressMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.m[address]
	if e == nil {
		e = &addressMemory{}
	}
	f(e)
	if e.empty() {
		delete(m.m, address)
	} else {
		m.m[address] = e
	}
}

// StaleOf is the wait for a kept allocation and the deleted names remembered for the address.
func (m *MetallbMemory) StaleOf(address string) (w staleWait, deleted []string) {
	m.update(address, func(e *addressMemory) { w, deleted = e.Stale, slices.Clone(e.deleted) })
	return w, deleted
}

// HoldDeleted remembers that a placeholder named name, holding or served address's IP, was
// deleted.
func (m *MetallbMemory) HoldDeleted(address, name string) {
	if address == "" {
		return
	}
	m.update(address, func(e *addressMemory) {
		d := slices.DeleteFunc(e.deleted, func(n string) bool { return n == name })
		d = append(d, name)
		if len(d) > maxDeletedNames {
			d = d[len(d)-maxDeletedNames:]
		}
		e.deleted = d
	})
}

func (m *MetallbMemory) SetStale(address string, w staleWait) {
	m.update(address, func(e *addressMemory) { e.Stale = w })
}

// EndStale forgets the address's wait for a kept allocation, with the deleted names and the
// attached Service's wait unserved that it was about.
func (m *MetallbMemory) EndStale(address string) {
	m.update(address, func(e *addressMemory) { e.Stale, e.deleted, e.Unserved = staleWait{}, nil, UnservedWait{} })
}

// UnservedOf is the memory of address's attached Service's wait unserved (zero: none).
func (m *MetallbMemory) UnservedOf(address string) (w UnservedWait) {
	m.update(address, func(e *addressMemory) { w = e.Unserved })
	return w
}

// SetUnserved remembers w (a zero w forgets).
func (m *MetallbMemory) SetUnserved(address string, w UnservedWait) {
	m.update(address, func(e *addressMemory) {
		if w.Since.IsZero() {
			w = UnservedWait{}
		}
		e.Unserved = w
	})
}

// ClearedOf returns the clears of the Service's stale ingress of the address within
// clearMemoryFor of now (older ones of the address are dropped).
func (m *MetallbMemory) ClearedOf(address string, uid types.UID, now time.Time) (ts []time.Time) {
	m.update(address, func(e *addressMemory) {
		e.pruneClears(now)
		ts = slices.Clone(e.Cleared[uid])
	})
	return ts
}

// NoteCleared remembers a clear of the Service's stale ingress of the address.
func (m *MetallbMemory) NoteCleared(address string, uid types.UID, now time.Time) {
	m.update(address, func(e *addressMemory) {
		e.pruneClears(now)
		if e.Cleared == nil {
			e.Cleared = map[types.UID][]time.Time{}
		}
		ts := append(e.Cleared[uid], now)
		if len(ts) > clearLimit {
			ts = ts[len(ts)-clearLimit:]
		}
		e.Cleared[uid] = ts
	})
}

func (e *addressMemory) pruneClears(now time.Time) {
	for uid, ts := range e.Cleared {
		ts = slices.DeleteFunc(ts, func(t time.Time) bool { return now.Sub(t) >= clearMemoryFor })
		if len(ts) == 0 {
			delete(e.Cleared, uid)
		} else {
			e.Cleared[uid] = ts
		}
	}
}

// maxGoneNames bounds the gone Services remembered per address.
const maxGoneNames = 8

// GoneSince remembers the Services (missing, "namespace/name") seen gone now, keeping when each
// was first seen so and forgetting every other name, and returns those times.
func (m *MetallbMemory) GoneSince(address string, missing []string, now time.Time) (out map[string]time.Time) {
	m.update(address, func(e *addressMemory) {
		g := map[string]time.Time{}
		for _, name := range missing {
			if len(g) == maxGoneNames {
				break
			}
			if t, ok := e.gone[name]; ok {
				g[name] = t
			} else {
				g[name] = now
			}
		}
		if len(g) == 0 {
			g = nil
		}
		e.gone = g
		out = maps.Clone(g)
	})
	return out
}

// Forget drops everything remembered of an address (it is gone).
func (m *MetallbMemory) Forget(address string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, address)
}

// Len is the number of addresses with something remembered.
func (m *MetallbMemory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}
