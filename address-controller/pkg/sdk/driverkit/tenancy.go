package driverkit

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Which claims a class serves. The core refuses the others (reasons NamespaceNotAllowed and
// FamilyNotServed) and takes back their stamp; a driver checks the same before it provisions, so
// that a stamp the core has not taken back yet provisions nothing either.

// NamespaceRefusal says what keeps a class from serving a namespace's claims.
type NamespaceRefusal string

const (
	// NamespaceAdmitted: nothing does.
	NamespaceAdmitted NamespaceRefusal = ""
	// RefusedBySelector: the class's namespaceSelector does not match the namespace's labels.
	RefusedBySelector NamespaceRefusal = "namespaceSelector"
	// RefusedByInvalidSelector: the class's namespaceSelector cannot be parsed, and matches no
	// namespace (a class meant to be restricted is never opened by a typo).
	RefusedByInvalidSelector NamespaceRefusal = "invalidNamespaceSelector"
	// RefusedByDriver: the class's driver reports that its backend serves other namespaces only
	// (status.servedNamespaces).
	RefusedByDriver NamespaceRefusal = "servedNamespaces"
)

// RefusesNamespace says whether, and by what, a class refuses the claims of a namespace with the
// given labels: its spec.namespaceSelector when set, then its driver's status.servedNamespaces
// when set. Only admins write a class and only its driver its status: no tenant widens either.
func RefusesNamespace(class *ipamv1.IPAddressClass, namespace string, nsLabels map[string]string) NamespaceRefusal {
	set := labels.Set(nsLabels)
	if sel := class.Spec.NamespaceSelector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return RefusedByInvalidSelector
		}
		if !s.Matches(set) {
			return RefusedBySelector
		}
	}
	if served := class.Status.ServedNamespaces; served != nil && !InNamespaceSet(served, namespace, nsLabels) {
		return RefusedByDriver
	}
	return NamespaceAdmitted
}

// InNamespaceSet reports whether the set names the namespace or one of its selectors matches the
// namespace's labels (a selector that cannot be parsed matches nothing).
func InNamespaceSet(set *ipamv1.NamespaceSet, namespace string, nsLabels map[string]string) bool {
	if slices.Contains(set.Names, namespace) {
		return true
	}
	for i := range set.Selectors {
		if s, err := metav1.LabelSelectorAsSelector(&set.Selectors[i]); err == nil && s.Matches(labels.Set(nsLabels)) {
			return true
		}
	}
	return false
}

// UnservedFamilies are the families of the claim that its class's driver reports it does not
// serve (status.families); none when the driver reports no families.
func UnservedFamilies(class *ipamv1.IPAddressClass, claim *ipamv1.IPAddressClaim) []ipamv1.IPFamily {
	served := class.Status.Families
	if len(served) == 0 {
		return nil
	}
	var out []ipamv1.IPFamily
	for _, f := range claim.Spec.Family.Families() {
		if !slices.Contains(served, f) {
			out = append(out, f)
		}
	}
	return out
}
