package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// oldestPendingGauge gathers address_controller_oldest_pending_claim_timestamp_seconds from a
// registry holding the running core's metrics; ok is false when the series is absent.
func oldestPendingGauge(t *testing.T) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(coreMetrics); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "address_controller_oldest_pending_claim_timestamp_seconds" {
			if len(f.GetMetric()) != 1 {
				t.Fatalf("%d series of the oldest-Pending gauge", len(f.GetMetric()))
			}
			return f.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The alert on Pending claims needs the age of the oldest one, not the number of them (a stream
// of claims each Pending for a moment keeps a count above zero for ever): the core exports the
// creation time of the oldest claim that waits for an address, Pending or not yet given a phase,
// and no series when none waits.
func TestOldestPendingClaimGauge(t *testing.T) {
	ns := newNamespace(t)
	waiting := newClaim(t, ns, "waits", "no-such-class", ipamv1.IPv4)
	waitClaimReason(t, ns, "waits", ipamv1.ReasonClassNotFound)

	eventually(t, "the gauge to show the oldest waiting claim", func() (bool, error) {
		var claims ipamv1.IPAddressClaimList
		if err := admin.List(context.Background(), &claims); err != nil {
			return false, err
		}
		want := 0.0
		for _, c := range claims.Items {
			if (c.Status.Phase == ipamv1.ClaimPending || c.Status.Phase == "") && c.DeletionTimestamp == nil {
				if ts := float64(c.CreationTimestamp.Unix()); want == 0 || ts < want {
					want = ts
				}
			}
		}
		got, ok := oldestPendingGauge(t)
		if !ok {
			return false, fmt.Errorf("no series")
		}
		if got > float64(getClaim(t, ns, "waits").CreationTimestamp.Unix()) {
			return false, fmt.Errorf("gauge %v is later than a waiting claim's creation", got)
		}
		if got != want {
			return false, fmt.Errorf("gauge %v, oldest waiting claim created at %v", got, want)
		}
		return true, nil
	})

	del(t, waiting)
	waitGone(t, waiting)
	eventually(t, "the gauge to drop the deleted claim", func() (bool, error) {
		var claims ipamv1.IPAddressClaimList
		if err := admin.List(context.Background(), &claims); err != nil {
			return false, err
		}
		others := 0
		for _, c := range claims.Items {
			if (c.Status.Phase == ipamv1.ClaimPending || c.Status.Phase == "") && c.DeletionTimestamp == nil {
				others++
			}
		}
		_, ok := oldestPendingGauge(t)
		if ok != (others > 0) {
			return false, fmt.Errorf("series present %v with %d other waiting claims", ok, others)
		}
		return true, nil
	})
}
