package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/driver/plan"
	"github.com/cozystack/reserved-ips/metallb-iad/internal/metallb"
)

// A Service that names no claim but requests a reserved IP (an admin's pin, or
// spec.loadBalancerIP) gets a Warning saying so: MetalLB refuses it while a placeholder holds the
// IP, and in a tenant namespace the chart's hand-over-events policy keeps MetalLB's own report
// off the Service. Also a legacy metallb.universe.tf pin, and a pin written before the address
// existed (told when it appears). Requesting an IP that is not reserved says nothing; dropping
// the request ends the condition (said again if it comes back).
func TestAServiceRequestingAReservedAddressIsTold(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	newPoolClass(t, "requested", "198.51.100.80/28")
	ns := newNamespace(t, "requested")
	const ip = "198.51.100.81"
	_, a := boundClaimWithAddress(t, ns, "c", "requested", ip)

	// A pin written before its address exists is told once the address appears (the index of
	// requested IPs maps the address's event to the Service).
	const later = "198.51.100.82"
	early := tenantService(ns, "early-pin", map[string]string{metallb.AnnotationLoadBalancerIPs: later})
	if err := admin.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	pinnedByAdmin := tenantService(ns, "admin-pin", map[string]string{metallb.AnnotationLoadBalancerIPs: ip})
	legacy := tenantService(ns, "legacy-pin", map[string]string{metallb.LegacyPrefix + "loadBalancerIPs": ip})
	byField := tenantService(ns, "by-field", nil)
	byField.Spec.LoadBalancerIP = ip
	free := tenantService(ns, "free-ip", map[string]string{metallb.AnnotationLoadBalancerIPs: "198.51.100.88"})
	for _, s := range []*corev1.Service{pinnedByAdmin, legacy, byField, free} {
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	consistently(t, time.Second, "nothing said about a pin of an IP not reserved yet", func() (bool, error) {
		return len(driverEvents(t, ns, string(early.UID), plan.ReasonReservedAddressRequested)) == 0, nil
	})
	_, a2 := boundClaimWithAddress(t, ns, "c2", "requested", later)
	for _, tc := range []struct {
		s           *corev1.Service
		addr, claim string
	}{{pinnedByAdmin, a.Name, ns + "/c"}, {legacy, a.Name, ns + "/c"}, {byField, a.Name, ns + "/c"}, {early, a2.Name, ns + "/c2"}} {
		eventually(t, "the ReservedAddressRequested Warning on "+tc.s.Name, func() (bool, error) {
			evs := driverEvents(t, ns, string(tc.s.UID), plan.ReasonReservedAddressRequested)
			if len(evs) > 1 {
				t.Fatalf("said %d times", len(evs))
			}
			if len(evs) == 1 && !(strings.Contains(evs[0].Note, tc.addr) && strings.Contains(evs[0].Note, tc.claim+")") &&
				strings.Contains(evs[0].Note, ipamv1.AnnotationServiceClaim)) {
				t.Fatalf("the Warning on %s does not name %s, claim %s and the annotation: %s", tc.s.Name, tc.addr, tc.claim, evs[0].Note)
			}
			return len(evs) == 1, nil
		})
	}
	// The Services' own later passes say nothing more; the free IP is never said.
	touch := func(s *corev1.Service, mutate func(*corev1.Service)) {
		t.Helper()
		eventually(t, "update "+s.Name, func() (bool, error) {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return false, err
			}
			mutate(s)
			return true, admin.Update(ctx, s)
		})
	}
	touch(pinnedByAdmin, func(s *corev1.Service) { s.Labels = map[string]string{"touched": "1"} })
	consistently(t, 3*time.Second, "one Warning per Service, none for a free IP", func() (bool, error) {
		return len(driverEvents(t, ns, string(pinnedByAdmin.UID), plan.ReasonReservedAddressRequested)) == 1 &&
			len(driverEvents(t, ns, string(free.UID), plan.ReasonReservedAddressRequested)) == 0, nil
	})
	// Dropped (the driver forgets it said it), then requested again: said again.
	touch(pinnedByAdmin, func(s *corev1.Service) { delete(s.Annotations, metallb.AnnotationLoadBalancerIPs) })
	eventually(t, "the driver to see the request dropped", func() (bool, error) {
		return !testDriver.announce.Remembers(client.ObjectKeyFromObject(pinnedByAdmin), plan.ReasonReservedAddressRequested), nil
	})
	touch(pinnedByAdmin, func(s *corev1.Service) { s.Annotations = map[string]string{metallb.AnnotationLoadBalancerIPs: ip} })
	eventually(t, "the Warning said again", func() (bool, error) {
		return len(driverEvents(t, ns, string(pinnedByAdmin.UID), plan.ReasonReservedAddressRequested)) == 2, nil
	})
}
