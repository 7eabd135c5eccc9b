package driver

import (
	"context"
	"errors"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// applyProvisionPlan makes the plan's writes. A delete refused because the placeholder changed
// since the view was read does not stop the rest of the plan (it touches only the placeholders
// kept or new); refusedSince is then the creation of the oldest placeholder refused.
func (d *Driver) applyProvisionPlan(ctx context.Context, v plan.ProvisionView, p plan.ProvisionPlan) (refusedSince time.Time, err error) {
	// The window's slots granted for this pass and not used go back, whatever happens below.
	made := map[string]bool{}
	defer func() { d.releaseSlots(v, p, made) }()
	for _, h := range p.ToHold {
		if err := d.makeHold(ctx, h); err != nil {
			return refusedSince, err
		}
	}
	for _, s := range p.Delete {
		// Decided from the cache: deleted only as it was seen. A placeholder changed since (made
		// a hold by this driver's earlier pass, served by MetalLB) is looked at again.
		switch err := d.deleteServiceAsSeen(ctx, s); {
		case errors.Is(err, errChangedSince):
			if created := s.CreationTimestamp.Time; refusedSince.IsZero() || created.Before(refusedSince) {
				refusedSince = created
			}
		case err != nil:
			return refusedSince, err
		}
	}
	for _, s := range p.Create {
		err := d.client.Create(ctx, s)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return refusedSince, err
		}
		made[s.Name] = true
		d.expect.Expect(placeholderKey(s.Labels[plan.LabelClaimUID], s.Labels[plan.LabelFamily]), s.Name, d.now())
	}
	for _, st := range p.Settle {
		// The IPAddress's name is the lock on the IP: an AlreadyExists means someone else's
		// address (or an earlier pass's), which the next pass sorts out from a fresh read.
		// The placeholder becomes the address's hold right after: say so before the address
		// exists, so the address's first pass does not make a hold of its own.
		d.expect.Expect(holdKey(st.Address.Name), st.Svc.Name, d.now())
		err := d.client.Create(ctx, st.Address)
		if err != nil {
			d.expect.Observed(holdKey(st.Address.Name))
		}
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache yet (an admin's, a previous leader's): the next pass reads it
			// from the apiserver and decides again. A lagging cache, not an error.
			d.expect.Expect(existsKey(st.Address.Name), st.Address.Name, d.now())
			return refusedSince, errAddressExists
		}
		if err != nil {
			return refusedSince, err
		}
		fam := st.Svc.Labels[plan.LabelFamily]
		d.expect.Expect(addressKey(st.Svc.Labels[plan.LabelClaimUID], fam), st.Address.Name, d.now())
		if v.Claim != nil && d.Metrics != nil {
			d.Metrics.served.Observe(d.now().Sub(v.Claim.CreationTimestamp.Time).Seconds())
		}
		ip, _ := netip.ParseAddr(st.Address.Spec.Address)
		if err := d.makeHold(ctx, plan.Handover{Svc: st.Svc, Address: st.Address.Name, IP: ip, Key: plan.HoldKey(st.Address)}); err != nil {
			// Not the hold yet: the next pass hands the placeholder over (it must not take the
			// expectation for a hold made).
			d.expect.Observed(holdKey(st.Address.Name))
			return refusedSince, err
		}
	}
	for _, s := range p.Nudge {
		if err := d.nudgeService(ctx, s, p.NudgeStamps[s.Name]); err != nil {
			return refusedSince, err
		}
	}
	return refusedSince, nil
}

// makeHold pins a placeholder to its IP and makes it the address's hold, in one patch.
func (d *Driver) makeHold(ctx context.Context, h plan.Handover) error {
	s := h.Svc
	patch := client.MergeFrom(s.DeepCopy())
	s.Labels[plan.LabelRole] = plan.RoleHold
	s.Labels[plan.LabelAddress] = h.Address
	markOwn(s)
	delete(s.Labels, plan.LabelClaimUID)
	delete(s.Labels, plan.LabelFamily)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[metallb.AnnotationLoadBalancerIPs] = h.IP.String()
	if h.Key != "" {
		s.Annotations[metallb.AnnotationAllowSharedIP] = h.Key
	}
	delete(s.Annotations, plan.AnnotationNudge)
	if err := d.client.Patch(ctx, s, patch); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: no hold is coming from it (the address pass makes one).
			if name, ok := d.expect.Pending(holdKey(h.Address), d.now()); ok && name == s.Name {
				d.expect.Observed(holdKey(h.Address))
			}
			return nil
		}
		return err
	}
	d.expect.Expect(holdKey(h.Address), s.Name, d.now())
	d.expect.Expect(relabelledKey(string(s.UID)), s.ResourceVersion, d.now())
	return nil
}

// errAddressExists: a settle's IPAddress create was refused, the address exists though the
// cache does not show it; the pass is decided again after addressExistsRetry, from the apiserver.
var errAddressExists = errors.New("the IPAddress exists already")

const addressExistsRetry = 100 * time.Millisecond
