package driverkit

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

type recorded struct{ reason, message string }

type fakeRecorder struct{ events []recorded }

func (f *fakeRecorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, note string, args ...any) {
	f.events = append(f.events, recorded{reason, fmt.Sprintf(note, args...)})
}

func svc(name, uid string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
}

func TestAnnouncerSaysOnceUntilTheMessageChanges(t *testing.T) {
	rec := &fakeRecorder{}
	a := &Announcer{Recorder: rec}
	s := svc("web", "u1")
	steps := []struct {
		reason, msg string
		want        bool
	}{
		{"Conflict", "held by a", true},
		{"Conflict", "held by a", false},
		{"Conflict", "held by a, b", true},
		{"ClaimNotReady", "pending", true},
		{"Conflict", "held by a, b", false},
	}
	for i, st := range steps {
		if got := a.Say(s, nil, corev1.EventTypeWarning, st.reason, "Test", st.msg); got != st.want {
			t.Fatalf("step %d: Say(%s, %q) = %v, want %v", i, st.reason, st.msg, got, st.want)
		}
	}
	if len(rec.events) != 3 {
		t.Fatalf("events = %v, want 3", rec.events)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	if !a.Remembers(key, "Conflict") || a.Remembers(key, "Lost") {
		t.Fatal("Remembers does not match what was said")
	}
	if !a.Clear(s, "Conflict") || a.Clear(s, "Conflict") {
		t.Fatal("Clear should report a said reason once")
	}
	if a.Remembers(key, "Conflict") {
		t.Fatal("a cleared reason is still remembered")
	}
	if !a.Say(s, nil, corev1.EventTypeWarning, "Conflict", "Test", "held by a, b") {
		t.Fatal("a cleared reason is said again")
	}
	// A new object of the same name (another uid) starts afresh.
	if !a.Say(svc("web", "u2"), nil, corev1.EventTypeWarning, "ClaimNotReady", "Test", "pending") {
		t.Fatal("a re-created object is told again")
	}
	a.Forget(types.NamespacedName{Namespace: "ns", Name: "web"})
	if a.Len() != 0 {
		t.Fatalf("Len after Forget = %d", a.Len())
	}
}

func TestAnnouncerMemoryIsBounded(t *testing.T) {
	a := &Announcer{Recorder: &fakeRecorder{}, Capacity: 10}
	for i := range 100 {
		a.Say(svc(fmt.Sprintf("s%d", i), "u"), nil, corev1.EventTypeWarning, "R", "Test", "m")
	}
	if a.Len() > 10 {
		t.Fatalf("remembers %d objects, capacity 10", a.Len())
	}
	// The most recent is still remembered.
	if a.Say(svc("s99", "u"), nil, corev1.EventTypeWarning, "R", "Test", "m") {
		t.Fatal("the most recent object was forgotten")
	}
}

func TestAnnouncerSayAboutKeepsTopicsApart(t *testing.T) {
	rec := &fakeRecorder{}
	a := &Announcer{Recorder: rec}
	s := svc("web", "u1")
	// One reason about two addresses, said alternately by their two reconciles: each once.
	for range 3 {
		a.SayAbout(s, "Conflict/ip-a", nil, corev1.EventTypeWarning, "ReservedAddressConflict", "Test", "holds a")
		a.SayAbout(s, "Conflict/ip-b", nil, corev1.EventTypeWarning, "ReservedAddressConflict", "Test", "holds b")
	}
	if len(rec.events) != 2 || rec.events[0].reason != "ReservedAddressConflict" {
		t.Fatalf("events %+v", rec.events)
	}
	if !a.Clear(s, "Conflict/ip-a") {
		t.Fatal("topic not remembered")
	}
	a.SayAbout(s, "Conflict/ip-a", nil, corev1.EventTypeWarning, "ReservedAddressConflict", "Test", "holds a")
	if len(rec.events) != 3 {
		t.Fatalf("a cleared topic is not said again: %+v", rec.events)
	}
}

func TestAnnouncerClearTopicKeepsOnlyWhatIsStillTrue(t *testing.T) {
	rec := &fakeRecorder{}
	a := &Announcer{Recorder: rec, Capacity: 2}
	x, y := svc("x", "ux"), svc("y", "uy")
	a.SayAbout(x, "Conflict/addr", nil, corev1.EventTypeWarning, "Conflict", "Test", "x holds it")
	a.SayAbout(y, "Conflict/addr", nil, corev1.EventTypeWarning, "Conflict", "Test", "y holds it")
	a.ClearTopic("Conflict/addr", types.NamespacedName{Namespace: "ns", Name: "y"})
	if !a.SayAbout(x, "Conflict/addr", nil, corev1.EventTypeWarning, "Conflict", "Test", "x holds it") {
		t.Fatal("a cleared topic is said again")
	}
	if a.SayAbout(y, "Conflict/addr", nil, corev1.EventTypeWarning, "Conflict", "Test", "y holds it") {
		t.Fatal("a kept topic is not said again")
	}
	// The index follows eviction and Forget: nothing is left of a forgotten object.
	a.Say(svc("z", "uz"), nil, corev1.EventTypeWarning, "Other", "Test", "z")
	a.Forget(types.NamespacedName{Namespace: "ns", Name: "y"})
	a.Forget(types.NamespacedName{Namespace: "ns", Name: "z"})
	a.ClearTopic("Conflict/addr")
	if a.Len() != 0 || len(a.about) != 0 {
		t.Fatalf("left over: %d objects, index %v", a.Len(), a.about)
	}
}
