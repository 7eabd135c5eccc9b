package driver

import (
	"context"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) addressSnapshot(ctx context.Context, a *ipamv1.IPAddress) (*plan.AddressView, error) {
	ip, err := ipamv1.ParseCanonical(a.Spec.Address)
	if err != nil {
		return nil, nil // the CRD rejects these; nothing to hold
	}
	v := &plan.AddressView{Addr: a, IP: ip, Namespace: d.Namespace, Now: d.now(), NudgeAfter: d.NudgeAfter, MetallbPassed: d.progress.passed(),
		ReleaseFor: d.ReleaseFor, ReleaseAfter: d.ReleaseAfter, NotServedAfter: d.NotServedAfter}
	var class ipamv1.IPAddressClass
	if err := d.client.Get(ctx, types.NamespacedName{Name: a.Spec.ClassName}, &class); err == nil {
		v.Class = &class
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if v.Class != nil && v.Class.Spec.Provisioner == plan.Provisioner {
		if name := plan.ParseClassParams(v.Class).Pool; name != "" {
			var pool metallb.IPAddressPool
			if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: name}, &pool); err == nil {
				v.Pool = &pool
			} else if !apierrors.IsNotFound(err) {
				return nil, err
			}
		}
	}
	if v.Holds, err = d.holdsOf(ctx, a.Name); err != nil {
		return nil, err
	}
	var failures map[string]string
	if v.FailedAt, failures, err = d.allocationFailures(ctx, v.Holds, v.Now, nil); err != nil {
		return nil, err
	}
	if len(v.Holds) > 0 {
		d.expect.Observed(holdKey(a.Name))
		for _, h := range v.Holds {
			d.expect.Observed(relabelledKey(string(h.UID)))
		}
	} else {
		_, v.HoldExpected = d.expect.Pending(holdKey(a.Name), v.Now)
	}
	if at := a.Status.AttachedTo; at != nil {
		var svc corev1.Service
		err := d.client.Get(ctx, types.NamespacedName{Namespace: at.Namespace, Name: at.Name}, &svc)
		switch {
		case apierrors.IsNotFound(err):
			v.AttachedGone = true
		case err != nil:
			return nil, err
		case at.UID != "" && svc.UID != at.UID:
			v.AttachedGone = true
		default:
			v.Attached = &svc
		}
	}
	v.Unserved = d.memory.UnservedOf(a.Name)
	if v.Holders, err = d.holdersOf(ctx, a, ip); err != nil {
		return nil, err
	}
	for _, h := range v.Holders {
		if c := d.memory.ClearedOf(a.Name, h.Svc.UID, v.Now); len(c) > 0 {
			if v.Cleared == nil {
				v.Cleared = map[types.UID][]time.Time{}
			}
			v.Cleared[h.Svc.UID] = c
		}
	}
	if err := d.keptBy(ctx, v); err != nil {
		return nil, err
	}
	if err := d.staleSnapshot(ctx, v, failures); err != nil {
		return nil, err
	}
	return v, nil
}

// refreshServices re-reads uncached the Services the address's view rests on: the attached
// one and those that show the IP.
func (d *Driver) refreshServices(ctx context.Context, v *plan.AddressView) error {
	if v.Attached != nil {
		var s corev1.Service
		err := d.reader.Get(ctx, client.ObjectKeyFromObject(v.Attached), &s)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && s.UID != v.Attached.UID):
			v.Attached, v.AttachedGone = nil, true
		case err != nil:
			return err
		default:
			v.Attached = &s
		}
	}
	holders := v.Holders[:0]
	for _, h := range v.Holders {
		var s corev1.Service
		if err := d.reader.Get(ctx, client.ObjectKeyFromObject(h.Svc), &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		h.Svc = &s
		h.InIngress = slices.Contains(plan.IngressIPs(&s), v.IP)
		h.InExternalIPs = slices.Contains(plan.ExternalIPs(&s), v.IP)
		if h.InIngress || h.InExternalIPs {
			holders = append(holders, h)
		}
	}
	v.Holders = holders
	return nil
}

// allocationFailures looks up, in the cache, MetalLB's latest AllocationFailed report on each
// placeholder that may be nudged (MayNudge, or alsoFor when given): the Events MetalLB's controller records on it;
// when, and what it said (by uid).
func (d *Driver) allocationFailures(ctx context.Context, placeholders []*corev1.Service, now time.Time, alsoFor func(*corev1.Service) bool) (map[types.UID]time.Time, map[string]string, error) {
	out, said := map[types.UID]time.Time{}, map[string]string{}
	for _, s := range placeholders {
		if !plan.MayNudge(s, now, d.NudgeAfter) && (alsoFor == nil || !alsoFor(s)) {
			continue
		}
		t, msg, err := d.lastAllocationFailed(ctx, s)
		if err != nil {
			// Not knowing MetalLB's last report must not stop the rest of the pass (teardown,
			// Lost, Conflict, the hold): without one, the nudge waits for the silence.
			log.FromContext(ctx).Info("cannot read MetalLB's AllocationFailed events; nudging after the silence instead",
				"service", s.Namespace+"/"+s.Name, "error", err.Error())
			continue
		}
		out[s.UID] = t
		if msg != "" {
			said[string(s.UID)] = msg
		}
	}
	return out, said, nil
}

// keptBy reads what plan_kept.go decides from: MetalLB's latest report on each of the address's
// unserved holds (whether or not a nudge is due: the answer must not change with the nudge's
// timing), and on the attached Service once it has waited unserved for keptCheckAfter or the
// address says KeptByMetalLB already (an ordinary attach, which MetalLB serves within seconds,
// asks nothing); both from the cache (CacheByObject); which of the Services they name exist, read
// uncached (a Service the cache does not show yet is not called gone), and only for a name
// MetalLB gave; and since when the driver has seen them gone.
func (d *Driver) keptBy(ctx context.Context, v *plan.AddressView) error {
	var messages []string
	served := false
	for _, h := range v.Holds {
		if slices.Contains(plan.IngressIPs(h), v.IP) {
			served = true // whatever MetalLB said before is over
			break
		}
		_, msg, err := d.lastAllocationFailed(ctx, h)
		if err != nil {
			return err
		}
		messages = append(messages, msg)
	}
	if s := v.Attached; !served && s != nil && plan.AttachedUnserved(v) && (plan.KeptSaid(v.Addr) ||
		(v.Unserved.UID == s.UID && !v.Unserved.Since.IsZero() && v.Now.Sub(v.Unserved.Since) >= keptCheckAfter)) {
		_, msg, err := d.lastAllocationFailed(ctx, s)
		if err != nil {
			return err
		}
		messages = append(messages, msg)
	}
	if served {
		messages = nil
	}
	var missing []string
	for _, k := range plan.KeptCandidates(messages, d.Namespace, v.Attached) {
		var s corev1.Service
		err := d.reader.Get(ctx, k, &s)
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, k.String())
		case err != nil:
			return err
		}
	}
	v.KeptBy, v.KeptRecheck = plan.KeptVerdict(d.memory.GoneSince(v.Addr.Name, missing, v.Now), v.Now, plan.KeptSaid(v.Addr))
	v.Reported = slices.ContainsFunc(messages, func(m string) bool { return m != "" })
	return nil
}

// lastAllocationFailed is when MetalLB last reported AllocationFailed on the Service, one of the
// driver's own (zero when never), and what it said: the Events on it of that reason, from the
// cache (CacheByObject). A report the cache does not show yet only delays a nudge to the next
// re-check.
func (d *Driver) lastAllocationFailed(ctx context.Context, s *corev1.Service) (time.Time, string, error) {
	var evs corev1.EventList
	if err := d.client.List(ctx, &evs, client.InNamespace(s.Namespace), client.MatchingFields{indexEventAbout: string(s.UID)},
		client.UnsafeDisableDeepCopy); err != nil {
		return time.Time{}, "", err
	}
	last, msg := latestAllocationFailed(evs.Items)
	return last, msg, nil
}

// latestAllocationFailed is the latest of MetalLB's AllocationFailed reports among evs: when, and
// what it said (zero and "" when none).
func latestAllocationFailed(evs []corev1.Event) (time.Time, string) {
	var last time.Time
	var msg string
	found := false
	for i := range evs {
		e := &evs[i]
		if e.Reason != ReasonAllocationFailed {
			continue
		}
		if t := eventTime(e); t.After(last) || !found {
			last, msg, found = t, e.Message, true
		}
	}
	return last, msg
}

// keptCheckAfter is how long an attached Service waits unserved before the driver reads MetalLB's
// reports on it, looking for an IP kept for a deleted Service.
const keptCheckAfter = 30 * time.Second

// eventTime is when an event was last seen.
func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	for _, u := range []time.Time{e.FirstTimestamp.Time, e.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// holdersOf lists the Services that show ip in their ingress or external IPs, and whether each
// links to the address's claim.
func (d *Driver) holdersOf(ctx context.Context, a *ipamv1.IPAddress, ip netip.Addr) ([]plan.Holder, error) {
	byUID := map[types.UID]*plan.Holder{}
	var order []types.UID
	for _, field := range []string{indexIngressIP, indexExternalIP} {
		var list corev1.ServiceList
		if err := d.client.List(ctx, &list, client.MatchingFields{field: ip.String()}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			s := &list.Items[i]
			h := byUID[s.UID]
			if h == nil {
				h = &plan.Holder{Svc: s}
				byUID[s.UID] = h
				order = append(order, s.UID)
			}
			if field == indexIngressIP {
				h.InIngress = true
			} else {
				h.InExternalIPs = true
			}
		}
	}
	out := make([]plan.Holder, 0, len(order))
	for _, uid := range order {
		h := byUID[uid]
		if ref := a.Spec.ClaimRef; ref != nil && h.Svc.Namespace == ref.Namespace {
			claim, _, err := d.linkedClaim(ctx, h.Svc)
			if err != nil {
				return nil, err
			}
			h.LinksToClaim = claim != nil && claim.Name == ref.Name && (ref.UID == "" || claim.UID == ref.UID)
		}
		out = append(out, *h)
	}
	return out, nil
}
