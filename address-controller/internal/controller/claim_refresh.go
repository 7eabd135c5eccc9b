package controller

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// A claim pass decides from a view with all of this controller's own writes
// (docs/design.md#a-view-that-includes-your-own-writes): refresh reads the claim and its addresses
// from the apiserver when the cache does not show them yet.

// refresh replaces the cached claim and its addresses with the apiserver's. It reports false
// when the claim is gone or being deleted (a later pass releases it).
//
// With all, the addresses are listed by claimRef: a pass that binds sees every address that names
// the claim, one a driver or an admin made a moment ago included, so it never binds a second one.
// Otherwise they are read one by one, by name: every address the cache lists for the claim, the
// live claim's status names, or this controller bound to it without the cache showing it yet
// (binds) — a view with all of this controller's own writes
// (docs/design.md#a-view-that-includes-your-own-writes) and what its last status write rested on. A
// read by name costs the apiserver the same whatever the number of addresses, while a list by
// claimRef (a field selector) makes it filter every address: once per write of every claim, that
// was the core's bottleneck at 10,000 addresses. What a read by name can miss is an address another
// writer made name the claim a moment ago that the cache does not show yet; the status then waits
// for that address's own event, which brings the claim back.
func (r *ClaimReconciler) refresh(ctx context.Context, claim *ipamv1.IPAddressClaim, sorted *claimAddresses, cached []ipamv1.IPAddress, all bool) (bool, error) {
	var live ipamv1.IPAddressClaim
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(claim), &live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if live.DeletionTimestamp != nil || live.UID != claim.UID {
		return false, nil
	}
	if all {
		addrs, err := liveAddressesOf(ctx, r.Reader, &live)
		if err != nil {
			return false, err
		}
		*claim = live
		*sorted = sortClaimAddresses(claim, addrs)
		return true, nil
	}
	key := client.ObjectKeyFromObject(claim)
	var names []string
	for _, a := range cached {
		names = append(names, a.Name)
	}
	for _, a := range live.Status.Addresses {
		names = append(names, a.Name)
	}
	names = append(names, r.bindMemory().of(key, r.now())...)
	slices.Sort(names)
	addrs := make([]ipamv1.IPAddress, 0, len(names))
	for _, name := range slices.Compact(names) {
		var a ipamv1.IPAddress
		if err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, &a); apierrors.IsNotFound(err) {
			r.bindMemory().gone(key, name, r.now())
			continue
		} else if err != nil {
			return false, err
		}
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == live.Namespace && ref.Name == live.Name {
			addrs = append(addrs, a)
		} else {
			r.bindMemory().gone(key, name, r.now())
		}
	}
	*claim = live
	*sorted = sortClaimAddresses(claim, addrs)
	return true, nil
}

// liveAddressesOf lists, uncached, the addresses whose claimRef names the claim.
func liveAddressesOf(ctx context.Context, reader client.Reader, claim *ipamv1.IPAddressClaim) ([]ipamv1.IPAddress, error) {
	return liveAddresses(ctx, reader, claim.Namespace, claim.Name)
}

// liveAddresses lists, uncached, the addresses whose claimRef names the claim namespace/name, or
// any claim of the namespace when name is empty (through the CRD's selectable claimRef fields, so
// the apiserver filters them).
func liveAddresses(ctx context.Context, reader client.Reader, namespace, name string) ([]ipamv1.IPAddress, error) {
	fields := client.MatchingFields{"spec.claimRef.namespace": namespace}
	if name != "" {
		fields["spec.claimRef.name"] = name
	}
	var list ipamv1.IPAddressList
	err := reader.List(ctx, &list, fields)
	if apierrors.IsBadRequest(err) {
		// An apiserver without selectable CRD fields (before Kubernetes 1.31): filter here.
		list = ipamv1.IPAddressList{}
		err = reader.List(ctx, &list)
	}
	if err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, a := range list.Items {
		if ref := a.Spec.ClaimRef; ref != nil && ref.Namespace == namespace && (name == "" || ref.Name == name) {
			out = append(out, a)
		}
	}
	return out, nil
}
