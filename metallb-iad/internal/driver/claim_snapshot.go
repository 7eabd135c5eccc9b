package driver

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/freshness"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) provisionSnapshot(ctx context.Context, key types.NamespacedName) (plan.ProvisionView, error) {
	v := plan.ProvisionView{
		ClaimKey: key.Namespace + "/" + key.Name, Namespace: d.Namespace, Now: d.now(), NudgeAfter: d.NudgeAfter, MetallbPassed: d.progress.passed(),
		Have: map[ipamv1.IPFamily]bool{}, PlaceholderExpected: map[ipamv1.IPFamily]bool{},
		Addresses: map[string]*ipamv1.IPAddress{}, HoldOf: map[string]string{}, NextName: map[ipamv1.IPFamily]string{},
	}
	var claim ipamv1.IPAddressClaim
	if err := d.client.Get(ctx, key, &claim); err == nil {
		v.Claim = &claim
	} else if !apierrors.IsNotFound(err) {
		return v, err
	}
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexProvisioningForKey: v.ClaimKey}); err != nil {
		return v, err
	}
	v.Placeholders = d.notRelabelled(d.live(list.Items), v.Now)
	if v.Claim != nil {
		// The class as the core recorded it (spec, status, or its stamp: the core may not have
		// written the claim's status yet, it leaves a claim that only waits for its driver quiet).
		class, err := driverkit.ClassOfClaim(ctx, d.client, v.Claim)
		if err != nil {
			return v, err
		}
		v.Class = class
		if class != nil && (class.Spec.NamespaceSelector != nil || class.Status.ServedNamespaces != nil) {
			ns := &metav1.PartialObjectMetadata{}
			ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
			if err := d.client.Get(ctx, types.NamespacedName{Name: key.Namespace}, ns); client.IgnoreNotFound(err) != nil {
				return v, err
			}
			v.NamespaceLabels = ns.Labels
		}
		var bound ipamv1.IPAddressList
		if err := d.client.List(ctx, &bound, client.MatchingFields{index.AddressByClaim: v.ClaimKey}); err != nil {
			return v, err
		}
		v.Have = driverkit.FamiliesPresent(v.Claim, bound.Items)
		if err := d.confirmExpected(ctx, &v); err != nil {
			return v, err
		}
	}
	if err := d.poolWindow(ctx, &v); err != nil {
		return v, err
	}
	// MetalLB's reports on the placeholders a nudge may be due for: those untouched for
	// NudgeAfter, and those whose pool has moved on since they were made or last nudged (a
	// refusal in the earlier state makes the nudge due at once).
	var err error
	if v.FailedAt, _, err = d.allocationFailures(ctx, v.Placeholders, v.Now, func(s *corev1.Service) bool {
		return plan.PoolMovedOn(s, v.Pool[ipamv1.IPFamily(s.Labels[plan.LabelFamily])])
	}); err != nil {
		return v, err
	}
	// What each served placeholder's IP already is.
	kept := plan.KeptPlaceholders(v)
	for _, s := range v.Placeholders {
		fam := ipamv1.IPFamily(s.Labels[plan.LabelFamily])
		ip, ok := plan.ServedIP(s, fam)
		if !ok {
			continue
		}
		// The usual case, the placeholder that provisions a family the claim still misses, just
		// served by MetalLB, is decided from the cache alone: its address is about to be
		// created, and the create is the lock on the IP (an address the cache does not show yet
		// makes it fail, and the next pass reads: mayExist). Any other placeholder is retired or
		// handed over on what the pass finds, so a miss in the cache is confirmed by the apiserver.
		settling := kept[fam] == s
		if err := d.lookUpAddress(ctx, &v, ip, !settling); err != nil {
			return v, err
		}
	}
	return v, nil
}

// poolWindow reads MetalLB's count of the class's pool (its status, from the cache) and asks the
// provisioning window for a slot for each placeholder the pass would create (plan.CreatesFor).
// The reconciler returns the slots its plan does not use (releaseSlots).
func (d *Driver) poolWindow(ctx context.Context, v *plan.ProvisionView) error {
	v.Pool, v.MayCreate = map[ipamv1.IPFamily]plan.PoolState{}, map[ipamv1.IPFamily]bool{}
	if v.Claim == nil || v.Class == nil {
		return nil
	}
	name := plan.ParseClassParams(v.Class).Pool
	var pool *metallb.IPAddressPool
	if name != "" {
		pool = &metallb.IPAddressPool{}
		if err := d.client.Get(ctx, types.NamespacedName{Namespace: d.MetalLBNamespace, Name: name}, pool); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			pool = nil
		}
	}
	for _, fam := range v.Claim.Spec.Family.Families() {
		v.Pool[fam] = plan.PoolStateOf(pool, fam)
	}
	claim := types.NamespacedName{Namespace: v.Claim.Namespace, Name: v.Claim.Name}
	for _, fam := range plan.CreatesFor(*v) {
		v.MayCreate[fam] = d.window.grant(poolFamily{pool: name, fam: fam}, v.NextName[fam], claim, v.Claim.CreationTimestamp.Time, v.Pool[fam])
	}
	return nil
}

// releaseSlots returns the window's slots the pass was granted and made no placeholder with,
// and queues the claim for the families that got none (or takes it out of the queues).
func (d *Driver) releaseSlots(v plan.ProvisionView, p plan.ProvisionPlan, made map[string]bool) {
	key := types.NamespacedName{Namespace: "", Name: ""}
	if ns, name, ok := splitKey(v.ClaimKey); ok {
		key = types.NamespacedName{Namespace: ns, Name: name}
	}
	if v.Claim == nil || v.Class == nil {
		d.window.stopWaiting(key)
		return
	}
	pool := plan.ParseClassParams(v.Class).Pool
	for fam, granted := range v.MayCreate {
		if granted && !made[v.NextName[fam]] {
			d.window.cancel(poolFamily{pool: pool, fam: fam}, v.NextName[fam])
		}
	}
	var pfs []poolFamily
	for _, fam := range p.WaitForSlot {
		pfs = append(pfs, poolFamily{pool: pool, fam: fam})
	}
	d.window.waitFor(key, v.Claim.CreationTimestamp.Time, pfs...)
}

// confirmExpected completes the cache's view with this driver's own recent writes: an address or
// placeholder it created for the claim that the cache does not show yet is read from the apiserver,
// so that no pass creates a second one (docs/design.md#a-view-that-includes-your-own-writes).
func (d *Driver) confirmExpected(ctx context.Context, v *plan.ProvisionView) error {
	uid := string(v.Claim.UID)
	for _, fam := range v.Claim.Spec.Family.Families() {
		expectedAddress, _ := d.expect.Pending(addressKey(uid, string(fam)), v.Now)
		if v.Have[fam] {
			d.expect.Observed(addressKey(uid, string(fam)))
		} else if name, ok := d.expect.Pending(addressKey(uid, string(fam)), v.Now); ok {
			var a ipamv1.IPAddress
			switch err := d.reader.Get(ctx, types.NamespacedName{Name: name}, &a); {
			case err == nil && driverkit.BoundTo(&a, v.Claim) && a.DeletionTimestamp == nil:
				v.Have[fam] = true
				continue
			case err == nil || apierrors.IsNotFound(err):
				d.expect.Observed(addressKey(uid, string(fam)))
			default:
				return err
			}
		}
		seen := false
		for _, s := range v.Placeholders {
			if s.Labels[plan.LabelClaimUID] == uid && s.Labels[plan.LabelFamily] == string(fam) {
				seen = true
			}
		}
		if seen {
			d.expect.Observed(placeholderKey(uid, string(fam)))
		} else if name, ok := d.expect.Pending(placeholderKey(uid, string(fam)), v.Now); ok {
			var s corev1.Service
			switch err := d.reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: name}, &s); {
			case err == nil && s.Labels[plan.LabelRole] == plan.RoleProvisioning && s.DeletionTimestamp == nil:
				v.Placeholders = append(v.Placeholders, &s)
			case err == nil && s.Labels[plan.LabelRole] == plan.RoleHold && s.Labels[plan.LabelAddress] == expectedAddress:
				// Settled already: its address (this claim's) is on the way into the cache.
				v.PlaceholderExpected[fam] = true
			case err == nil || apierrors.IsNotFound(err):
				d.expect.Observed(placeholderKey(uid, string(fam)))
			default:
				return err
			}
		}
		if !v.Have[fam] {
			name, err := d.freePlaceholderName(ctx, uid, fam)
			if err != nil {
				return err
			}
			v.NextName[fam] = name
		}
	}
	return nil
}

// freePlaceholderName is the first deterministic placeholder name of the claim's family no
// Service in the cache has (a taken one holds another claim's address since a handover).
func (d *Driver) freePlaceholderName(ctx context.Context, uid string, fam ipamv1.IPFamily) (string, error) {
	for n := 0; n < 100; n++ {
		name := plan.ProvisioningName(uid, fam, n)
		var s corev1.Service
		err := d.client.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
		if _, relabelled := d.expect.Pending(relabelledKey(string(s.UID)), d.now()); relabelled {
			continue // a hold since this driver's relabel, whatever the cache still shows
		}
		if s.Labels[plan.LabelRole] == plan.RoleProvisioning && s.Labels[plan.LabelClaimUID] == uid {
			return name, nil // ours, still provisioning: a create finds it exists
		}
	}
	return "", fmt.Errorf("claim uid %s has 100 placeholders for %s: giving up", uid, fam)
}

// lookUpAddress finds the IPAddress of a served placeholder's IP. One the cache does not have
// may have been created a moment ago (by this driver or an admin): confirm asks the apiserver
// then, and so does a pass after a create of it was refused (mayExist), or while this
// driver's own create of it awaits the cache (its hold expected).
func (d *Driver) lookUpAddress(ctx context.Context, v *plan.ProvisionView, ip netip.Addr, confirm bool) error {
	name := ipamv1.AddressName(ip)
	var a ipamv1.IPAddress
	err := d.client.Get(ctx, types.NamespacedName{Name: name}, &a)
	if apierrors.IsNotFound(err) && (confirm || d.mayExist(name, v.Now)) {
		err = d.reader.Get(ctx, types.NamespacedName{Name: name}, &a)
	}
	switch {
	case apierrors.IsNotFound(err):
		d.expect.Observed(existsKey(name))
		return nil
	case err != nil:
		return err
	}
	d.expect.Observed(existsKey(name))
	// As this driver last wrote it.
	fresh, err := d.freshAddress(ctx, &a)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	v.Addresses[name] = fresh
	holds, err := d.holdsOf(ctx, name)
	if err != nil {
		return err
	}
	if len(holds) > 0 {
		v.HoldOf[name] = holds[0].Name
	} else if expected, ok := d.expect.Pending(holdKey(name), v.Now); ok {
		v.HoldOf[name] = expected
	}
	return nil
}

// mayExist: the cache may not show an IPAddress of this name that exists (a create of it was
// refused, or this driver created it and its hold is expected).
func (d *Driver) mayExist(name string, now time.Time) bool {
	if _, ok := d.expect.Pending(existsKey(name), now); ok {
		return true
	}
	_, ok := d.expect.Pending(holdKey(name), now)
	return ok
}

// notRelabelled drops the provisioning placeholders this driver has made holds of since the
// cache's copy: the cache may still show one as provisioning (even as not served yet, when the
// pass that settled it read it from the apiserver), and a pass deciding from that copy would
// delete the hold of a reserved IP (docs/design.md#a-view-that-includes-your-own-writes).
func (d *Driver) notRelabelled(placeholders []*corev1.Service, now time.Time) []*corev1.Service {
	out := placeholders[:0:0]
	for _, s := range placeholders {
		if rv, ok := d.expect.Pending(relabelledKey(string(s.UID)), now); ok {
			if !freshness.RVAtLeast(s.ResourceVersion, rv) {
				continue
			}
			d.expect.Observed(relabelledKey(string(s.UID)))
		}
		out = append(out, s)
	}
	return out
}
