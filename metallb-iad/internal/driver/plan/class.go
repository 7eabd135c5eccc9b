package plan

import (
	"fmt"
	"strings"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/driverkit"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// Reasons of a refused class.
const (
	ReasonAccepted           = driverkit.ReasonAccepted
	ReasonClassDeleting      = driverkit.ReasonClassDeleting
	ReasonPoolNotSet         = "PoolNotSet"
	ReasonPoolNotFound       = "PoolNotFound"
	ReasonPoolAutoAssigns    = "PoolAutoAssigns"
	ReasonPoolClaimedByClass = "PoolClaimedByOtherClass"
)

// ClassVerdict decides whether the driver accepts a class: its pool must exist in the MetalLB
// namespace, set autoAssign: false (MetalLB would otherwise hand its addresses to any Service),
// and not be named by an older class of this driver (the oldest keeps it; ties: lowest name).
func ClassVerdict(class *ipamv1.IPAddressClass, pool *metallb.IPAddressPool, rivals []ipamv1.IPAddressClass, namespace string) (reason, message string) {
	name := ParseClassParams(class).Pool
	switch {
	case class.DeletionTimestamp != nil:
		return ReasonClassDeleting, "the class is being deleted: it gets no new addresses; existing ones stay held until deleted"
	case name == "":
		return ReasonPoolNotSet, "parameters.pool must name a MetalLB IPAddressPool in " + namespace
	case pool == nil:
		return ReasonPoolNotFound, fmt.Sprintf("IPAddressPool %s/%s does not exist; create it with autoAssign: false", namespace, name)
	case pool.Spec.AutoAssign == nil || *pool.Spec.AutoAssign:
		return ReasonPoolAutoAssigns, fmt.Sprintf("IPAddressPool %s/%s hands its addresses to any Service; set autoAssign: false", namespace, name)
	}
	for _, r := range rivals {
		if r.Name == class.Name || r.DeletionTimestamp != nil || ParseClassParams(&r).Pool != name {
			continue
		}
		if olderClass(&r, class) {
			return ReasonPoolClaimedByClass, fmt.Sprintf("IPAddressPool %s/%s is already used by class %s; give each class a pool of its own", namespace, name, r.Name)
		}
	}
	return ReasonAccepted, fmt.Sprintf("addresses come from IPAddressPool %s/%s", namespace, name)
}

func olderClass(a, b *ipamv1.IPAddressClass) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	return strings.Compare(a.Name, b.Name) < 0
}
