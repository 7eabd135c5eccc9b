package driver

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The provisioning window. Each claim family waiting for an address used to get a placeholder of
// its own at once: on a full pool every waiting claim held a LoadBalancer Service, with a cluster
// IP, outside any tenant's quota, nudged for ever. Now at most plan.ProvisioningSlots placeholders
// of a pool and family wait for MetalLB at a time (the window, and no more than MetalLB counts
// free addresses, but one); a claim beyond them waits its turn with no Service at all, queued
// here oldest first, and is woken when a slot frees: a placeholder of the pool is served, retired
// or gone, or MetalLB's count of the pool changes. A free slot goes to the oldest claims waiting:
// a claim is granted one only when fewer claims older than it wait than there are free slots, so
// a claim that comes later cannot take the slot an older one was woken for. The queue lives in
// memory: after a restart every claim's first pass asks again. A woken claim that finds no slot
// after all queues again. Nothing is granted until the window's informer handlers have been
// given every object the caches held at start (synced): before that, the window does not know
// the placeholders that wait already, and would grant slots the pool does not have.

// poolFamily keys the window: a pool, by name, and a family.
type poolFamily struct {
	pool string
	fam  ipamv1.IPFamily
}

type provisioningWindow struct {
	namespace string
	size      int
	expectFor time.Duration
	now       func() time.Time

	mu sync.Mutex
	// unserved are the provisioning placeholders of the driver's namespace that MetalLB has not
	// served, as the cache shows them: name → the "namespace/name" of their claim.
	unserved map[poolFamily]map[string]string
	// granted are the slots given to a create the cache does not show yet: name → when.
	granted map[poolFamily]map[string]time.Time
	// waiting are the claims that need a placeholder and have no slot, oldest first.
	waiting map[poolFamily]*waitQueue
	// pools is MetalLB's count of each pool, as last seen, and consumed the placeholders of the
	// pool served since: MetalLB's count follows its assignments a moment later, and a slot freed
	// by a serve must not be taken for room the pool still has.
	pools    map[poolFamily]plan.PoolState
	consumed map[poolFamily]int64
	// wakes are the claims to bring back to the claim reconciler (forward), each once
	// (woken). They are kept only while forward runs: a standby replica, whose informers see
	// everything but whose reconcilers do not run, would otherwise pile up wakes nobody takes.
	wakes      []types.NamespacedName
	woken      map[types.NamespacedName]bool
	forwarding bool
	signal     chan struct{}
	// handlersSynced reports whether the window's informer handlers have been given every object
	// of the initial lists (nil: they have); synced latches it.
	handlersSynced func() bool
	synced         bool
}

func newProvisioningWindow(namespace string, size int, expectFor time.Duration, now func() time.Time) *provisioningWindow {
	return &provisioningWindow{namespace: namespace, size: size, expectFor: expectFor, now: now,
		unserved: map[poolFamily]map[string]string{}, granted: map[poolFamily]map[string]time.Time{},
		waiting: map[poolFamily]*waitQueue{}, pools: map[poolFamily]plan.PoolState{}, consumed: map[poolFamily]int64{},
		woken: map[types.NamespacedName]bool{}, signal: make(chan struct{}, 1)}
}

// serviceHandler follows the driver's provisioning placeholders in the Service informer.
func (w *provisioningWindow) serviceHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.seeService(o, false) },
		UpdateFunc: func(_, o any) { w.seeService(o, false) },
		DeleteFunc: func(o any) { w.seeService(o, true) },
	}
}

// poolHandler follows MetalLB's count of each pool in the pool informer.
func (w *provisioningWindow) poolHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.seePool(o, false) },
		UpdateFunc: func(_, o any) { w.seePool(o, false) },
		DeleteFunc: func(o any) { w.seePool(o, true) },
	}
}

func unwrapDeleted(o any) any {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func (w *provisioningWindow) seeService(o any, deleted bool) {
	s, ok := unwrapDeleted(o).(*corev1.Service)
	if !ok || s.Namespace != w.namespace {
		return
	}
	pf := poolFamily{pool: s.Annotations[metallb.AnnotationAddressPool], fam: ipamv1.IPFamily(s.Labels[plan.LabelFamily])}
	waits := !deleted && s.DeletionTimestamp == nil && s.Labels[plan.LabelRole] == plan.RoleProvisioning && len(plan.IngressIPs(s)) == 0
	w.mu.Lock()
	defer w.mu.Unlock()
	freed := false
	if _, ok := w.granted[pf][s.Name]; ok {
		delete(w.granted[pf], s.Name)
		freed = !waits
	}
	if waits {
		if w.unserved[pf] == nil {
			w.unserved[pf] = map[string]string{}
		}
		w.unserved[pf][s.Name] = s.Annotations[plan.AnnotationClaim]
		return
	}
	if _, ok := w.unserved[pf][s.Name]; ok {
		delete(w.unserved[pf], s.Name)
		freed = true
		if len(plan.IngressIPs(s)) > 0 {
			w.consumed[pf]++
		}
	}
	if freed {
		w.releaseLocked(pf)
	}
}

func (w *provisioningWindow) seePool(o any, deleted bool) {
	p, ok := unwrapDeleted(o).(*metallb.IPAddressPool)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fam := range []ipamv1.IPFamily{ipamv1.IPv4, ipamv1.IPv6} {
		pf := poolFamily{pool: p.Name, fam: fam}
		st := plan.PoolStateOf(p, fam)
		if deleted {
			st = plan.PoolState{Free: -1}
		}
		prev, seen := w.pools[pf]
		w.pools[pf] = st
		if prev.Count != st.Count {
			delete(w.consumed, pf)
		}
		if !seen || prev.Stamp == st.Stamp || st.Full {
			continue
		}
		// The pool changed and has room: its placeholders MetalLB refused may be asked again
		// (their claims decide, plan.PlanProvision), and its slots may have grown.
		for _, key := range w.unserved[pf] {
			w.wakeLocked(key)
		}
		w.releaseLocked(pf)
	}
}

// syncedLocked reports whether the window's handlers have seen everything the caches held at
// start.
func (w *provisioningWindow) syncedLocked() bool {
	if !w.synced && (w.handlersSynced == nil || w.handlersSynced()) {
		w.synced = true
	}
	return w.synced
}

// grant gives the claim's next placeholder (name) of the pool and family a slot, when the window
// has one for it and no more claims older than this one (created) wait than there are free slots
// (st: MetalLB's count of the pool as the claim's pass read it, used until the window has seen
// the pool itself). A placeholder of that name the window counts already keeps its slot. A claim
// granted a slot waits no more for the pool and family.
func (w *provisioningWindow) grant(pf poolFamily, name string, claim types.NamespacedName, created time.Time, st plan.PoolState) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.syncedLocked() {
		return false
	}
	if w.expireLocked(pf) {
		// Slots of creates that never showed are free again: the oldest waiting claims go first.
		defer w.releaseLocked(pf)
	}
	if _, ok := w.granted[pf][name]; ok {
		return true
	}
	if _, ok := w.unserved[pf][name]; ok {
		return true
	}
	free := w.slotsLocked(pf, st) - len(w.unserved[pf]) - len(w.granted[pf])
	q := w.waiting[pf]
	if free <= 0 || q != nil && q.ahead(claim, created, w.now().Add(-w.expectFor)) >= free {
		return false
	}
	if w.granted[pf] == nil {
		w.granted[pf] = map[string]time.Time{}
	}
	w.granted[pf][name] = w.now()
	if q != nil {
		q.remove(claim)
	}
	return true
}

// cancel returns a slot granted to a create that was not made.
func (w *provisioningWindow) cancel(pf poolFamily, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.granted[pf][name]; ok {
		delete(w.granted[pf], name)
		w.releaseLocked(pf)
	}
}

// waitFor queues a claim for a slot of each of the pools and families pfs, and takes it out of
// every other queue: a claim that no longer needs a slot of a pool (its class names another, it
// has its placeholder) must not hold back the claims behind it.
func (w *provisioningWindow) waitFor(claim types.NamespacedName, created time.Time, pfs ...poolFamily) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pf, q := range w.waiting {
		if !slices.Contains(pfs, pf) {
			q.remove(claim)
		}
	}
	for _, pf := range pfs {
		q := w.waiting[pf]
		if q == nil {
			q = newWaitQueue()
			w.waiting[pf] = q
		}
		q.add(claim, created)
		// The claim's pass came: it is no longer one woken that never came back.
		delete(q.wokenAt, claim)
		// A slot may have freed between the claim's read and now.
		w.releaseLocked(pf)
	}
}

// stopWaiting takes a claim out of every queue: it has its placeholders, or needs none.
func (w *provisioningWindow) stopWaiting(claim types.NamespacedName) {
	w.waitFor(claim, time.Time{})
}

// releaseLocked wakes as many of the oldest waiting claims as the pool and family have free
// slots. They stay queued until their pass takes the slot (grant) or needs none (waitFor), so
// that no younger claim takes it in between. A claim woken more than expectFor ago whose pass
// never came is passed over (grant does not wait for it either), and the next ones are woken:
// its wake time is the first one, not refreshed by every later release, so that it goes stale.
func (w *provisioningWindow) releaseLocked(pf poolFamily) {
	q := w.waiting[pf]
	if q == nil || len(q.order) == 0 || !w.syncedLocked() {
		return
	}
	w.expireLocked(pf)
	free := w.slotsLocked(pf, plan.PoolState{Free: -1}) - len(w.unserved[pf]) - len(w.granted[pf])
	for _, claim := range q.oldest(free, w.now().Add(-w.expectFor)) {
		if w.addWakeLocked(claim) {
			q.woke(claim, w.now())
		}
	}
	w.notifyLocked()
}

// addWakeLocked records a claim to bring back, once, and only while forward runs; it says
// whether the claim is to be brought back.
func (w *provisioningWindow) addWakeLocked(claim types.NamespacedName) bool {
	if !w.forwarding {
		return false
	}
	if !w.woken[claim] {
		w.woken[claim] = true
		w.wakes = append(w.wakes, claim)
	}
	return true
}

// slotsLocked is how many placeholders of the pool and family may wait for MetalLB at once, by
// MetalLB's last count less what was served since (fallback: the count to use before the window
// has seen the pool).
func (w *provisioningWindow) slotsLocked(pf poolFamily, fallback plan.PoolState) int {
	st, ok := w.pools[pf]
	if !ok {
		st = fallback
	}
	if st.Free >= 0 {
		st.Free = max(st.Free-w.consumed[pf], 0)
	}
	return plan.ProvisioningSlots(st, w.size)
}

func (w *provisioningWindow) wakeLocked(key string) {
	ns, name, ok := splitKey(key)
	if !ok {
		return
	}
	w.addWakeLocked(types.NamespacedName{Namespace: ns, Name: name})
	w.notifyLocked()
}

func (w *provisioningWindow) notifyLocked() {
	if len(w.wakes) == 0 {
		return
	}
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// expireLocked forgets slots granted to creates the cache has not shown for expectFor, and says
// whether it forgot any.
func (w *provisioningWindow) expireLocked(pf poolFamily) bool {
	now := w.now()
	expired := false
	for name, at := range w.granted[pf] {
		if now.Sub(at) > w.expectFor {
			delete(w.granted[pf], name)
			expired = true
		}
	}
	return expired
}

// expire forgets the slots of every pool and family granted to creates the cache never showed,
// and wakes the claims waiting for them: without it, a slot lost that way would wake nobody, and
// the claims next in line would wait for their next re-check.
func (w *provisioningWindow) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for pf := range w.granted {
		if w.expireLocked(pf) {
			w.releaseLocked(pf)
		}
	}
}

// forward brings the woken claims to the claim reconciler, until ctx ends (a manager runnable
// that runs on the leader only: the informers' handlers never block on the reconciler's queue),
// and expires lost slots now and then. Once the window's handlers have synced, it wakes the
// claims that queued before: they were refused every slot until then.
func (w *provisioningWindow) forward(ctx context.Context, to chan<- ctrlevent.TypedGenericEvent[client.Object]) error {
	w.mu.Lock()
	w.forwarding = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.forwarding, w.wakes, w.woken = false, nil, map[types.NamespacedName]bool{}
		w.mu.Unlock()
	}()
	if w.handlersSynced != nil && !toolscache.WaitForCacheSync(ctx.Done(), w.handlersSynced) {
		return nil
	}
	w.mu.Lock()
	for pf := range w.waiting {
		w.releaseLocked(pf)
	}
	w.mu.Unlock()
	tick := time.NewTicker(max(w.expectFor, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.expire()
			continue
		case <-w.signal:
		}
		w.mu.Lock()
		wakes := w.wakes
		w.wakes = nil
		for _, k := range wakes {
			delete(w.woken, k)
		}
		w.mu.Unlock()
		for _, k := range wakes {
			ev := ctrlevent.TypedGenericEvent[client.Object]{Object: &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
			select {
			case to <- ev:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// waitQueue is the claims waiting for a slot, oldest (by creation, then name) first.
type waitQueue struct {
	at map[types.NamespacedName]time.Time
	// wokenAt is when each claim was first woken for a slot since its pass last came.
	wokenAt map[types.NamespacedName]time.Time
	order   []waitEntry
}

type waitEntry struct {
	claim   types.NamespacedName
	created time.Time
}

func (a waitEntry) before(b waitEntry) bool {
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.claim.String() < b.claim.String()
}

func newWaitQueue() *waitQueue {
	return &waitQueue{at: map[types.NamespacedName]time.Time{}, wokenAt: map[types.NamespacedName]time.Time{}}
}

// index is where e is, or goes, in the order.
func (q *waitQueue) index(e waitEntry) int {
	return sort.Search(len(q.order), func(i int) bool { return !q.order[i].before(e) })
}

func (q *waitQueue) add(claim types.NamespacedName, created time.Time) {
	if at, ok := q.at[claim]; ok {
		if at.Equal(created) {
			return
		}
		q.remove(claim)
	}
	q.at[claim] = created
	e := waitEntry{claim, created}
	q.order = slices.Insert(q.order, q.index(e), e)
}

func (q *waitQueue) remove(claim types.NamespacedName) {
	at, ok := q.at[claim]
	if !ok {
		return
	}
	delete(q.at, claim)
	delete(q.wokenAt, claim)
	if i := q.index(waitEntry{claim, at}); i < len(q.order) && q.order[i].claim == claim {
		q.order = slices.Delete(q.order, i, i+1)
	}
}

// ahead counts the claims waiting that are older than the claim (created) and may still come for
// a slot: a claim woken before stale that has not taken its slot since is not waited for (its
// pass failed, or never came), so that it cannot hold the queue up for good.
func (q *waitQueue) ahead(claim types.NamespacedName, created, stale time.Time) int {
	n := 0
	for _, e := range q.order[:q.index(waitEntry{claim, created})] {
		if at, ok := q.wokenAt[e.claim]; e.claim != claim && (!ok || at.After(stale)) {
			n++
		}
	}
	return n
}

// oldest are the n oldest claims waiting, passing over those woken before stale that have not
// come back since.
func (q *waitQueue) oldest(n int, stale time.Time) []types.NamespacedName {
	var out []types.NamespacedName
	for _, e := range q.order {
		if len(out) >= n {
			break
		}
		if at, ok := q.wokenAt[e.claim]; ok && !at.After(stale) {
			continue
		}
		out = append(out, e.claim)
	}
	return out
}

// woke records when a claim was first woken for a slot since its pass last came (waitFor
// clears it): waking it again does not make it fresh.
func (q *waitQueue) woke(claim types.NamespacedName, at time.Time) {
	if _, ok := q.at[claim]; !ok {
		return
	}
	if _, ok := q.wokenAt[claim]; !ok {
		q.wokenAt[claim] = at
	}
}
