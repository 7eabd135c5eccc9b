package plan

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The Services the driver makes for itself, all built here: a claim's provisioning placeholder,
// an address's hold, and the short-lived release Service that makes MetalLB forget a name. Each
// carries the core's driver label (ipamv1.LabelDriverService), so the core neither caches nor
// auto-claims it, and the driver's role label.

// ClassParams are the parameters of a class of this driver (spec.parameters), parsed in one place.
type ClassParams struct {
	// Pool names the MetalLB IPAddressPool the class's addresses come from ("" when unset).
	Pool string
}

// ParseClassParams reads a class's parameters; a nil class has none.
func ParseClassParams(class *ipamv1.IPAddressClass) ClassParams {
	if class == nil {
		return ClassParams{}
	}
	return ClassParams{Pool: class.Spec.Parameters[ClassParameterPool]}
}

// PlaceholderSpec is a selectorless LoadBalancer Service with no node ports, single-stack in
// the family: MetalLB assigns it an address but, with no endpoints, never announces it.
func PlaceholderSpec(family ipamv1.IPFamily) corev1.ServiceSpec {
	single := corev1.IPFamilyPolicySingleStack
	no := false
	fam := corev1.IPv4Protocol
	if family == ipamv1.IPv6 {
		fam = corev1.IPv6Protocol
	}
	return corev1.ServiceSpec{
		Type:                          corev1.ServiceTypeLoadBalancer,
		Ports:                         []corev1.ServicePort{{Name: "hold", Port: HoldPort, Protocol: corev1.ProtocolTCP}},
		AllocateLoadBalancerNodePorts: &no,
		IPFamilyPolicy:                &single,
		IPFamilies:                    []corev1.IPFamily{fam},
	}
}

// ProvisioningService is the placeholder that asks MetalLB for an address of the class's pool
// for one family of a claim. It carries the claim's sharing key already, which its hold keeps:
// MetalLB passes over every Service when the sharing key of an assigned one changes, and the
// port every placeholder uses keeps MetalLB from giving it an IP another one has.
func ProvisioningService(namespace, name string, claim *ipamv1.IPAddressClaim, fam ipamv1.IPFamily, pool, poolState string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{ipamv1.LabelDriverService: Provisioner,
				LabelRole: RoleProvisioning, LabelClaimUID: string(claim.UID), LabelFamily: string(fam)},
			Annotations: map[string]string{
				metallb.AnnotationAddressPool: pool,
				AnnotationClaim:               claim.Namespace + "/" + claim.Name,
			},
		},
		Spec: PlaceholderSpec(fam),
	}
	if poolState != "" {
		s.Annotations[AnnotationPoolState] = poolState
	}
	if key := SharingKey(claim.UID); key != "" {
		s.Annotations[metallb.AnnotationAllowSharedIP] = key
	}
	return s
}

// HoldService is the placeholder that holds an existing address: pinned to its IP in the class's
// pool with its sharing key (HoldKey), labelled with the address's name.
func HoldService(namespace, address string, ip netip.Addr, pool, key string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      HoldName(address),
			Namespace: namespace,
			Labels:    map[string]string{ipamv1.LabelDriverService: Provisioner, LabelRole: RoleHold, LabelAddress: address},
			Annotations: map[string]string{
				metallb.AnnotationAddressPool:     pool,
				metallb.AnnotationLoadBalancerIPs: ip.String(),
				metallb.AnnotationAllowSharedIP:   key,
			},
		},
		Spec: PlaceholderSpec(ipamv1.FamilyOf(ip)),
	}
}

// ReleaseService is a release Service: a headless, selectorless ClusterIP Service under a name
// MetalLB keeps an allocation for, labelled as this driver's (role release, and the address it
// frees) so that it is never taken for a placeholder and the sweep can find it.
func ReleaseService(namespace, name, address string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{ipamv1.LabelDriverService: Provisioner, LabelRole: RoleRelease, LabelAddress: address},
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "release", Port: 1, Protocol: corev1.ProtocolTCP}},
		},
	}
}
