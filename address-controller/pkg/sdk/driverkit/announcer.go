// Package driverkit holds what every address driver (and the core) needs and would otherwise
// write again: saying a lasting condition once, the claim/address mappings, finalizer helpers.
package driverkit

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultAnnouncerCapacity bounds how many objects an Announcer remembers.
const DefaultAnnouncerCapacity = 10000

// Announcer emits an event about a lasting condition once, and again only when its message
// changes. What it said is remembered per object (by namespace/name, reset when the uid
// changes) and per reason; the memory is bounded and forgotten with the object. It is not a
// freshness.Memory: it expires nothing on a clock and keeps an index of its topics
// (docs/design.md#the-freshness-kit).
type Announcer struct {
	Recorder events.EventRecorder
	// Capacity bounds the objects remembered (DefaultAnnouncerCapacity when zero). Past it the
	// least recently announced object is forgotten: at worst it is told once more.
	Capacity int

	mu    sync.Mutex
	said  map[types.NamespacedName]*said
	clock uint64
	// about indexes the objects by the reasons and topics said about them, for ClearTopic.
	about map[string]map[types.NamespacedName]struct{}
}

type said struct {
	uid      types.UID
	messages map[string]string // reason -> last message said
	touched  uint64
}

// Say emits the event unless the same reason was last said about the object with the same
// message. It reports whether it emitted.
func (a *Announcer) Say(obj client.Object, related runtime.Object, eventType, reason, action, message string) bool {
	if !a.remember(obj, reason, message) {
		return false
	}
	a.Recorder.Eventf(obj, related, eventType, reason, action, "%s", message)
	return true
}

// SayAbout is Say with the memory kept under topic instead of reason: for one reason said about
// several things on the same object (a Service holding two reserved addresses), each said once.
// Clear(obj, topic) forgets it.
func (a *Announcer) SayAbout(obj client.Object, topic string, related runtime.Object, eventType, reason, action, message string) bool {
	if !a.remember(obj, topic, message) {
		return false
	}
	a.Recorder.Eventf(obj, related, eventType, reason, action, "%s", message)
	return true
}

// remember records message as the last said for (obj, reason), reporting whether it is new.
func (a *Announcer) remember(obj client.Object, reason, message string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.said == nil {
		a.said = map[types.NamespacedName]*said{}
	}
	key := client.ObjectKeyFromObject(obj)
	s := a.said[key]
	if s == nil || s.uid != obj.GetUID() {
		if s != nil {
			a.drop(key, s)
		}
		a.evictIfFull()
		s = &said{uid: obj.GetUID(), messages: map[string]string{}}
		a.said[key] = s
	}
	a.clock++
	s.touched = a.clock
	if prev, ok := s.messages[reason]; ok && prev == message {
		return false
	}
	s.messages[reason] = message
	if a.about == nil {
		a.about = map[string]map[types.NamespacedName]struct{}{}
	}
	if a.about[reason] == nil {
		a.about[reason] = map[types.NamespacedName]struct{}{}
	}
	a.about[reason][key] = struct{}{}
	return true
}

// drop removes an object's memory and its entries in the topic index.
func (a *Announcer) drop(key types.NamespacedName, s *said) {
	for reason := range s.messages {
		a.unindex(reason, key)
	}
	delete(a.said, key)
}

func (a *Announcer) unindex(reason string, key types.NamespacedName) {
	if m := a.about[reason]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(a.about, reason)
		}
	}
}

func (a *Announcer) evictIfFull() {
	limit := a.Capacity
	if limit <= 0 {
		limit = DefaultAnnouncerCapacity
	}
	if len(a.said) < limit {
		return
	}
	var oldest types.NamespacedName
	var at uint64
	first := true
	for k, s := range a.said {
		if first || s.touched < at {
			oldest, at, first = k, s.touched, false
		}
	}
	a.drop(oldest, a.said[oldest])
}

// Clear forgets one reason for an object, so it is said again if the condition comes back.
// It reports whether the reason had been said.
func (a *Announcer) Clear(obj client.Object, reason string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.said[client.ObjectKeyFromObject(obj)]
	if s == nil || s.uid != obj.GetUID() {
		return false
	}
	_, had := s.messages[reason]
	delete(s.messages, reason)
	a.unindex(reason, client.ObjectKeyFromObject(obj))
	return had
}

// ClearTopic forgets a reason or topic for every object it was said about except those keep
// names (the objects of which it is still true), so that each is said again if it comes back:
// for a condition that ends without an event about the object it was said about (a Service
// that stopped holding an address). It costs the number of objects the topic was said about.
func (a *Announcer) ClearTopic(topic string, keep ...types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range a.about[topic] {
		if slices.Contains(keep, key) {
			continue
		}
		if s := a.said[key]; s != nil {
			delete(s.messages, topic)
		}
		a.unindex(topic, key)
	}
}

// Remembers reports whether reason (or a topic) is remembered as said about the object with
// the given key: true until Clear, ClearTopic or Forget drops it (for tests and diagnostics).
func (a *Announcer) Remembers(key types.NamespacedName, reason string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.said[key]
	if s == nil {
		return false
	}
	_, ok := s.messages[reason]
	return ok
}

// Forget drops everything said about an object; call it when the object is gone.
func (a *Announcer) Forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.said[key]; s != nil {
		a.drop(key, s)
	}
}

// Len is how many objects are remembered (for tests and metrics).
func (a *Announcer) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.said)
}
