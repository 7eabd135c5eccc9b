package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
)

// This file holds the decisions, as pure functions of the objects involved; the reconcilers
// only read, call these, and patch the difference.

// pickMarkedClass returns the class carrying annotation="true" that wins when several do (the
// newest, then the lowest name, as Kubernetes picks a default StorageClass), and the names of
// the others so marked. Classes being deleted do not count.
func pickMarkedClass(classes []ipamv1.IPAddressClass, annotation string) (*ipamv1.IPAddressClass, []string) {
	var marked []*ipamv1.IPAddressClass
	for i := range classes {
		c := &classes[i]
		if c.DeletionTimestamp == nil && c.Annotations[annotation] == "true" {
			marked = append(marked, c)
		}
	}
	if len(marked) == 0 {
		return nil, nil
	}
	slices.SortFunc(marked, func(a, b *ipamv1.IPAddressClass) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var others []string
	for _, c := range marked[1:] {
		others = append(others, c.Name)
	}
	return marked[0], others
}

// claimAddresses is the sorting of the addresses whose claimRef names a claim.
type claimAddresses struct {
	// kept is the address bound for each requested family.
	kept map[ipamv1.IPFamily]*ipamv1.IPAddress
	// surplus are bound to the claim but not kept (a second address for a family, or a family
	// the claim does not request): their claimRef is cleared.
	surplus []*ipamv1.IPAddress
	// needUID are kept addresses whose claimRef lacks the claim's uid.
	needUID []*ipamv1.IPAddress
}

// sortClaimAddresses decides which of the addresses referencing claim (by namespace/name) it
// keeps. Addresses carrying the uid of an older claim of the same name are ignored: they are
// not this claim's. For each family the address already in the claim's status wins (a Bound
// claim's addresses never change), else the oldest, so that a race between two binds always
// ends the same way.
func sortClaimAddresses(claim *ipamv1.IPAddressClaim, addrs []ipamv1.IPAddress) claimAddresses {
	out := claimAddresses{kept: map[ipamv1.IPFamily]*ipamv1.IPAddress{}}
	wanted := map[ipamv1.IPFamily]bool{}
	for _, f := range claim.Spec.Family.Families() {
		wanted[f] = true
	}
	mine := make([]*ipamv1.IPAddress, 0, len(addrs))
	for i := range addrs {
		a := &addrs[i]
		ref := a.Spec.ClaimRef
		if ref == nil || ref.Namespace != claim.Namespace || ref.Name != claim.Name {
			continue
		}
		if ref.UID != "" && ref.UID != claim.UID {
			continue
		}
		mine = append(mine, a)
	}
	inStatus := func(a *ipamv1.IPAddress) bool {
		return slices.ContainsFunc(claim.Status.Addresses, func(c ipamv1.ClaimedAddress) bool { return c.Name == a.Name })
	}
	slices.SortFunc(mine, func(a, b *ipamv1.IPAddress) int {
		if sa, sb := inStatus(a), inStatus(b); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, a := range mine {
		fam, ok := addressFamily(a)
		if !ok || !wanted[fam] || out.kept[fam] != nil {
			out.surplus = append(out.surplus, a)
			continue
		}
		out.kept[fam] = a
		if a.Spec.ClaimRef.UID == "" {
			out.needUID = append(out.needUID, a)
		}
	}
	return out
}

// bindableBy: claim may bind a: the address is unbound, or names the claim by namespace and name
// with the claim's uid or none (an admin pre-bound it before the claim existed). A claimRef with
// another uid is an earlier claim's of the same name, a Released address it keeps until an admin
// frees it: a claim created later under that name, in a namespace deleted and created again
// perhaps, is another tenant's (docs/design.md).
func bindableBy(claim *ipamv1.IPAddressClaim, a *ipamv1.IPAddress) bool {
	ref := a.Spec.ClaimRef
	return ref == nil || ref.Namespace == claim.Namespace && ref.Name == claim.Name && (ref.UID == "" || ref.UID == claim.UID)
}

func addressFamily(a *ipamv1.IPAddress) (ipamv1.IPFamily, bool) {
	ip, err := ipamv1.ParseCanonical(a.Spec.Address)
	if err != nil {
		return "", false
	}
	return ipamv1.FamilyOf(ip), true
}

// addressUsable reports whether a bound address counts for its claim: an address the driver
// marked Lost does not.
func addressUsable(a *ipamv1.IPAddress) bool {
	return !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionLost)
}

// claimOutcome is the status a claim should have.
type claimOutcome struct {
	phase     ipamv1.ClaimPhase
	addresses []ipamv1.ClaimedAddress
	reason    string
	message   string
}

// waiting describes why a missing family has no address yet (set by the reconciler for the
// first family that waits).
type waiting struct {
	reason, message string
}

// decideClaimStatus computes the phase, addresses and Bound condition of a claim from the
// addresses it keeps. A claim that was Bound becomes Lost, not Pending, when an address goes
// away or is lost; it is Bound again once every address is back.
func decideClaimStatus(claim *ipamv1.IPAddressClaim, kept map[ipamv1.IPFamily]*ipamv1.IPAddress, wait *waiting) claimOutcome {
	var out claimOutcome
	var missing, lost []string
	for _, f := range claim.Spec.Family.Families() {
		a := kept[f]
		if a == nil {
			missing = append(missing, string(f))
			continue
		}
		if !addressUsable(a) {
			lost = append(lost, a.Name)
		}
		out.addresses = append(out.addresses, ipamv1.ClaimedAddress{Name: a.Name, Address: a.Spec.Address, Family: f})
	}
	wasBound := claim.Status.Phase == ipamv1.ClaimBound || claim.Status.Phase == ipamv1.ClaimLost
	switch {
	case len(missing) == 0 && len(lost) == 0:
		out.phase, out.reason = ipamv1.ClaimBound, ipamv1.ReasonBound
		var ips []string
		for _, a := range out.addresses {
			ips = append(ips, a.Address)
		}
		out.message = "bound to " + strings.Join(ips, ", ")
	case wasBound:
		out.phase, out.reason = ipamv1.ClaimLost, ipamv1.ReasonAddressLost
		if len(lost) > 0 {
			out.message = fmt.Sprintf("address %s is lost (see its conditions)", strings.Join(lost, ", "))
		} else {
			gone := previouslyBound(claim, missing)
			out.message = fmt.Sprintf("the %s address %s is gone; an admin can recreate it with claimRef to this claim, or delete and recreate the claim",
				strings.Join(missing, "/"), gone)
		}
	default:
		out.phase = ipamv1.ClaimPending
		if wait != nil {
			out.reason, out.message = wait.reason, wait.message
		} else {
			out.reason, out.message = ipamv1.ReasonWaitingForAddress, "waiting for an "+strings.Join(missing, " and ")+" address"
		}
	}
	return out
}

// quietWait is how long, by default, a claim that waits only for its driver to provision reads as
// the API server defaults it (phase Pending, nothing else) before the core says what it waits for.
// Most claims are Bound well within it, and so cost one status write instead of two
// (docs/design.md#the-write-budget); meanwhile the provisioner and resolved-class annotations,
// written at once, say which driver and class it waits for, and the status says so once the wait
// lasts.
const quietWait = 2 * time.Minute

// mayStayQuiet: the core has never written the claim's status (no Bound condition, no
// addresses) and want says it waits for nothing but its driver's address (WaitingForAddress,
// nothing bound): the claims quietUntil may leave unwritten for a while.
func mayStayQuiet(claim *ipamv1.IPAddressClaim, want *ipamv1.IPAddressClaimStatus) bool {
	if len(claim.Status.Conditions) > 0 || len(claim.Status.Addresses) > 0 || claim.Status.ClassName != "" ||
		(claim.Status.Phase != "" && claim.Status.Phase != ipamv1.ClaimPending) {
		return false
	}
	cond := meta.FindStatusCondition(want.Conditions, ipamv1.ConditionBound)
	return want.Phase == ipamv1.ClaimPending && len(want.Addresses) == 0 && cond != nil && cond.Reason == ipamv1.ReasonWaitingForAddress
}

// quietCap bounds a quiet wait, in quiet waits after the claim's creation: a driver that keeps
// binding other claims of the class extends a claim's quiet (classProgress), but never past
// this (16 minutes by default), so that a claim the driver passes over, while it serves the
// others, still says what it waits for.
const quietCap = 8

// quietUntil reports until when a claim may keep its status unwritten rather than take want:
// only a claim whose status the core has never written (no Bound condition, no addresses) and
// that waits for nothing but its driver's address (reason WaitingForAddress, nothing bound), for
// wait after its creation or after lastBind, the last time a claim of its class became Bound
// (its driver is working through a backlog), whichever is later, and at most quietCap waits
// after its creation. Any other wait (a class missing or refused, a named address unusable)
// and any bind are written at once.
func quietUntil(claim *ipamv1.IPAddressClaim, want *ipamv1.IPAddressClaimStatus, wait time.Duration, lastBind time.Time) (time.Time, bool) {
	if !mayStayQuiet(claim, want) {
		return time.Time{}, false
	}
	until := claim.CreationTimestamp.Add(wait)
	if busy := lastBind.Add(wait); busy.After(until) {
		until = busy
		if limit := claim.CreationTimestamp.Add(quietCap * wait); until.After(limit) {
			until = limit
		}
	}
	return until, true
}

func previouslyBound(claim *ipamv1.IPAddressClaim, families []string) string {
	var names []string
	for _, a := range claim.Status.Addresses {
		if slices.Contains(families, string(a.Family)) {
			names = append(names, a.Name)
		}
	}
	if len(names) == 0 {
		return "(unknown)"
	}
	return strings.Join(names, ", ")
}

// addressDecision is what the core does with an address on one pass.
type addressDecision struct {
	phase      ipamv1.AddressPhase
	releasedAt *metav1.Time
	// clearClaimRef: releaseDelay has passed; the address becomes Available.
	clearClaimRef bool
	// delete: a Released address of reclaim policy Delete (its claim vanished without the
	// core seeing it go).
	delete bool
	// requeueAfter: when releaseDelay will have passed.
	requeueAfter time.Duration
}

// claimState is what the address controller knows of the claim a claimRef names.
type claimState int

const (
	claimGone        claimState = iota // not found, or a different uid
	claimLive                          // exists with a matching (or not yet recorded) uid
	claimTerminating                   // being deleted: the claim controller releases its addresses
)

// decideAddress derives an address's phase: the driver's conditions (Conflict, then Lost) when
// set, else the binding's (decideBinding). The binding's lifecycle runs either way: a vanished
// claim's address is deleted or released, and a Released address whose class sets releaseDelay
// is unbound when the delay passes; the timer is releasedAt, stored in the object, so it
// survives restarts.
func decideAddress(a *ipamv1.IPAddress, claim claimState, releaseDelay *time.Duration, now time.Time) addressDecision {
	d := decideBinding(a, claim, releaseDelay, now)
	// The driver's conditions decide the phase, not the binding: a Lost or conflicting address
	// whose claim goes is still released (or deleted) beneath them.
	switch {
	case d.delete:
	case meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict):
		d.phase = ipamv1.AddressConflict
	case meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionLost):
		d.phase = ipamv1.AddressLost
	}
	return d
}

// decideBinding is the binding's part of decideAddress: no claimRef is Available, a live claim
// is Bound, a vanished claim is Released (or the address deleted), and releaseDelay returns a
// Released address to Available.
func decideBinding(a *ipamv1.IPAddress, claim claimState, releaseDelay *time.Duration, now time.Time) addressDecision {
	d := addressDecision{phase: a.Status.Phase, releasedAt: a.Status.ReleasedAt}
	switch {
	case a.Spec.ClaimRef == nil:
		d.phase, d.releasedAt = ipamv1.AddressAvailable, nil
		return d
	case claim == claimLive:
		d.phase, d.releasedAt = ipamv1.AddressBound, nil
		return d
	case claim == claimTerminating:
		// The claim controller releases it; until then it stays Bound (also after a spell of a
		// driver condition that has cleared).
		if d.phase != ipamv1.AddressReleased {
			d.phase = ipamv1.AddressBound
		}
		return d
	}
	// The claim is gone, unseen by the claim controller (its finalizer was removed by hand, or
	// a driver pre-bound the address after the claim's release): the reclaim rule applies to
	// what is known of it now.
	if reclaimAction(a, nil, nil) == reclaimDelete {
		d.delete = true
		return d
	}
	d.phase = ipamv1.AddressReleased
	if d.releasedAt == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		d.releasedAt = &t
	}
	if releaseDelay != nil {
		due := d.releasedAt.Add(*releaseDelay)
		if !now.Before(due) {
			d.phase, d.releasedAt, d.clearClaimRef = ipamv1.AddressAvailable, nil, true
		} else {
			d.requeueAfter = due.Sub(now)
		}
	}
	return d
}

// reclaim is what becomes of an address when the claim bound to it goes.
type reclaim int

const (
	// reclaimRelease keeps the address, Released, with its claimRef (the address controller
	// marks it once the claim is gone).
	reclaimRelease reclaim = iota
	// reclaimDelete deletes the address; its driver returns the IP.
	reclaimDelete
)

// reclaimAction decides, for both release paths (the claim's finalizer, and the address
// controller's safety net for a claim that vanished unseen), what becomes of an address whose
// claim goes. A claim auto-claim made for a Service takes its addresses with it whatever the
// policy; when the claim is gone, the address's auto-claim mark (markedAutoClaim) says so.
// Otherwise the address's reclaimPolicy (copied from its class at provisioning, the class's
// when the address has none) decides. claim and class may be nil when gone.
func reclaimAction(a *ipamv1.IPAddress, claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass) reclaim {
	if claim != nil && ownedByService(claim) || claim == nil && markedAutoClaim(a) {
		return reclaimDelete
	}
	policy := a.Spec.ReclaimPolicy
	if policy == "" && class != nil {
		policy = class.Spec.ReclaimPolicy
	}
	if policy == ipamv1.ReclaimDelete {
		return reclaimDelete
	}
	return reclaimRelease
}

// markedAutoClaim: the address carries the auto-claim mark, written by the core while its claim
// is an auto-claim (wantAutoClaimMark) or copied by the driver that pre-bound it to one: what
// the release decides from once the claim is gone.
func markedAutoClaim(a *ipamv1.IPAddress) bool {
	return a.Annotations[ipamv1.AnnotationAutoClaim] == "true"
}

// wantAutoClaimMark is whether an address bound to a live claim should carry the auto-claim
// mark: exactly while the claim is one auto-claim made for a Service (an admin who removes the
// claim's owner reference keeps its addresses, and the mark goes).
func wantAutoClaimMark(claim *ipamv1.IPAddressClaim) bool { return ownedByService(claim) }

// ownedByService: auto-claim made this claim for a Service (its controller), so its addresses
// go with the Service whatever the reclaim policy.
func ownedByService(claim *ipamv1.IPAddressClaim) bool {
	if claim.Annotations[ipamv1.AnnotationAutoClaim] != "true" {
		return false
	}
	ref := metav1.GetControllerOf(claim)
	return ref != nil && ref.Kind == "Service" && ref.APIVersion == "v1"
}

// limitAsk is what a pass asks of a class that limits the addresses per namespace
// (spec.maxAddressesPerNamespace): asking more addresses, through binds or the driver, against
// a limit of max.
type limitAsk struct {
	class  string
	max    int32
	asking int
}

// askOfLimit is the limitAsk of a pass that would bind or have the driver provision asking
// addresses of class for claim; nil when the class sets no limit, nothing is asked, or the claim
// already carries the stamp for this class: it was counted and let through when it was stamped,
// so what it asked for is its own (a lowered limit takes nothing away), and its binds take the
// place of what the driver would provision (docs/design.md).
func askOfLimit(claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass, asking int) *limitAsk {
	if class.Spec.MaxAddressesPerNamespace == nil || asking == 0 || stampedFor(claim, class) {
		return nil
	}
	return &limitAsk{class: class.Name, max: *class.Spec.MaxAddressesPerNamespace, asking: asking}
}

// stampedFor: the core has asked class's driver for the claim's addresses.
func stampedFor(claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass) bool {
	return claim.Annotations[ipamv1.AnnotationProvisioner] == class.Spec.Provisioner &&
		claim.Annotations[ipamv1.AnnotationResolvedClass] == class.Name
}

// namespaceUse counts what a namespace holds of a class, or has asked for: every address of the
// class whose claimRef names the namespace (Bound, Released, or in any other phase, until it is
// gone), and for every other live claim of the namespace that the core stamped for the class and
// that may still bind, the families it has no address for yet (the driver may be provisioning
// them). addrs are the addresses whose claimRef names the namespace, claims its claims; self is
// the claim deciding, whose addresses count but whose own ask is the caller's.
func namespaceUse(namespace, class string, self *ipamv1.IPAddressClaim, addrs []ipamv1.IPAddress, claims []ipamv1.IPAddressClaim) int {
	n := 0
	var ofClass []*ipamv1.IPAddress
	for i := range addrs {
		a := &addrs[i]
		if a.Spec.ClassName == class && a.Spec.ClaimRef != nil && a.Spec.ClaimRef.Namespace == namespace {
			ofClass = append(ofClass, a)
			n++
		}
	}
	for i := range claims {
		c := &claims[i]
		if c.Namespace != namespace || c.UID == self.UID || c.DeletionTimestamp != nil || !mayBind(c) ||
			c.Annotations[ipamv1.AnnotationProvisioner] == "" || c.Annotations[ipamv1.AnnotationResolvedClass] != class {
			continue
		}
		have := map[ipamv1.IPFamily]bool{}
		for _, a := range ofClass {
			if fam, ok := addressFamily(a); ok && driverkit.BoundTo(a, c) {
				have[fam] = true
			}
		}
		for _, f := range c.Spec.Family.Families() {
			if !have[f] {
				n++
			}
		}
	}
	return n
}

// decideLimit says why claim may not have what ask asks for (nil when it may): its namespace
// would then hold more than the class allows per namespace. Released addresses count, so that
// deleting a claim under reclaimPolicy Retain frees nothing: the limit bounds what a tenant
// holds, not how many claims it has (docs/design.md). The message stays the same while the
// claim waits, so that waiting costs no writes.
func decideLimit(claim *ipamv1.IPAddressClaim, ask *limitAsk, addrs []ipamv1.IPAddress, claims []ipamv1.IPAddressClaim) *waiting {
	if ask == nil || namespaceUse(claim.Namespace, ask.class, claim, addrs, claims)+ask.asking <= int(ask.max) {
		return nil
	}
	return &waiting{ipamv1.ReasonAddressLimitReached, fmt.Sprintf(
		"namespace %s may hold %d address(es) of class %s (the class's maxAddressesPerNamespace) and this claim would take it "+
			"past that: Bound and Released addresses count, and those its claims wait for. Deleting a claim frees its address "+
			"only under reclaimPolicy Delete; a Released address counts until an admin frees it. Delete claims you no longer "+
			"need, or ask an admin to free Released addresses or raise the limit",
		claim.Namespace, ask.max, ask.class)}
}

// namespaceRefusal says why a class serves no claim of the namespace ("" when it serves them):
// its namespaceSelector does not match the namespace's labels, or its driver reports that the
// backend serves only other namespaces (driverkit.RefusesNamespace).
func namespaceRefusal(class *ipamv1.IPAddressClass, namespace string, nsLabels map[string]string) string {
	const ask = "use a class offered to this namespace (ask an admin which), and recreate the claim with it"
	switch driverkit.RefusesNamespace(class, namespace, nsLabels) {
	case driverkit.RefusedBySelector:
		return fmt.Sprintf("class %s serves only the namespaces its namespaceSelector matches, and not %s; %s", class.Name, namespace, ask)
	case driverkit.RefusedByInvalidSelector:
		return fmt.Sprintf("class %s has a namespaceSelector that cannot be parsed, so it serves no namespace; an admin fixes the class, or %s", class.Name, ask)
	case driverkit.RefusedByDriver:
		return fmt.Sprintf("the driver of class %s serves its addresses only to some namespaces (the pool's own restriction), and not to %s; %s", class.Name, namespace, ask)
	}
	return ""
}

// familyRefusal says why a claim gets nothing of its class (nil when it may): the class's driver
// reports the families it serves (status.families), and the claim asks for one it does not. The
// whole claim waits, its other family included: a Dual claim half served would hold an address
// for a claim that can never be Bound.
func familyRefusal(claim *ipamv1.IPAddressClaim, class *ipamv1.IPAddressClass) *waiting {
	unserved := driverkit.UnservedFamilies(class, claim)
	if len(unserved) == 0 {
		return nil
	}
	join := func(fs []ipamv1.IPFamily) string {
		var out []string
		for _, f := range fs {
			out = append(out, string(f))
		}
		return strings.Join(out, " and ")
	}
	return &waiting{ipamv1.ReasonFamilyNotServed, fmt.Sprintf(
		"class %s serves %s addresses only, and this claim asks for %s (family %s); recreate the claim with a family the class serves, or use a class that serves %s",
		class.Name, join(class.Status.Families), join(unserved), cmp.Or(claim.Spec.Family, ipamv1.IPv4), join(unserved))}
}

// refusesClaim: the reason is a refusal of the claim itself by its class (its namespace or its
// family), not a wait: the core takes back its stamp, so that no driver provisions for it.
func refusesClaim(w *waiting) bool {
	return w != nil && (w.reason == ipamv1.ReasonNamespaceNotAllowed || w.reason == ipamv1.ReasonFamilyNotServed)
}

// Bounds of the re-check of an object left waiting
// (docs/design.md#nothing-waits-on-an-event-alone): a lost event or a stalled apiserver delays it
// at most this much.
const (
	minRecheck = time.Second
	maxRecheck = time.Minute
)

// recheckAfter is when to look again at an object that has been waiting for waited: about as
// long again (so the checks back off exponentially), between one second and one minute.
func recheckAfter(waited time.Duration) time.Duration {
	return min(max(waited, minRecheck), maxRecheck)
}

// summarizeNames lists the first few names and a count of the rest, for events.
func summarizeNames(names []string, max int) string {
	slices.Sort(names)
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// orderAddresses sorts binding candidates: lowest IP first within a family, so allocation
// from pre-provisioned addresses is predictable.
func orderAddresses(addrs []ipamv1.IPAddress) {
	slices.SortFunc(addrs, func(a, b ipamv1.IPAddress) int {
		ia, _ := ipamv1.ParseCanonical(a.Spec.Address)
		ib, _ := ipamv1.ParseCanonical(b.Spec.Address)
		return cmp.Or(ia.Compare(ib), strings.Compare(a.Name, b.Name))
	})
}

// classMeta is what the core writes on a class's metadata: its protection finalizer, and when
// auto-claim was enabled through it.
type classMeta struct {
	// finalizer: the class lacks the core's finalizer.
	finalizer bool
	// enabledAt is the auto-claim-enabled-at value to write ("" for none to write);
	// clearEnabledAt removes it.
	enabledAt      string
	clearEnabledAt bool
}

// decideClassMeta decides the core's metadata writes on a class that is not being deleted. A
// class marked for auto-claim gets the time the core first saw the mark, stored in the class so
// that every replica and every restart agrees on it. Not the class's creation, even for a class
// the core sees for the first time: it may have been created unmarked and marked while no core
// ran, and the Services that got addresses in between must keep them (the product page: a
// Service that already has an address is skipped); erring late only skips a Service that won an
// address in a race while no core ran. An unmarked class loses the stamp, so that marking it
// again later starts anew.
func decideClassMeta(class *ipamv1.IPAddressClass, finalizer string, now time.Time) classMeta {
	var m classMeta
	seen := slices.Contains(class.Finalizers, finalizer)
	m.finalizer = !seen
	marked := class.Annotations[ipamv1.AnnotationAutoClaimClass] == "true"
	_, stamped := class.Annotations[ipamv1.AnnotationAutoClaimEnabledAt]
	switch {
	case marked && !stamped:
		m.enabledAt = now.UTC().Format(time.RFC3339)
	case !marked && stamped:
		m.clearEnabledAt = true
	}
	return m
}

// autoClaimEnabledAt reads when auto-claim was enabled through a class (false when the core
// has not stamped it yet).
func autoClaimEnabledAt(class *ipamv1.IPAddressClass) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, class.Annotations[ipamv1.AnnotationAutoClaimEnabledAt])
	return t, err == nil
}
