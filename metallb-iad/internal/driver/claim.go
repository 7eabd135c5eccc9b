package driver

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/index"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

func (d *Driver) setupClaims(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("metallb-iad-claim").
		For(&ipamv1.IPAddressClaim{}).
		// A provisioning placeholder that MetalLB served wakes its claim.
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(d.claimOfPlaceholder)).
		// An address created or bound for the claim settles it.
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if ref := o.(*ipamv1.IPAddress).Spec.ClaimRef; ref != nil {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
			}
			return nil
		})).
		// A class that becomes Accepted releases the claims waiting for it.
		Watches(&ipamv1.IPAddressClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			reqs, _ := index.ClaimsWaitingFor(ctx, d.client, o.GetName())
			return reqs
		})).
		WithOptions(d.controllerOptions()).
		Complete(reconcile.Func(d.reconcileClaim))
}

func (d *Driver) claimOfPlaceholder(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != d.Namespace || o.GetLabels()[LabelRole] != RoleProvisioning {
		return nil
	}
	ns, name, ok := splitKey(o.GetAnnotations()[AnnotationClaim])
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// reconcileClaim provisions the families a stamped claim lacks: a placeholder Service asks
// MetalLB for an address of the class's pool; once served, the placeholder is pinned to it, the
// IPAddress is created pre-bound to the claim, and the placeholder becomes the address's hold.
func (d *Driver) reconcileClaim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var claim ipamv1.IPAddressClaim
	if err := d.client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, d.retireProvisioning(ctx, req.Namespace+"/"+req.Name, "", nil)
		}
		return reconcile.Result{}, err
	}
	if claim.Annotations[ipamv1.AnnotationProvisioner] != Provisioner || claim.DeletionTimestamp != nil ||
		claim.Status.ClassName == "" || claim.Status.Phase == ipamv1.ClaimBound || claim.Status.Phase == ipamv1.ClaimLost {
		d.firstSeen.Delete(claim.UID)
		// Nothing to provision (any more): placeholders still waiting for MetalLB would hold
		// addresses nobody asked for.
		return reconcile.Result{}, d.retireProvisioning(ctx, claim.Namespace+"/"+claim.Name, claim.UID, nil)
	}
	d.firstSeen.LoadOrStore(claim.UID, time.Now())
	var class ipamv1.IPAddressClass
	if err := d.client.Get(ctx, types.NamespacedName{Name: claim.Status.ClassName}, &class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if class.Spec.Provisioner != Provisioner || !meta.IsStatusConditionTrue(class.Status.Conditions, ipamv1.ConditionAccepted) {
		return reconcile.Result{}, nil // the core tells the tenant why
	}
	var bound ipamv1.IPAddressList
	if err := d.client.List(ctx, &bound, client.MatchingFields{index.AddressByClaim: index.ClaimKey(claim.Namespace, claim.Name)}); err != nil {
		return reconcile.Result{}, err
	}
	have := map[ipamv1.IPFamily]bool{}
	for _, a := range bound.Items {
		if ref := a.Spec.ClaimRef; ref.UID == "" || ref.UID == claim.UID {
			if ip, err := ipamv1.ParseCanonical(a.Spec.Address); err == nil {
				have[ipamv1.FamilyOf(ip)] = true
			}
		}
	}
	var placeholders corev1.ServiceList
	if err := d.client.List(ctx, &placeholders, client.InNamespace(d.Namespace),
		client.MatchingFields{indexProvisioningFor: string(claim.UID)}); err != nil {
		return reconcile.Result{}, err
	}
	if err := d.retireProvisioning(ctx, claim.Namespace+"/"+claim.Name, claim.UID, have); err != nil {
		return reconcile.Result{}, err
	}
	var requeue time.Duration
	for _, fam := range claim.Spec.Family.Families() {
		if have[fam] {
			continue
		}
		var p *corev1.Service
		for i := range placeholders.Items {
			if placeholders.Items[i].Labels[LabelFamily] == string(fam) && placeholders.Items[i].DeletionTimestamp == nil {
				p = &placeholders.Items[i]
				break
			}
		}
		if p == nil {
			if err := d.createProvisioning(ctx, &claim, &class, fam); err != nil {
				return reconcile.Result{}, err
			}
			continue
		}
		wait, err := d.settleProvisioning(ctx, &claim, &class, fam, p)
		if err != nil {
			return reconcile.Result{}, err
		}
		if wait > 0 && (requeue == 0 || wait < requeue) {
			requeue = wait
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// retireProvisioning ends the provisioning placeholders of a claim that no longer needs them: the
// claim is gone or settled (have == nil: all of them), or has its family already (have[family]).
// A placeholder MetalLB already served whose IPAddress exists becomes that address's hold (a
// crash between creating the address and relabelling); any other one is deleted, returning its
// address to the pool.
func (d *Driver) retireProvisioning(ctx context.Context, claimKey string, uid types.UID, have map[ipamv1.IPFamily]bool) error {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingFields{indexProvisioningForKey: claimKey}); err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if uid != "" && p.Labels[LabelClaimUID] == string(uid) && have != nil && !have[ipamv1.IPFamily(p.Labels[LabelFamily])] {
			continue // still needed
		}
		if ips := IngressIPs(p); len(ips) > 0 {
			var a ipamv1.IPAddress
			if err := d.client.Get(ctx, types.NamespacedName{Name: ipamv1.AddressName(ips[0])}, &a); err == nil {
				if holds, err := d.holdsOf(ctx, a.Name); err == nil && len(holds) == 0 {
					patch := client.MergeFrom(p.DeepCopy())
					p.Labels[LabelRole] = RoleHold
					p.Labels[LabelAddress] = a.Name
					delete(p.Labels, LabelClaimUID)
					delete(p.Labels, LabelFamily)
					if err := d.client.Patch(ctx, p, patch); err != nil {
						return err
					}
					continue
				}
			}
		}
		if err := d.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) createProvisioning(ctx context.Context, claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass, fam ipamv1.IPFamily) error {
	for n := 0; n < 100; n++ {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ProvisioningName(string(claim.UID), fam, n),
				Namespace: d.Namespace,
				Labels:    map[string]string{LabelRole: RoleProvisioning, LabelClaimUID: string(claim.UID), LabelFamily: string(fam)},
				Annotations: map[string]string{
					metallb.AnnotationAddressPool: class.Spec.Parameters[ClassParameterPool],
					AnnotationClaim:               claim.Namespace + "/" + claim.Name,
				},
			},
			Spec: PlaceholderSpec(fam),
		}
		err := d.client.Create(ctx, svc)
		if apierrors.IsAlreadyExists(err) {
			// Taken by an earlier placeholder of this claim that now holds another claim's
			// address, or created by a pass the cache has not shown yet: check which.
			var existing corev1.Service
			if err := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &existing); err != nil {
				return client.IgnoreNotFound(err)
			}
			if existing.Labels[LabelRole] == RoleProvisioning {
				return nil
			}
			continue
		}
		return err
	}
	return fmt.Errorf("claim %s/%s has 100 placeholders for %s: giving up", claim.Namespace, claim.Name, fam)
}

// settleProvisioning moves a provisioning placeholder forward once MetalLB served it. It
// returns how long to wait before looking again when MetalLB has not served it yet.
func (d *Driver) settleProvisioning(ctx context.Context, claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass,
	fam ipamv1.IPFamily, p *corev1.Service) (time.Duration, error) {
	var ip netip.Addr
	for _, a := range IngressIPs(p) {
		if ipamv1.FamilyOf(a) == fam {
			ip = a
		}
	}
	if !ip.IsValid() {
		return d.nudgeIfStuck(ctx, p)
	}
	// 1. Pin the placeholder, so MetalLB keeps the address whatever happens next.
	if p.Annotations[metallb.AnnotationLoadBalancerIPs] != ip.String() {
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[metallb.AnnotationLoadBalancerIPs] = ip.String()
		if err := d.client.Patch(ctx, p, patch); err != nil {
			return 0, err
		}
	}
	// 2. Create the IPAddress, pre-bound to the claim. Its name is the lock on the IP.
	name := ipamv1.AddressName(ip)
	policy := class.Spec.ReclaimPolicy
	if policy == "" {
		policy = ipamv1.ReclaimRetain
	}
	addr := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{Finalizer}},
		Spec: ipamv1.IPAddressSpec{
			Address: ip.String(), ClassName: class.Name, ReclaimPolicy: policy,
			ClaimRef: &ipamv1.ClaimReference{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	err := d.client.Create(ctx, addr)
	switch {
	case err == nil:
		d.recorder.Eventf(claim, addr, corev1.EventTypeNormal, "Provisioned", "Provision",
			"reserved %s from MetalLB pool %s as IPAddress %s", ip, class.Spec.Parameters[ClassParameterPool], name)
		if t, ok := d.firstSeen.Load(claim.UID); ok {
			d.Metrics.served.Observe(time.Since(t.(time.Time)).Seconds())
		}
	case apierrors.IsAlreadyExists(err):
		// Created by an earlier pass, or the IP already has an IPAddress of someone else's:
		// either way the placeholder now holds that address, and in the second case the claim
		// gets a fresh placeholder on the next pass.
	default:
		return 0, err
	}
	// 3. The placeholder becomes the address's hold.
	patch := client.MergeFrom(p.DeepCopy())
	p.Labels[LabelRole] = RoleHold
	p.Labels[LabelAddress] = name
	delete(p.Labels, LabelClaimUID)
	delete(p.Labels, LabelFamily)
	return 0, d.client.Patch(ctx, p, patch)
}

// nudgeIfStuck touches a placeholder MetalLB has not served for a while: MetalLB does not retry
// a failed allocation by itself until some other Service is deleted.
func (d *Driver) nudgeIfStuck(ctx context.Context, p *corev1.Service) (time.Duration, error) {
	last := p.CreationTimestamp.Time
	if v, err := time.Parse(time.RFC3339Nano, p.Annotations[AnnotationNudge]); err == nil && v.After(last) {
		last = v
	}
	// Back off for placeholders stuck for long (an exhausted pool): a quarter of their age,
	// at most five minutes between nudges.
	every := max(d.NudgeAfter, min(time.Since(p.CreationTimestamp.Time)/4, 5*time.Minute))
	if wait := every - time.Since(last); wait > 0 {
		return wait, nil
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationNudge] = time.Now().UTC().Format(time.RFC3339Nano)
	if err := d.client.Patch(ctx, p, patch); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	return every, nil
}

func splitKey(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}
