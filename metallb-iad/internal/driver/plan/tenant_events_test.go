package plan

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// The two tenants of these tests: the address is tenant A's (its claim), the Service tenant B's.
const (
	nsOwner = "tenant-owner"
	nsOther = "tenant-other"
)

// tenantReadable reports the events a plan says about namespaced objects (what a tenant's Role
// reads in that namespace) whose message names a namespace other than the object's own among
// namespaces. Events about cluster-scoped objects (an IPAddress: the admin's) may name anyone.
func tenantReadable(t *testing.T, what string, evs []Event, namespaces ...string) {
	t.Helper()
	for _, e := range evs {
		ns := e.Obj.GetNamespace()
		if ns == "" {
			continue
		}
		for _, other := range namespaces {
			if other != ns && strings.Contains(e.Message, other) {
				t.Errorf("%s: %s on %s/%s names namespace %s: %q", what, e.Reason, ns, e.Obj.GetName(), other, e.Message)
			}
		}
	}
}

// ownerAddress is tenant A's address of ip, bound to its claim "web-a".
func ownerAddress(ip string) *ipamv1.IPAddress {
	a := testAddress(ip, Finalizer)
	a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: nsOwner, Name: "web-a", UID: "owner-claim"}
	return a
}

// otherClaim is tenant B's claim "c", Bound to ip.
func otherClaim(ip string) *ipamv1.IPAddressClaim {
	c := boundClaim(ipamv1.ClaimBound, ip)
	c.Namespace = nsOther
	return c
}

// otherService is tenant B's Service "web", naming its claim "c".
func otherService() *corev1.Service {
	s := tenantSvc()
	s.Namespace = nsOther
	return s
}

// Issue 31 item 3: a Warning the driver says about a tenant's Service says that an address is
// reserved or in use, never by whom: no other namespace's claim or Service is named. The names
// stay on the IPAddress (claimRef, AttachedTo, the Conflict condition) and in the log.
func TestTenantEventsNameNoOtherNamespace(t *testing.T) {
	const ip = "203.0.113.5"
	name := ipamv1.AddressName(netip.MustParseAddr(ip))

	t.Run("ReservedAddressRequested: tenant B pins tenant A's address", func(t *testing.T) {
		s := requesting(svc(nsOther, "pinner", "pinner-uid"), ip)
		p := PlanAttach(AttachView{Svc: s, Reserved: []*ipamv1.IPAddress{ownerAddress(ip)}, Now: t0})
		if !hasEvent(p, ReasonReservedAddressRequested) {
			t.Fatalf("%+v", p)
		}
		tenantReadable(t, "pin of another tenant's address", p.Events, nsOwner, nsOther)
		if m := p.Events[0].Message; strings.Contains(m, "web-a") || !strings.Contains(m, ip) || !strings.Contains(m, name) ||
			!strings.Contains(m, "another namespace") {
			t.Errorf("message %q: want the IP, the address, that it is reserved elsewhere, and no claim", m)
		}
		// The same pin in the claim's own namespace still names the claim: it tells the tenant
		// which claim to name instead.
		own := requesting(svc(nsOwner, "pinner", "pinner-uid"), ip)
		p = PlanAttach(AttachView{Svc: own, Reserved: []*ipamv1.IPAddress{ownerAddress(ip)}, Now: t0})
		if m := p.Events[0].Message; !strings.Contains(m, nsOwner+"/web-a") {
			t.Errorf("own namespace: message %q does not name the claim", m)
		}
	})

	t.Run("ClaimInUse: the claim's address is attached to a Service of another namespace", func(t *testing.T) {
		a := attachedAddr(ip, nsOwner, "web", "owner-web-uid")
		a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: nsOther, Name: "c", UID: "claim-uid"}
		v := attachViewOf(otherService(), otherClaim(ip), a)
		v.Elsewhere[a.Name] = true
		p := PlanAttach(v)
		if !hasEvent(p, ReasonClaimInUse) || p.Pin != "" || len(p.Attach) != 0 {
			t.Fatalf("%+v", p)
		}
		tenantReadable(t, "claim in use elsewhere", p.Events, nsOwner, nsOther)
		// A Service of the claim's own namespace is named.
		a = attachedAddr(ip, nsOther, "first", "first-uid")
		a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: nsOther, Name: "c", UID: "claim-uid"}
		v = attachViewOf(otherService(), otherClaim(ip), a)
		v.Elsewhere[a.Name] = true
		p = PlanAttach(v)
		if !hasEvent(p, ReasonClaimInUse) || !strings.Contains(p.Events[0].Message, nsOther+"/first") {
			t.Errorf("own namespace: %+v", p.Events)
		}
	})

	t.Run("the Service's other Warnings, with the address bound in another namespace", func(t *testing.T) {
		for _, tc := range []struct {
			reason string
			view   func() AttachView
		}{
			{ReasonAddressNotServable, func() AttachView {
				return attachViewOf(otherService(), otherClaim(ip), ownerAddress(ip))
			}},
			{ReasonPoolExcludesService, func() AttachView {
				a := ownerAddress(ip)
				a.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: nsOther, Name: "c", UID: "claim-uid"}
				v := attachViewOf(otherService(), otherClaim(ip), a)
				v.Excluded = map[string]string{a.Name: "IPAddressPool p serves only the namespaces its spec.serviceAllocation lists or selects, not " + nsOther}
				return v
			}},
			{ReasonForeignPin, func() AttachView {
				s := otherService()
				s.Annotations[metallb.AnnotationAddressPool] = "other-pool"
				return attachViewOf(s, otherClaim(ip), ownerAddress(ip))
			}},
		} {
			p := PlanAttach(tc.view())
			if !hasEvent(p, tc.reason) {
				t.Errorf("%s: not said: %+v", tc.reason, p.Events)
			}
			tenantReadable(t, tc.reason, p.Events, nsOwner, nsOther)
		}
	})

	t.Run("ReservedAddressConflict and StaleAddressCleared: tenant B's Service shows tenant A's address", func(t *testing.T) {
		for _, tc := range []struct {
			what   string
			holder Holder
		}{
			{"a pin", Holder{Svc: requesting(svc(nsOther, "thief", "thief-uid", ip), ip), InIngress: true}},
			{"spec.externalIPs", func() Holder {
				s := svc(nsOther, "extip", "extip-uid")
				s.Spec.ExternalIPs = []string{ip}
				return Holder{Svc: s, InExternalIPs: true}
			}()},
			{"an allocation MetalLB kept", Holder{Svc: svc(nsOther, "former", "former-uid", ip), InIngress: true}},
		} {
			p := PlanAddress(view(ownerAddress(ip), func(v *AddressView) {
				v.Holds = []*corev1.Service{hold(name, ip, false)}
				v.Holders = []Holder{tc.holder}
			}))
			evs := p.Events
			for _, c := range p.ClearIngress {
				evs = append(evs, c.Said)
			}
			said := false
			for _, e := range evs {
				said = said || e.Obj.GetNamespace() == nsOther
			}
			if !said {
				t.Errorf("%s: nothing said on the Service: %+v", tc.what, evs)
			}
			tenantReadable(t, tc.what, evs, nsOwner, nsOther)
			// The admin's object names the holder.
			if c := cond(p, ipamv1.ConditionConflict); c != nil && !strings.Contains(c.Message, nsOther+"/"+tc.holder.Svc.Name) {
				t.Errorf("%s: the address's Conflict does not name the holder: %q", tc.what, c.Message)
			}
		}
	})

	t.Run("NotServed: the attached Service is told about its own address only", func(t *testing.T) {
		a := ownerAddress(ip)
		a.Status.AttachedTo = &ipamv1.AttachmentReference{Kind: "Service", Namespace: nsOwner, Name: "web", UID: "web-uid"}
		p := PlanAddress(view(a, func(v *AddressView) {
			v.Attached, v.NotServedAfter = pinned(svc(nsOwner, "web", "web-uid"), ip), 10*time.Minute
			v.Unserved = UnservedWait{Since: v.Now.Add(-time.Hour), UID: "web-uid"}
		}))
		if len(p.Events) == 0 {
			t.Fatalf("%+v", p)
		}
		tenantReadable(t, "NotServed", p.Events, nsOwner, nsOther)
	})

}
