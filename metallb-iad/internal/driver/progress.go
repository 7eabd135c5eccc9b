package driver

import (
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// metallbProgress is how far MetalLB has got through its work, as far as the driver can tell:
// the latest touch (creation or nudge, lastTouch) of a placeholder of this driver that MetalLB
// has served. MetalLB handles Services in the order they were written, so a placeholder touched
// before that mark and still unserved, with no AllocationFailed report since its touch, was
// passed over without a report the driver saw (dropped by MetalLB's event recorder): a nudge
// is due. One touched after the mark is merely waiting its turn behind MetalLB's backlog, and a
// nudge would only add a write to that backlog (at 10,000 claims, one for every second claim).
type metallbProgress struct {
	namespace string
	mark      atomic.Int64 // unix nanoseconds; 0 when nothing was seen served yet
}

// see moves the mark on for a placeholder of the driver's namespace that MetalLB serves (the
// Service informer's add and update events).
func (m *metallbProgress) see(obj any) {
	s, ok := obj.(*corev1.Service)
	if !ok || s.Namespace != m.namespace || len(IngressIPs(s)) == 0 {
		return
	}
	if role := s.Labels[LabelRole]; role != RoleHold && role != RoleProvisioning {
		return
	}
	t := lastTouch(s).UnixNano()
	for {
		cur := m.mark.Load()
		if t <= cur || m.mark.CompareAndSwap(cur, t) {
			return
		}
	}
}

// passed is the mark (zero when nothing was seen served).
func (m *metallbProgress) passed() time.Time {
	if n := m.mark.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}
