package driver

import (
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// metallbProgress is how far MetalLB has got through its work, as far as the driver can tell:
// the latest touch (creation or nudge, LastTouch) of a placeholder of this driver that MetalLB
// has served. MetalLB handles Services in the order they were written, so a placeholder touched
// before that mark and still unserved, with no AllocationFailed report since its touch, was
// passed over without a report the driver saw (dropped by MetalLB's event recorder): a nudge
// is due. One touched after the mark is merely waiting its turn behind MetalLB's backlog, and a
// nudge would only add a write to that backlog (at 10,000 claims, one for every second claim).
//
// movedAt is when the mark last moved on, by the driver's clock: while MetalLB keeps serving
// placeholders touched before a waiting one, it is working through a backlog in order and
// will get to it, so even a long silence is no reason to nudge (at 10,000 claims, a nudge a
// minute for every placeholder queued behind the backlog for more than silenceCap).
type metallbProgress struct {
	namespace string
	mark      atomic.Int64 // unix nanoseconds; 0 when nothing was seen served yet
	movedAt   atomic.Int64 // unix nanoseconds, by now
	now       func() time.Time
}

// see moves the mark on for a placeholder of the driver's namespace that MetalLB serves (the
// Service informer's add and update events).
func (m *metallbProgress) see(obj any) {
	s, ok := obj.(*corev1.Service)
	if !ok || s.Namespace != m.namespace || len(plan.IngressIPs(s)) == 0 {
		return
	}
	if role := s.Labels[plan.LabelRole]; role != plan.RoleHold && role != plan.RoleProvisioning {
		return
	}
	now := time.Now
	if m.now != nil {
		now = m.now
	}
	// Never later than this driver's clock: a nudge stamped by a clock that runs ahead (a
	// previous leader's) would otherwise count every waiting placeholder as passed over.
	t := min(plan.LastTouch(s).UnixNano(), now().UnixNano())
	for {
		cur := m.mark.Load()
		if t <= cur {
			return
		}
		if m.mark.CompareAndSwap(cur, t) {
			m.movedAt.Store(now().UnixNano())
			return
		}
	}
}

// passed is the mark (zero when nothing was seen served) and when it last moved.
func (m *metallbProgress) passed() plan.MetallbMark {
	var out plan.MetallbMark
	if n := m.mark.Load(); n != 0 {
		out.Passed = time.Unix(0, n)
	}
	if n := m.movedAt.Load(); n != 0 {
		out.MovedAt = time.Unix(0, n)
	}
	return out
}
