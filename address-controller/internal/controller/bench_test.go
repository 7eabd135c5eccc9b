package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// BenchmarkBindPreProvisioned measures how fast the core binds claims to Available addresses,
// as a ratio to a baseline measured in the same run on the same apiserver: the same number of
// claim creations plus the writes a bind needs at the least (claimRef patch, claim status
// patch), issued directly. The ratio is what to compare across runs; these machines are too
// noisy for absolute times.
//
//	make bench    (or: go test -run '^$' -bench BindPreProvisioned ./address-controller/internal/controller/)
func BenchmarkBindPreProvisioned(b *testing.B) {
	const n = 100
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		class := ns
		benchRound++
		setupBench(b, ns, class, n, uint8(benchRound))
		claims := make([]*ipamv1.IPAddressClaim, n)
		for j := range claims {
			claims[j] = &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", j)},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: class, Family: ipamv1.IPv6}}
		}

		// Baseline: create the claims, then the two writes per bind, by hand, in parallel.
		baseNS := ns + "-base"
		setupBench(b, baseNS, "", 0, 0)
		start := time.Now()
		parallelB(b, n, func(j int) error {
			c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: baseNS, Name: fmt.Sprintf("c%d", j)},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: "bench-baseline-none"}}
			if err := admin.Create(ctx, c); err != nil {
				return err
			}
			cm := c.DeepCopy()
			cm.Labels = map[string]string{"bound": "ip-x"}
			if err := admin.Patch(ctx, cm, client.MergeFrom(c)); err != nil {
				return err
			}
			return admin.Status().Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(`{"status":{"phase":"Pending"}}`)))
		})
		baseline := time.Since(start)

		// The core.
		b.StartTimer()
		start = time.Now()
		parallelB(b, n, func(j int) error { return admin.Create(ctx, claims[j]) })
		deadline := time.Now().Add(2 * time.Minute)
		for _, c := range claims {
			for {
				var got ipamv1.IPAddressClaim
				if err := admin.Get(ctx, client.ObjectKeyFromObject(c), &got); err == nil && got.Status.Phase == ipamv1.ClaimBound {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("claim %s not Bound after 2 minutes", c.Name)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(elapsed.Seconds()/baseline.Seconds(), "x-baseline")
		b.ReportMetric(float64(n)/elapsed.Seconds(), "binds/s")
	}
}

// benchRound numbers the address blocks across every run of the benchmark function.
var benchRound int

func setupBench(b *testing.B, ns, class string, n int, block uint8) {
	b.Helper()
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	if class == "" {
		return
	}
	if err := admin.Create(ctx, &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: ipamv1.IPAddressClassSpec{Provisioner: noDriver}}); err != nil {
		b.Fatal(err)
	}
	// Addresses from 2001:db8:ffXX::/112, one block per iteration.
	ip := netip.MustParseAddr(fmt.Sprintf("2001:db8:ff%02x::", block))
	addrs := make([]string, n)
	for j := range addrs {
		ip = ip.Next()
		addrs[j] = ip.String()
	}
	parallelB(b, n, func(j int) error {
		a := addrs[j]
		return admin.Create(ctx, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ipamv1.AddressName(netip.MustParseAddr(a))},
			Spec: ipamv1.IPAddressSpec{Address: a, ClassName: class}})
	})
}

// parallel runs f for 0..n-1 on 16 goroutines and returns the first error.
func parallel(n int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 16)
	for j := 0; j < n; j++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(j); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func parallelB(b *testing.B, n int, f func(int) error) {
	if err := parallel(n, f); err != nil {
		b.Fatal(err)
	}
}
