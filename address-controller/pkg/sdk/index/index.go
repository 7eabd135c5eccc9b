// Package index registers the field indexes through which the core (and drivers) reach the few
// objects an event concerns, instead of listing every claim or address.
package index

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

const (
	// AddressByClaim keys an IPAddress by the "namespace/name" of its claimRef.
	AddressByClaim = "ipam.addressByClaim"
	// AddressByClass keys an IPAddress by spec.className.
	AddressByClass = "ipam.addressByClass"
	// AddressBindable keys an unbound IPAddress by "class/family": the candidates for binding.
	AddressBindable = "ipam.addressBindable"
	// AddressReleasedByClass keys a Released IPAddress by its class (for releaseDelay changes).
	AddressReleasedByClass = "ipam.addressReleasedByClass"
	// ClaimWaitingForClass keys a claim that is not Bound by the class it waits for: its
	// spec.className, else its status.className, else the class the core stamped it with
	// (resolved-class annotation), else "" (waiting for a default class).
	ClaimWaitingForClass = "ipam.claimWaitingForClass"
)

// ClaimKey is the AddressByClaim key of a claim.
func ClaimKey(namespace, name string) string { return namespace + "/" + name }

// BindableKey is the AddressBindable key of a class and family.
func BindableKey(class string, family ipamv1.IPFamily) string { return class + "/" + string(family) }

// Setup registers every index of this package with the manager's cache.
func Setup(ctx context.Context, mgr manager.Manager) error {
	return Register(ctx, mgr.GetFieldIndexer())
}

// Register adds every index of this package to idx (a manager's or a cache's field indexer).
func Register(ctx context.Context, idx client.FieldIndexer) error {
	for _, f := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&ipamv1.IPAddress{}, AddressByClaim, addressByClaim},
		{&ipamv1.IPAddress{}, AddressByClass, addressByClass},
		{&ipamv1.IPAddress{}, AddressBindable, addressBindable},
		{&ipamv1.IPAddress{}, AddressReleasedByClass, addressReleasedByClass},
		{&ipamv1.IPAddressClaim{}, ClaimWaitingForClass, claimWaitingForClass},
	} {
		if err := idx.IndexField(ctx, f.obj, f.field, f.fn); err != nil {
			return err
		}
	}
	return nil
}

func addressByClaim(o client.Object) []string {
	a := o.(*ipamv1.IPAddress)
	if a.Spec.ClaimRef == nil {
		return nil
	}
	return []string{ClaimKey(a.Spec.ClaimRef.Namespace, a.Spec.ClaimRef.Name)}
}

func addressByClass(o client.Object) []string {
	return []string{o.(*ipamv1.IPAddress).Spec.ClassName}
}

func addressBindable(o client.Object) []string {
	a := o.(*ipamv1.IPAddress)
	if a.Spec.ClaimRef != nil || a.DeletionTimestamp != nil {
		return nil
	}
	ip, err := ipamv1.ParseCanonical(a.Spec.Address)
	if err != nil {
		return nil
	}
	return []string{BindableKey(a.Spec.ClassName, ipamv1.FamilyOf(ip))}
}

func addressReleasedByClass(o client.Object) []string {
	a := o.(*ipamv1.IPAddress)
	if a.Status.Phase != ipamv1.AddressReleased {
		return nil
	}
	return []string{a.Spec.ClassName}
}

func claimWaitingForClass(o client.Object) []string {
	c := o.(*ipamv1.IPAddressClaim)
	if c.Status.Phase == ipamv1.ClaimBound || c.DeletionTimestamp != nil {
		return nil
	}
	switch {
	case c.Spec.ClassName != "":
		return []string{c.Spec.ClassName}
	case c.Status.ClassName != "":
		return []string{c.Status.ClassName}
	case c.Annotations[ipamv1.AnnotationResolvedClass] != "":
		return []string{c.Annotations[ipamv1.AnnotationResolvedClass]}
	}
	return []string{""}
}

// ClaimsWaitingFor returns reconcile requests for the claims that wait for class ("" for those
// waiting for a default class): what a class event concerns, for the core and for drivers.
func ClaimsWaitingFor(ctx context.Context, r client.Reader, class string) ([]reconcile.Request, error) {
	var claims ipamv1.IPAddressClaimList
	if err := r.List(ctx, &claims, client.MatchingFields{ClaimWaitingForClass: class}); err != nil {
		return nil, err
	}
	reqs := make([]reconcile.Request, 0, len(claims.Items))
	for _, c := range claims.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs, nil
}
