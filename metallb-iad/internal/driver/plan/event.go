package plan

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is what an event is about: a Kubernetes object (the same method set as
// controller-runtime's client.Object, which this package does not import).
type Object interface {
	metav1.Object
	runtime.Object
}

// Event is one event a plan asks for. Once-events are said through the Announcer: again only
// when their message changes.
type Event struct {
	Obj     Object
	Warning bool
	Reason  string
	Message string
	Once    bool
	// Topic, when set, is what the Announcer remembers the message under instead of the
	// reason (one reason said about several addresses on the same object).
	Topic string
	// Names are key-value pairs logged when the event is said: the objects of other namespaces
	// that a tenant's event must not name (docs/design.md) but an admin may need.
	Names []any
}
