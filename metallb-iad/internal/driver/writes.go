package driver

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
)

// freshAddress returns the address as fresh as this driver's own last write of it: the cached one
// once the cache shows that write, else the apiserver's
// (docs/design.md#a-view-that-includes-your-own-writes: no decision on a cached object this driver
// has just written, and no write refused for a stale resourceVersion).
func (d *Driver) freshAddress(ctx context.Context, a *ipamv1.IPAddress) (*ipamv1.IPAddress, error) {
	if d.written.Shows(writtenKey(a.Name), a.ResourceVersion, d.now()) {
		return a, nil
	}
	var f ipamv1.IPAddress
	if err := d.reader.Get(ctx, client.ObjectKeyFromObject(a), &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// wroteAddress records a write of the address (its new resourceVersion) until the cache shows it.
func (d *Driver) wroteAddress(a *ipamv1.IPAddress) {
	d.written.Wrote(writtenKey(a.Name), a.ResourceVersion, d.now())
}

// freshService is the Service as this driver last wrote it when the cache still shows an older
// version (read uncached), else the cached one: a pass never decides from a copy its own pin,
// unpin or parking write has made stale (docs/design.md#a-view-that-includes-your-own-writes).
func (d *Driver) freshService(ctx context.Context, svc *corev1.Service) (*corev1.Service, error) {
	if d.written.Shows(serviceWrittenKey(string(svc.UID)), svc.ResourceVersion, d.now()) {
		return svc, nil
	}
	var f corev1.Service
	if err := d.reader.Get(ctx, client.ObjectKeyFromObject(svc), &f); err != nil {
		return nil, err
	}
	if f.UID != svc.UID {
		return nil, apierrors.NewNotFound(corev1.Resource("services"), svc.Name)
	}
	return &f, nil
}

// wroteService records a write of a Service (its new resourceVersion) until the cache shows it.
// Only the Service controller reads the record, and it never sees the driver's own Services:
// nothing is recorded for those.
func (d *Driver) wroteService(s *corev1.Service) {
	if d.ownService(s) {
		return
	}
	d.written.Wrote(serviceWrittenKey(string(s.UID)), s.ResourceVersion, d.now())
}

// holdsOf lists the hold placeholders of an address, without those being deleted.
func (d *Driver) holdsOf(ctx context.Context, address string) ([]*corev1.Service, error) {
	var list corev1.ServiceList
	if err := d.client.List(ctx, &list, client.MatchingFields{indexHoldOf: address}); err != nil {
		return nil, err
	}
	return d.live(list.Items), nil
}

// live drops Services being deleted, or deleted by this driver while the cache still shows them.
func (d *Driver) live(items []corev1.Service) []*corev1.Service {
	out := make([]*corev1.Service, 0, len(items))
	now := d.now()
	for i := range items {
		s := &items[i]
		if s.DeletionTimestamp != nil {
			continue
		}
		if _, gone := d.expect.Pending(deletedKey(string(s.UID)), now); gone {
			continue
		}
		out = append(out, s)
	}
	return out
}

// markOwn gives one of the driver's own Services the label that keeps it out of the core's cache.
// Every Service the driver creates has it; one made by a version before the label gets it with
// the next patch the driver makes to it anyway (a pin, a relabel, a nudge), never with a write of
// its own.
func markOwn(s *corev1.Service) {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[ipamv1.LabelDriverService] = plan.Provisioner
}

func (d *Driver) unsay(us []plan.Unsay) {
	for _, u := range us {
		if u.Obj != nil {
			d.announce.Clear(u.Obj, u.Topic)
		} else {
			d.announce.ClearTopic(u.Topic, u.Keep...)
		}
	}
}

// deleteService deletes a placeholder (precondition: its uid) and remembers it until the cache
// drops it, so no later pass deletes it again.
func (d *Driver) deleteService(ctx context.Context, s *corev1.Service) error {
	uid := s.UID
	err := d.client.Delete(ctx, s, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	d.deleted(s)
	return nil
}

// deleted remembers a placeholder this driver deleted until the cache drops it, so no later pass
// deletes it again; and should MetalLB keep the IPs it served it (a delete it never handled),
// the address waiting for them knows under which name (plan_release.go).
func (d *Driver) deleted(s *corev1.Service) {
	d.expect.Expect(deletedKey(string(s.UID)), s.Name, d.now())
	for _, ip := range plan.IngressIPs(s) {
		d.memory.HoldDeleted(ipamv1.AddressName(ip), s.Name)
	}
}

// errChangedSince: a Service changed after the copy a delete was decided from.
var errChangedSince = errors.New("the Service changed since it was read; looking again")

// deleteServiceAsSeen deletes a placeholder only in the version it was seen in (precondition:
// uid and resourceVersion). A 409 means it changed since (this driver made it a hold, MetalLB
// served it): nothing is recorded, and errChangedSince asks for a fresh look.
func (d *Driver) deleteServiceAsSeen(ctx context.Context, s *corev1.Service) error {
	uid, rv := s.UID, s.ResourceVersion
	err := d.client.Delete(ctx, s, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsConflict(err):
		return errChangedSince
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	d.deleted(s)
	return nil
}

// nudgeService touches a placeholder MetalLB has not served, to make it try again; a
// provisioning placeholder records the state of its pool it was nudged in (poolState, "" for
// none), in the same patch.
func (d *Driver) nudgeService(ctx context.Context, s *corev1.Service, poolState string) error {
	patch := client.MergeFrom(s.DeepCopy())
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[plan.AnnotationNudge] = d.now().UTC().Format(time.RFC3339Nano)
	if poolState != "" {
		s.Annotations[plan.AnnotationPoolState] = poolState
	}
	if d.ownService(s) {
		markOwn(s)
	}
	if err := d.client.Patch(ctx, s, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	d.wroteService(s) // an attached tenant Service is nudged too (plan_release.go)
	return nil
}

// ownService reports whether a Service is one the driver made for itself: a placeholder or a
// release Service in its namespace.
func (d *Driver) ownService(o client.Object) bool {
	return o.GetNamespace() == d.Namespace && o.GetLabels()[plan.LabelRole] != ""
}

func splitKey(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}
