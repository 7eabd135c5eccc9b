package driver

import (
	"sync"
	"time"
)

// expectations remember what this driver just created or deleted until its cache shows it, as
// the ReplicaSet controller does: a pass that runs before the cache caught up must neither
// create a second placeholder for a claim nor delete an object twice. Each entry expires after
// ttl, so a write the cache never shows (a lost watch event) delays but never blocks.
type expectations struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]expected
	// sweepAt is the size at which Expect next drops expired entries (an entry whose object the
	// cache never shows, or no longer shows, is not looked up again).
	sweepAt int
	// off makes every expectation look met at once (only to show a test failing without them).
	off bool
}

type expected struct {
	// name is what was written (a placeholder's or an address's name).
	name string
	at   time.Time
}

func newExpectations(ttl time.Duration) *expectations {
	return &expectations{ttl: ttl, m: map[string]expected{}}
}

// Expect records that a write under key, naming name, awaits the cache.
func (e *expectations) Expect(key, name string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = expected{name: name, at: now}
	if len(e.m) >= e.sweepAt {
		for k, x := range e.m {
			if now.Sub(x.at) > e.ttl {
				delete(e.m, k)
			}
		}
		e.sweepAt = max(2*len(e.m), 1024)
	}
}

// Pending returns the name recorded under key while it has not expired.
func (e *expectations) Pending(key string, now time.Time) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok || e.off {
		return "", false
	}
	if now.Sub(x.at) > e.ttl {
		delete(e.m, key)
		return "", false
	}
	return x.name, true
}

// Observed forgets key: the cache shows the write (or it no longer matters).
func (e *expectations) Observed(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// Len is the number of entries (tests, metrics).
func (e *expectations) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}

// Keys of the expectations.
func placeholderKey(claimUID, family string) string { return "placeholder/" + claimUID + "/" + family }
func addressKey(claimUID, family string) string     { return "address/" + claimUID + "/" + family }
func holdKey(address string) string                 { return "hold/" + address }
func existsKey(address string) string               { return "exists/" + address }
func deletedKey(uid string) string                  { return "deleted/" + uid }
func relabelledKey(uid string) string               { return "relabelled/" + uid }
func pinKey(svcUID string) string                   { return "pin/" + svcUID }
func attachKey(address string) string               { return "attach/" + address }
func writtenKey(address string) string              { return "written/" + address }
func serviceWrittenKey(uid string) string           { return "written-service/" + uid }
