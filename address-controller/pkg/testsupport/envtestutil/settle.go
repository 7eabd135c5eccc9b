package envtestutil

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Reconciles follows what a manager's controllers do, so that a test can wait until they have
// handled every write made so far (Settle) before it asserts that something did not happen: a
// sleep would pass without proving anything when a controller is slow.
//
// It sees two things. Its cache (NewCache, the manager's NewCache) wraps every event handler
// registered on an informer and notes the resourceVersion each handler has been given: a
// handler has then made its enqueues for every earlier event of that resource (an informer
// hands each handler its events in order). Its logger (Logger, the manager's Logger) reads
// controller-runtime's reconcile log lines ("Reconciling", "Reconcile successful", "Reconcile
// done, requeueing after D", "Reconcile done, requeueing", "Reconciler error"): which reconciles
// are running, and which keys a controller has queued again for later, and when.
type Reconciles struct {
	mu     sync.Mutex
	scheme *runtime.Scheme
	// kinds are the informers' event handlers by resource kind.
	kinds map[schema.GroupVersionKind][]*handlerSeen
	// controllers by name; instance counts the controllers (and queues) named, so that a
	// restarted controller's state replaces its predecessor's.
	controllers map[string]*controllerSeen
	instance    int
	// lines counts the reconcile log lines read: a wait that read none would prove nothing.
	lines int
}

type handlerSeen struct {
	rv uint64
	// stopped is the informer's: a stopped manager's handlers are given nothing more.
	stopped func() bool
}

type controllerSeen struct {
	instance int
	// starts counts the reconciles started.
	starts int
	// running are the reconciles started and not finished, by reconcile ID.
	running map[string]string
	// later are the keys queued again, with when they are due; failures counts a key's errors
	// in a row (its back-off).
	later    map[string]time.Time
	failures map[string]int
}

// NewReconciles is an empty Reconciles; give its Logger and NewCache to the manager.
func NewReconciles() *Reconciles {
	return &Reconciles{kinds: map[schema.GroupVersionKind][]*handlerSeen{}, controllers: map[string]*controllerSeen{}}
}

// Backoff is when a key whose reconcile failed n times in a row comes back: the project's rate
// limiter (an exponential back-off from 100 ms, at most a minute).
func Backoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// --- the cache: which events each handler was given ---

// NewCache is a cache.NewCacheFunc that builds the default cache and follows its handlers.
func (r *Reconciles) NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.scheme = opts.Scheme
	r.mu.Unlock()
	return &followedCache{Cache: c, r: r}, nil
}

type followedCache struct {
	cache.Cache
	r *Reconciles
}

func (c *followedCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	gvk, err := apiutil.GVKForObject(obj, c.r.scheme)
	if err != nil {
		return nil, err
	}
	return &followedInformer{Informer: i, r: c.r, gvk: gvk}, nil
}

func (c *followedCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return &followedInformer{Informer: i, r: c.r, gvk: gvk}, nil
}

type followedInformer struct {
	cache.Informer
	r   *Reconciles
	gvk schema.GroupVersionKind
}

func (i *followedInformer) follow(h toolscache.ResourceEventHandler) toolscache.ResourceEventHandler {
	seen := &handlerSeen{stopped: i.IsStopped}
	i.r.mu.Lock()
	i.r.kinds[i.gvk] = append(i.r.kinds[i.gvk], seen)
	i.r.mu.Unlock()
	return &followedHandler{next: h, r: i.r, seen: seen}
}

func (i *followedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandler(i.follow(h))
}

func (i *followedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithResyncPeriod(i.follow(h), d)
}

func (i *followedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithOptions(i.follow(h), o)
}

type followedHandler struct {
	next toolscache.ResourceEventHandler
	r    *Reconciles
	seen *handlerSeen
}

// saw notes obj's resourceVersion once the handler has returned (made its enqueues).
func (h *followedHandler) saw(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	rv, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	h.r.mu.Lock()
	h.seen.rv = max(h.seen.rv, rv)
	h.r.mu.Unlock()
}

func (h *followedHandler) OnAdd(obj any, initial bool) { h.next.OnAdd(obj, initial); h.saw(obj) }
func (h *followedHandler) OnUpdate(old, obj any)       { h.next.OnUpdate(old, obj); h.saw(obj) }
func (h *followedHandler) OnDelete(obj any)            { h.next.OnDelete(obj); h.saw(obj) }

// --- the logger: controller-runtime's reconcile log lines ---

// Logger is base with every controller-runtime reconcile log line also read by r: the manager's
// Logger. Lines below base's level are read and not written.
func (r *Reconciles) Logger(base logr.Logger) logr.Logger {
	return logr.New(&tapSink{r: r, next: base.GetSink()})
}

type tapSink struct {
	r    *Reconciles
	next logr.LogSink
	// controller, key and id are the values the line's logger carries.
	controller, key, id string
	instance            int
	namespace, name     string
}

func (s *tapSink) Init(info logr.RuntimeInfo) { s.next.Init(info) }

// Enabled: controller-runtime writes its reconcile lines at V(5).
func (s *tapSink) Enabled(level int) bool { return level == 5 || s.next.Enabled(level) }

func (s *tapSink) Info(level int, msg string, kv ...any) {
	s.r.line(s, msg, false)
	if s.next.Enabled(level) {
		s.next.Info(level, msg, kv...)
	}
}

func (s *tapSink) Error(err error, msg string, kv ...any) {
	s.r.line(s, msg, true)
	s.next.Error(err, msg, kv...)
}

func (s *tapSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.next = s.next.WithValues(kv...)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v := fmt.Sprint(kv[i+1])
		switch k {
		case "controller":
			c.controller = v
			s.r.mu.Lock()
			s.r.instance++
			c.instance = s.r.instance
			s.r.mu.Unlock()
		case "namespace":
			c.namespace = v
		case "name":
			c.name = v
		case "reconcileID":
			c.id = v
		}
	}
	c.key = c.namespace + "/" + c.name
	return &c
}

func (s *tapSink) WithName(name string) logr.LogSink {
	c := *s
	c.next = s.next.WithName(name)
	return &c
}

func (s *tapSink) WithCallDepth(depth int) logr.LogSink {
	c := *s
	if d, ok := s.next.(logr.CallDepthLogSink); ok {
		c.next = d.WithCallDepth(depth)
	}
	return &c
}

// line notes a reconcile's start or end.
func (r *Reconciles) line(s *tapSink, msg string, isError bool) {
	if s.id == "" || s.controller == "" {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.controllers[s.controller]
	if c == nil || s.instance > c.instance && msg == "Reconciling" {
		// A controller restarted under its name: what its predecessor had queued is gone.
		c = &controllerSeen{instance: s.instance, running: map[string]string{}, later: map[string]time.Time{}, failures: map[string]int{}}
		r.controllers[s.controller] = c
	}
	if s.instance != c.instance {
		return
	}
	switch {
	case msg == "Reconciling":
		r.lines++
		c.starts++
		c.running[s.id] = s.key
		delete(c.later, s.key) // the queue holds a key once: this reconcile took it
	case isError && msg == "Reconciler error":
		r.lines++
		delete(c.running, s.id)
		c.failures[s.key]++
		c.later[s.key] = now.Add(Backoff(c.failures[s.key]))
	case msg == "Reconcile successful", msg == "Reconcile done, requeueing",
		strings.HasPrefix(msg, "Reconcile done, requeueing after "):
		r.lines++
		delete(c.running, s.id)
		delete(c.failures, s.key)
		switch {
		case msg == "Reconcile done, requeueing":
			c.later[s.key] = now.Add(Backoff(1))
		case msg != "Reconcile successful":
			if d, err := time.ParseDuration(strings.TrimPrefix(msg, "Reconcile done, requeueing after ")); err == nil {
				c.later[s.key] = now.Add(d)
			}
		}
	}
}

// --- the wait ---

// SettleOptions say what Settle writes, reads and waits for.
type SettleOptions struct {
	// Touch writes one object of every kind the manager's controllers watch (a sentinel the
	// controllers have nothing to do about) and returns them as written: their resourceVersions
	// order every earlier write of their kinds.
	Touch func(ctx context.Context) ([]client.Object, error)
	// Reader reads the apiserver (not a cache): the current revision.
	Reader client.Reader
	// Controllers are the controllers to wait for; all seen when empty.
	Controllers []string
	// Horizon: a key queued again due within it is waited for (3 s when zero); one due later
	// is the controller's later business, not what the writes so far brought.
	Horizon time.Duration
	// Limit of the whole wait (a minute when zero).
	Limit time.Duration
	// Busy, when set, is another look at the controllers (their queues' depth, say).
	Busy func() (string, error)
}

// Settle waits until every write made so far has been handled: it touches a sentinel of every
// watched kind, waits until every event handler has been given it (so every earlier event of
// those kinds was enqueued), then until no reconcile runs and no key is queued again within the
// horizon (nor overdue by less than it), twice 100 ms apart with no reconcile started in between. A reconcile that wrote
// meanwhile starts the round again: Settle ends when the apiserver's revision is still the last
// sentinel's. It fails t when the controllers do not settle within the limit.
func (r *Reconciles) Settle(t testing.TB, o SettleOptions) {
	t.Helper()
	limit, horizon := o.Limit, o.Horizon
	if limit == 0 {
		limit = time.Minute
	}
	if horizon == 0 {
		horizon = 3 * time.Second
	}
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	var why string
	for round := 1; ; round++ {
		done, w, err := r.round(ctx, o, horizon, deadline)
		if err != nil {
			t.Fatalf("settling: %v", err)
		}
		if done {
			return
		}
		why = w
		if !time.Now().Before(deadline) {
			t.Fatalf("the controllers did not settle within %s (%d rounds): %s", limit, round, why)
		}
	}
}

// round is one touch and wait; done when nothing was written after the sentinels.
func (r *Reconciles) round(ctx context.Context, o SettleOptions, horizon time.Duration, deadline time.Time) (done bool, why string, err error) {
	r.mu.Lock()
	noCache := r.scheme == nil
	r.mu.Unlock()
	if noCache {
		return false, "", fmt.Errorf("no cache followed: is the manager's NewCache Reconciles.NewCache?")
	}
	sentinels, err := o.Touch(ctx)
	if err != nil {
		return false, "", err
	}
	var last uint64
	want := map[schema.GroupVersionKind]uint64{}
	for _, s := range sentinels {
		rv, err := strconv.ParseUint(s.GetResourceVersion(), 10, 64)
		if err != nil {
			return false, "", fmt.Errorf("sentinel %s: resourceVersion %q", s.GetName(), s.GetResourceVersion())
		}
		r.mu.Lock()
		gvk, err := apiutil.GVKForObject(s, r.scheme)
		r.mu.Unlock()
		if err != nil {
			return false, "", err
		}
		want[gvk] = rv
		last = max(last, rv)
	}
	// Every kind a handler watches needs its sentinel, or its events would not be ordered.
	r.mu.Lock()
	var missing []string
	for gvk := range r.kinds {
		if _, ok := want[gvk]; !ok {
			missing = append(missing, gvk.Kind)
		}
	}
	r.mu.Unlock()
	if len(missing) > 0 {
		sort.Strings(missing)
		return false, "", fmt.Errorf("the controllers watch %v: Touch writes no sentinel of them", missing)
	}
	idleBefore, startsBefore := false, -1
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		why = r.undelivered(want)
		if why == "" {
			var starts int
			starts, why = r.busy(o.Controllers, horizon)
			if why == "" && o.Busy != nil {
				if why, err = o.Busy(); err != nil {
					why = err.Error()
				}
			}
			if why == "" {
				if idleBefore && starts == startsBefore {
					break
				}
				idleBefore, startsBefore = true, starts
				time.Sleep(50 * time.Millisecond) // with the loop's, 100 ms to the second look
				continue
			}
		}
		idleBefore = false
	}
	if why != "" {
		return false, why, nil
	}
	var list corev1.NamespaceList
	if err := o.Reader.List(ctx, &list, client.Limit(1)); err != nil {
		return false, "", err
	}
	now, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return false, "", err
	}
	if now != last {
		return false, fmt.Sprintf("written after the sentinels (revision %d, the last sentinel's %d)", now, last), nil
	}
	return true, "", nil
}

// undelivered names a kind whose handlers have not all been given its sentinel.
func (r *Reconciles) undelivered(want map[schema.GroupVersionKind]uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for gvk, rv := range want {
		for i, h := range r.kinds[gvk] {
			if h.rv < rv && !h.stopped() {
				return fmt.Sprintf("handler %d of %s has resourceVersion %d, not yet the sentinel's %d", i, gvk.Kind, h.rv, rv)
			}
		}
	}
	return ""
}

// busy counts the reconciles started, and says what is running or queued within horizon.
func (r *Reconciles) busy(names []string, horizon time.Duration) (starts int, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lines == 0 {
		return 0, "no reconcile log line read: is the manager's Logger Reconciles.Logger?"
	}
	if len(names) == 0 {
		for n := range r.controllers {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	now := time.Now()
	for _, n := range names {
		c := r.controllers[n]
		if c == nil {
			continue // never reconciled: nothing queued later either
		}
		starts += c.starts
		for _, key := range c.running {
			return starts, fmt.Sprintf("%s reconciles %s", n, key)
		}
		for key, due := range c.later {
			// One overdue by more than the horizon with no reconcile running is a stopped
			// controller's.
			if in := due.Sub(now); in <= horizon && in > -horizon {
				return starts, fmt.Sprintf("%s has %s queued again in %s", n, key, due.Sub(now).Round(time.Millisecond))
			}
		}
	}
	return starts, ""
}

// Sentinels is a SettleOptions.Touch that writes each of objs with c: creates it the first time,
// then changes an annotation of it. Each must be something the controllers have nothing to do
// about.
func Sentinels(c client.Client, objs ...client.Object) func(ctx context.Context) ([]client.Object, error) {
	return func(ctx context.Context) ([]client.Object, error) {
		out := make([]client.Object, 0, len(objs))
		for _, tmpl := range objs {
			o := tmpl.DeepCopyObject().(client.Object)
			err := c.Get(ctx, client.ObjectKeyFromObject(tmpl), o)
			switch {
			case apierrors.IsNotFound(err):
				o = tmpl.DeepCopyObject().(client.Object)
				if err := c.Create(ctx, o); err != nil {
					return nil, err
				}
			case err != nil:
				return nil, err
			default:
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sentinelAnnotation, time.Now().Format(time.RFC3339Nano))
				if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					return nil, err
				}
			}
			out = append(out, o)
		}
		return out, nil
	}
}

// SentinelNamespace holds the namespaced objects of KindSentinels.
const SentinelNamespace = "settle-sentinel"

// KindSentinels are sentinels for Settle of the kinds the core and every driver watch, none of
// them anything to do: their namespace, a class of a provisioner nobody runs, and an address and
// a claim of className (a class that does not exist, or that other provisioner's) and a
// ClusterIP Service. A suite adds the kinds only its controllers watch.
func KindSentinels(className string) []client.Object {
	const name = SentinelNamespace
	ip := netip.MustParseAddr("192.0.2.254")
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "other.example.org"}},
		&ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(ip)},
			Spec: ipamv1.IPAddressSpec{Address: ip.String(), ClassName: className}},
		&ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: name},
			Spec: ipamv1.IPAddressClaimSpec{ClassName: className, Family: ipamv1.IPv4}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}}},
	}
}

const sentinelAnnotation = "envtestutil.example.org/touched"
