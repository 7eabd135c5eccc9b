package tenantcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Observation is one state of a Service that a watch delivered.
type Observation struct {
	At          time.Time
	Event       watch.EventType
	Name        string
	UID         types.UID
	RV          string
	IPs         []string
	Annotations map[string]string
}

// Record is every state of a namespace's Services that a watch delivered, in order, from the
// moment it started.
type Record struct {
	mu     sync.Mutex
	seen   []Observation
	cancel context.CancelFunc
	rw     *watchtools.RetryWatcher
}

// RecordServices starts watching a namespace's Services from the resource version of a list, so
// that every later change is delivered (the watch resumes where it was if the apiserver closes
// it). The Services the list returned are recorded first, as ADDED. Stop ends it.
func RecordServices(ctx context.Context, cs kubernetes.Interface, ns string) (*Record, error) {
	list, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	r := &Record{}
	for i := range list.Items {
		r.add(watch.Added, &list.Items[i])
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cs.CoreV1().Services(ns).Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, lw)
	if err != nil {
		cancel()
		return nil, err
	}
	r.cancel, r.rw = cancel, rw
	go func() {
		for ev := range rw.ResultChan() {
			if svc, ok := ev.Object.(*corev1.Service); ok {
				r.add(ev.Type, svc)
			}
		}
	}()
	return r, nil
}

func (r *Record) add(t watch.EventType, svc *corev1.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, Observation{At: time.Now(), Event: t, Name: svc.Name, UID: svc.UID, RV: svc.ResourceVersion,
		IPs: IngressIPs(svc), Annotations: maps.Clone(svc.Annotations)})
}

// Stop ends the watch.
func (r *Record) Stop() {
	r.cancel()
	r.rw.Stop()
	<-r.rw.Done()
}

// All is every observation so far.
func (r *Record) All() []Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// Of is every observation of the Services of that name (every incarnation).
func (r *Record) Of(name string) []Observation {
	return slices.DeleteFunc(r.All(), func(o Observation) bool { return o.Name != name })
}

// OfUID is every observation of one incarnation.
func (r *Record) OfUID(uid types.UID) []Observation {
	return slices.DeleteFunc(r.All(), func(o Observation) bool { return o.UID != uid })
}

// Names is every Service name observed, sorted.
func (r *Record) Names() []string {
	var out []string
	for _, o := range r.All() {
		if !slices.Contains(out, o.Name) {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// WaitFor waits until the watch has delivered this resource version of the named Service, so
// that the record holds everything up to it.
func (r *Record) WaitFor(ctx context.Context, name, rv string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return slices.ContainsFunc(r.Of(name), func(o Observation) bool { return o.RV == rv }), nil
	})
}

// Timeline is the distinct ingress states of a set of observations, in order, for a log line.
func Timeline(obs []Observation) string {
	var parts []string
	last := ""
	for _, o := range obs {
		s := fmt.Sprintf("%v", o.IPs)
		if o.Event == watch.Deleted {
			s = "deleted"
		}
		if s != last {
			parts = append(parts, o.At.Format("15:04:05.000")+" "+s)
			last = s
		}
	}
	return strings.Join(parts, " -> ")
}

// Foreign is the first observation that shows an IP outside allowed, if any.
func Foreign(obs []Observation, allowed []string) (Observation, bool) {
	for _, o := range obs {
		for _, ip := range o.IPs {
			if !slices.Contains(allowed, ip) {
				return o, true
			}
		}
	}
	return Observation{}, false
}

// IngressIPs is a Service's load-balancer IPs, sorted.
func IngressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out = append(out, in.IP)
		}
	}
	slices.Sort(out)
	return out
}
