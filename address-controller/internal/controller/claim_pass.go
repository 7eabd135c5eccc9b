package controller

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/index"
)

// One pass over a claim, decided before anything is written (docs/design.md#decide-then-write):
// what the pass reads (the class, the namespace's limit, candidates to bind) and the claimPass it
// decides; the pure rules it applies are in decide.go, the writes in claim_binding.go.

// claimPass is what one pass over a claim decided from a snapshot: the reconciler then
// applies it (apply), writing only what changes.
type claimPass struct {
	sorted claimAddresses
	// plans are the missing families that may still bind, in the claim's order.
	plans []familyPlan
	// className is the class the claim resolved to ("" when unresolved).
	className string
	// wait is why the first waiting family waits.
	wait *waiting
	// finalizer: the claim lacks the core's finalizer.
	finalizer bool
	// stamp is the driver to ask for an address ("" when none is asked for now), and
	// stampClass the class it provisions from (AnnotationResolvedClass).
	stamp, stampClass string
	// unstamp: the class refuses the claim (refusesClaim) and the claim carries a stamp, which
	// goes, so that no driver provisions for it.
	unstamp bool
	// status is the claim's status as it should be if no bind happens; statusChanges says it
	// differs from the claim's.
	status        ipamv1.IPAddressClaimStatus
	statusChanges bool
	// quietFor: the status is left unwritten for this long yet (see quietUntil).
	quietFor time.Duration
	// limit is what the pass asks of a class with a per-namespace limit (nil: nothing, or no
	// limit applies).
	limit *limitAsk
}

// block turns the pass into one that asks for nothing, binds nothing and stamps nothing, and
// whose status says w: the claim's namespace is at its class's limit, or the class refuses it.
func (p *claimPass) block(claim *ipamv1.IPAddressClaim, w *waiting) {
	p.plans, p.stamp, p.stampClass, p.limit, p.quietFor = nil, "", "", nil, 0
	p.wait = w
	p.status = claimStatus(claim, p.className, p.sorted.kept, w)
	p.statusChanges = !equalClaimStatus(&claim.Status, &p.status)
}

// binds reports whether the pass binds an address.
func (p *claimPass) binds() bool {
	return slices.ContainsFunc(p.plans, func(f familyPlan) bool { return len(f.candidates) > 0 })
}

// writes reports whether applying the pass writes anything.
func (p *claimPass) writes() bool {
	return p.finalizer || p.stamp != "" || p.unstamp || p.statusChanges || len(p.sorted.needUID) > 0 || len(p.sorted.surplus) > 0 || p.binds()
}

// decide reads what one pass needs (from the cache, apart from the claim and its addresses,
// which the caller gives) and decides its writes; it writes nothing.
func (r *ClaimReconciler) decide(ctx context.Context, claim *ipamv1.IPAddressClaim, sorted claimAddresses) (claimPass, error) {
	p := claimPass{sorted: sorted, className: claim.Status.ClassName,
		finalizer: !controllerutil.ContainsFinalizer(claim, ipamv1.FinalizerClaim)}
	// What a previous leader or process bound counts as progress too (classProgress).
	r.sawBound(claim)
	// Bind the missing families, unless the claim was Bound before: a Lost claim keeps
	// waiting for its own addresses instead of silently taking new ones.
	var class *ipamv1.IPAddressClass // of the families that bind or ask the driver
	asking := 0
	for _, fam := range claim.Spec.Family.Families() {
		if sorted.kept[fam] != nil || !mayBind(claim) {
			continue
		}
		plan, err := r.planFamily(ctx, claim, fam, keptClass(claim, sorted.kept))
		if err != nil {
			return claimPass{}, err
		}
		plan.family = fam
		if plan.class != "" {
			p.className = plan.class
		}
		w := plan.wait
		if refusesClaim(w) {
			// The class refuses the claim itself (its namespace, or a family it does not serve):
			// no family binds or asks a driver, and a stamp made before goes. The class is not
			// recorded: the claim resolves afresh once a class serves it (a new default class).
			p.className = claim.Status.ClassName
			p.block(claim, w)
			_, stamped := claim.Annotations[ipamv1.AnnotationProvisioner]
			_, resolved := claim.Annotations[ipamv1.AnnotationResolvedClass]
			p.unstamp = stamped || resolved
			return p, nil
		}
		if len(plan.candidates) > 0 || w == nil && plan.provisioner != "" {
			class = plan.classObj
			asking++
		}
		switch {
		case len(plan.candidates) > 0:
			p.plans = append(p.plans, plan)
		case w == nil && plan.provisioner != "":
			// Nothing to bind: the driver must provision.
			if claim.Annotations[ipamv1.AnnotationProvisioner] != plan.provisioner ||
				claim.Annotations[ipamv1.AnnotationResolvedClass] != plan.class {
				p.stamp, p.stampClass = plan.provisioner, plan.class
			}
			w = &waiting{ipamv1.ReasonWaitingForAddress,
				fmt.Sprintf("waiting for driver %s to provision an %s address of class %s", plan.provisioner, fam, plan.class)}
		}
		if p.wait == nil {
			p.wait = w
		}
	}
	// A stamp for another class than the one resolved now (the claim already has an address of
	// that class, or the stamped class is gone) is rewritten, also when nothing is asked of a
	// driver this pass: a driver provisions from the stamp.
	if stamped, by := claim.Annotations[ipamv1.AnnotationResolvedClass], claim.Annotations[ipamv1.AnnotationProvisioner]; p.stamp == "" &&
		stamped != "" && by != "" && p.className != "" && stamped != p.className {
		p.stamp, p.stampClass = by, p.className
	}
	p.status = claimStatus(claim, p.className, sorted.kept, p.wait)
	p.statusChanges = !equalClaimStatus(&claim.Status, &p.status)
	if class != nil {
		if p.limit = askOfLimit(claim, class, asking); p.limit != nil {
			// Over the limit by the cache's count: the claim waits (no read of the apiserver for
			// a claim that keeps waiting). Within it, the reconciler counts again, live, before
			// it writes.
			w, err := r.limitWait(ctx, claim, p.limit, false)
			if err != nil {
				return claimPass{}, err
			}
			if w != nil {
				p.block(claim, w)
				return p, nil
			}
		}
	}
	if p.statusChanges && mayStayQuiet(claim, &p.status) {
		lastBind, err := r.lastBind(ctx, p.status.ClassName, claim.Spec.Family.Families())
		if err != nil {
			return claimPass{}, err
		}
		if until, ok := quietUntil(claim, &p.status, r.quietWait(), lastBind); ok && r.now().Before(until) {
			p.status, p.statusChanges, p.quietFor = claim.Status, false, until.Sub(r.now())
		}
	}
	return p, nil
}

// familyPlan is how one missing family of a claim may be bound.
type familyPlan struct {
	// class is the class the claim resolved to ("" when unresolved).
	class string
	// candidates to bind, in order: the named address, or the Available ones of the class.
	candidates []*ipamv1.IPAddress
	// family is the family the plan is for.
	family ipamv1.IPFamily
	// provisioner is the driver to ask when no candidate binds ("" for a named address).
	provisioner string
	// wait is why nothing can be bound now (nil when candidates or the driver may serve).
	wait *waiting
	// classObj is the resolved class (nil when unresolved).
	classObj *ipamv1.IPAddressClass
}

// planFamily finds, from the cache, what one missing family of a claim can bind: the address
// named by spec.addressName, or the Available addresses of the claim's class; otherwise the
// driver to ask, or why the claim waits. It writes nothing.
func (r *ClaimReconciler) planFamily(ctx context.Context, claim *ipamv1.IPAddressClaim, fam ipamv1.IPFamily, bound string) (familyPlan, error) {
	var named *ipamv1.IPAddress
	if claim.Spec.AddressName != "" {
		named = &ipamv1.IPAddress{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Spec.AddressName}, named); err != nil {
			if apierrors.IsNotFound(err) {
				return familyPlan{wait: addressNotFound(claim.Spec.AddressName)}, nil
			}
			return familyPlan{}, err
		}
		if reservedElsewhere(claim, named) {
			// Nothing of it is revealed, its class included: to this claim's tenant it is an
			// address that does not exist (docs/design.md#what-a-tenant-reads-names-no-other-tenant).
			return familyPlan{wait: addressNotFound(claim.Spec.AddressName)}, nil
		}
	}
	labels, err := r.namespaceLabels(ctx, claim.Namespace)
	if err != nil {
		return familyPlan{}, err
	}
	if named != nil && named.Spec.ClaimRef == nil {
		// An Available address of a class this namespace may not use is not this tenant's to
		// see either.
		var of ipamv1.IPAddressClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: named.Spec.ClassName}, &of); {
		case err == nil && namespaceRefusal(&of, claim.Namespace, labels) != "":
			return familyPlan{wait: addressNotFound(claim.Spec.AddressName)}, nil
		case err != nil && !apierrors.IsNotFound(err):
			return familyPlan{}, err
		}
	}
	class, w, err := r.resolveClass(ctx, claim, named, bound)
	if err != nil || class == nil {
		return familyPlan{wait: w}, err
	}
	plan := familyPlan{class: class.Name, classObj: class}
	if why := namespaceRefusal(class, claim.Namespace, labels); why != "" {
		plan.wait = &waiting{ipamv1.ReasonNamespaceNotAllowed, why}
		return plan, nil
	}
	if cond := meta.FindStatusCondition(class.Status.Conditions, ipamv1.ConditionAccepted); cond != nil && cond.Status == metav1.ConditionFalse {
		plan.wait = &waiting{ipamv1.ReasonClassNotAccepted,
			fmt.Sprintf("class %s is not accepted by its driver (%s: %s)", class.Name, cond.Reason, cond.Message)}
		return plan, nil
	}
	if w := familyRefusal(claim, class); w != nil {
		plan.wait = w
		return plan, nil
	}
	if named != nil {
		if w := checkNamedAddress(claim, named, class.Name, fam); w != nil {
			plan.wait = w
			return plan, nil
		}
		plan.candidates = []*ipamv1.IPAddress{named}
		return plan, nil
	}
	var candidates ipamv1.IPAddressList
	if err := r.Client.List(ctx, &candidates, client.MatchingFields{index.AddressBindable: index.BindableKey(class.Name, fam)}); err != nil {
		return familyPlan{}, err
	}
	orderAddresses(candidates.Items)
	for i := range candidates.Items {
		a := &candidates.Items[i]
		if a.Spec.ClaimRef != nil || a.DeletionTimestamp != nil || !addressUsable(a) ||
			meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict) {
			continue
		}
		plan.candidates = append(plan.candidates, a)
	}
	plan.provisioner = class.Spec.Provisioner
	return plan, nil
}

// checkNamedAddress says why the address a claim names cannot be bound to it, or nil.
func checkNamedAddress(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress, class string, fam ipamv1.IPFamily) *waiting {
	if reservedElsewhere(claim, a) {
		return addressNotFound(a.Name)
	}
	if got, _ := addressFamily(a); got != fam {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is %s but the claim requests %s", a.Name, got, fam)}
	}
	if a.Spec.ClassName != class {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s belongs to class %s, not %s", a.Name, a.Spec.ClassName, class)}
	}
	if a.DeletionTimestamp != nil {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is being deleted", a.Name)}
	}
	if ref := a.Spec.ClaimRef; ref != nil && ref.Name != claim.Name {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf("IPAddress %s is bound to claim %s/%s", a.Name, ref.Namespace, ref.Name)}
	}
	if !bindableBy(claim, a) {
		return &waiting{ipamv1.ReasonAddressUnusable, fmt.Sprintf(
			"IPAddress %s is retained for an earlier claim named %s/%s, not this one; if it should be yours, ask an admin to hand it to this claim (remove spec.claimRef.uid on the IPAddress)",
			a.Name, claim.Namespace, claim.Name)}
	}
	return nil
}

// addressNotFound is what a claim naming an address it cannot see reads: the address does not
// exist, or it is reserved for another namespace, or it is of a class the claim's namespace may
// not use. The three read alike, so that naming addresses one by one tells a tenant nothing about
// the addresses of others.
func addressNotFound(name string) *waiting {
	return &waiting{ipamv1.ReasonAddressNotFound, fmt.Sprintf(
		"IPAddress %s does not exist or is not available to claims of this namespace; name another address, or recreate the claim without addressName", name)}
}

// reservedElsewhere: the address's claimRef names another namespace (Bound, Released, or set
// aside by an admin for a claim there): none of its facts is the claim's tenant's to read.
func reservedElsewhere(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) bool {
	ref := a.Spec.ClaimRef
	return ref != nil && ref.Namespace != claim.Namespace
}

// namespaceLabels are the labels of a namespace, from the cache (none when it is not there).
func (r *ClaimReconciler) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return ns.Labels, nil
}

// resolveClass finds the claim's class: spec.className, else the sticky status.className, else
// the class of the address it names, else that of an address it already has for another family,
// else the class it resolved to when it asked a driver (AnnotationResolvedClass, sticky until the
// status records it), else the default class. A class known only from that annotation that is
// gone or going is resolved again, since nothing of it is bound yet.
func (r *ClaimReconciler) resolveClass(ctx context.Context, claim *ipamv1.IPAddressClaim, named *ipamv1.IPAddress, bound string) (*ipamv1.IPAddressClass, *waiting, error) {
	name := claim.Spec.ClassName
	if name == "" {
		name = claim.Status.ClassName
	}
	if name == "" && named != nil {
		name = named.Spec.ClassName
	}
	if name == "" {
		name = bound
	}
	if stamped := claim.Annotations[ipamv1.AnnotationResolvedClass]; name == "" && stamped != "" {
		var class ipamv1.IPAddressClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: stamped}, &class); {
		case err == nil && class.DeletionTimestamp == nil:
			return &class, nil, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, nil, err
		}
	}
	if name == "" {
		var classes ipamv1.IPAddressClassList
		if err := r.Client.List(ctx, &classes); err != nil {
			return nil, nil, err
		}
		def, others := pickMarkedClass(classes.Items, ipamv1.AnnotationDefaultClass)
		if def == nil {
			return nil, &waiting{ipamv1.ReasonNoDefaultClass,
				"the claim names no class and no IPAddressClass is marked " + ipamv1.AnnotationDefaultClass + `: "true"`}, nil
		}
		if len(others) == 0 {
			// Resolved: a later recurrence is said again.
			r.announcer().Clear(claim, "MultipleDefaultClasses")
		} else {
			r.announcer().Say(claim, nil, corev1.EventTypeWarning, "MultipleDefaultClasses", "ResolveClass",
				fmt.Sprintf("several classes are marked default (%s, %s); using %s, the newest. Unmark all but one.",
					def.Name, strings.Join(others, ", "), def.Name))
		}
		return def, nil, nil
	}
	var class ipamv1.IPAddressClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &class); err != nil {
		if apierrors.IsNotFound(err) {
			r.progress.forget(name)
			return nil, &waiting{ipamv1.ReasonClassNotFound,
				fmt.Sprintf("IPAddressClass %s does not exist; the claim binds once it is created", name)}, nil
		}
		return nil, nil, err
	}
	if class.DeletionTimestamp != nil {
		r.progress.forget(name)
		return nil, &waiting{ipamv1.ReasonClassNotFound, fmt.Sprintf("IPAddressClass %s is being deleted", name)}, nil
	}
	return &class, nil, nil
}

// lockLimit takes the lock of a namespace and class (one of a fixed set of stripes) and returns
// its unlock.
func (r *ClaimReconciler) lockLimit(namespace, class string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + class))
	m := &r.limitLocks[h.Sum32()%uint32(len(r.limitLocks))]
	m.Lock()
	return m.Unlock
}

// limitWait counts what the claim's namespace holds of the class ask names (decideLimit), from
// the cache or, live, from the apiserver, and says why the claim may not have what it asks for
// (nil when it may).
func (r *ClaimReconciler) limitWait(ctx context.Context, claim *ipamv1.IPAddressClaim, ask *limitAsk, live bool) (*waiting, error) {
	var claims ipamv1.IPAddressClaimList
	var addrs []ipamv1.IPAddress
	if live {
		if err := r.Reader.List(ctx, &claims, client.InNamespace(claim.Namespace)); err != nil {
			return nil, err
		}
		for _, c := range claims.Items {
			if c.UID == claim.UID && c.Annotations[ipamv1.AnnotationResolvedClass] == ask.class &&
				c.Annotations[ipamv1.AnnotationProvisioner] != "" {
				return nil, nil // stamped by an earlier pass the cache does not show yet: counted then
			}
		}
		var err error
		if addrs, err = liveAddresses(ctx, r.Reader, claim.Namespace, ""); err != nil {
			return nil, err
		}
	} else {
		// Read only: no copies.
		if err := r.Client.List(ctx, &claims, client.InNamespace(claim.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		var list ipamv1.IPAddressList
		if err := r.Client.List(ctx, &list, client.MatchingFields{addressByClassNamespace: classNamespaceKey(ask.class, claim.Namespace)},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		addrs = list.Items
	}
	return decideLimit(claim, ask, addrs, claims.Items), nil
}

// sawBound feeds classProgress from a claim seen Bound: its Bound condition's transition time,
// never later than this controller's clock (a previous leader's clock may run ahead).
func (r *ClaimReconciler) sawBound(claim *ipamv1.IPAddressClaim) {
	cond := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.ConditionBound)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return
	}
	at := cond.LastTransitionTime.Time
	if now := r.now(); at.After(now) {
		at = now
	}
	r.progress.saw(claim.Status.ClassName, boundFamilies(claim), at)
}

// lastBind is when a claim of class last became Bound with every one of families
// (classProgress), seeding the class from the cache's Bound claims on its first use.
func (r *ClaimReconciler) lastBind(ctx context.Context, class string, families []ipamv1.IPFamily) (time.Time, error) {
	err := r.progress.seed(class, func() error {
		var claims ipamv1.IPAddressClaimList
		// Read only, once per class and process: no copy of every claim.
		if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		for i := range claims.Items {
			if c := &claims.Items[i]; c.Status.ClassName == class {
				r.sawBound(c)
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return r.progress.lastBind(class, families), nil
}

func (r *ClaimReconciler) quietWait() time.Duration {
	switch {
	case r.QuietWait < 0:
		return 0 // off
	case r.QuietWait > 0:
		return r.QuietWait
	}
	return quietWait
}

// claimStatus is the status the claim should have with the addresses it keeps: decideClaimStatus
// applied to the claim's status (class, phase, addresses, Bound condition).
// keptClass is the class of the claim's kept addresses ("" when none), in family order.
func keptClass(claim *ipamv1.IPAddressClaim, kept map[ipamv1.IPFamily]*ipamv1.IPAddress) string {
	for _, f := range claim.Spec.Family.Families() {
		if a := kept[f]; a != nil {
			return a.Spec.ClassName
		}
	}
	return ""
}

func claimStatus(claim *ipamv1.IPAddressClaim, className string, kept map[ipamv1.IPFamily]*ipamv1.IPAddress, wait *waiting) ipamv1.IPAddressClaimStatus {
	out := decideClaimStatus(claim, kept, wait)
	st := *claim.Status.DeepCopy()
	st.Phase = out.phase
	st.Addresses = out.addresses
	if className != "" {
		st.ClassName = className
	}
	if st.ClassName == "" && out.phase == ipamv1.ClaimBound {
		// Bound without a status written before (quietUntil): the class is the one the claim
		// names, else its addresses', else the one it resolved to when it asked its driver.
		st.ClassName = cmp.Or(claim.Spec.ClassName, keptClass(claim, kept), claim.Annotations[ipamv1.AnnotationResolvedClass])
	}
	status := metav1.ConditionFalse
	if out.phase == ipamv1.ClaimBound {
		status = metav1.ConditionTrue
	}
	// Ready repeats Bound for the tools that wait on that type; both in the one status write.
	for _, t := range []string{ipamv1.ConditionBound, ipamv1.ConditionReady} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: out.reason, Message: out.message,
			ObservedGeneration: claim.Generation,
		})
	}
	st.ObservedGeneration = claim.Generation
	st.UsedBy = claimUsers(claim, kept)
	return st
}

// claimUsers lists the objects the driver reports the claim's kept addresses attached to, once
// each, in the claim's family order; an attachment in another namespace is left out, as a claim
// tells its tenant nothing of other namespaces.
func claimUsers(claim *ipamv1.IPAddressClaim, kept map[ipamv1.IPFamily]*ipamv1.IPAddress) []ipamv1.ClaimUser {
	var out []ipamv1.ClaimUser
	for _, f := range claim.Spec.Family.Families() {
		a := kept[f]
		if a == nil || a.Status.AttachedTo == nil || a.Status.AttachedTo.Namespace != claim.Namespace {
			continue
		}
		u := ipamv1.ClaimUser{Kind: a.Status.AttachedTo.Kind, Name: a.Status.AttachedTo.Name}
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}
