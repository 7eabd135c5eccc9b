package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// coreSA is the core's identity on the sandbox (driverSA, the driver's, is in policy_test.go).
const coreSA = "system:serviceaccount:cozy-address-controller:address-controller"

// projectWrites returns the writes of both controllers since `since`, Lease renewals left out,
// as "identity verb URI code" lines.
func projectWrites(t *testing.T, auditLog string, since time.Time) []string {
	t.Helper()
	evs, err := controlplane.AuditWrites(auditLog, func(e controlplane.AuditEvent) bool {
		return (e.User.Username == coreSA || e.User.Username == driverSA) && !e.Stamp.Before(since) &&
			e.ObjectRef != nil && e.ObjectRef.Resource != "leases"
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		who := "core"
		if e.User.Username == driverSA {
			who = "driver"
		}
		code := 0
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		out = append(out, fmt.Sprintf("%s %s %s %d", who, e.Verb, e.RequestURI, code))
	}
	return out
}

// waitQuiet waits until neither controller has written anything for quiet.
func waitQuiet(ctx context.Context, t *testing.T, auditLog string, quiet time.Duration) time.Time {
	t.Helper()
	start := time.Now()
	eventually(ctx, t, 2*time.Minute, "both controllers to be quiet", func(context.Context) (bool, error) {
		if w := projectWrites(t, auditLog, time.Now().Add(-quiet)); len(w) > 0 || time.Since(start) < quiet {
			return false, fmt.Errorf("%d writes in the last %s", len(w), quiet)
		}
		return true, nil
	})
	return time.Now()
}

// classStatusWrites splits the writes of a class's status (its capacity, which the driver writes
// at most once per class per driver.DefaultCapacityEvery however many addresses come) from the
// others.
func classStatusWrites(writes []string) (classes, others []string) {
	for _, w := range writes {
		if strings.Contains(w, "/ipaddressclasses/") && strings.Contains(w, "/status") {
			classes = append(classes, w)
		} else {
			others = append(others, w)
		}
	}
	return classes, others
}

// The write budget (docs/design.md#the-write-budget) on the sandbox, as installed by the charts
// (the core's protection policy and the CRD's status default included), with the real MetalLB: all
// of this project's writes, events included, from the creation of claims until each is Bound and
// held, are at most 7 per reserved address; attaching a Service to each costs at most 3 (the
// driver's attachedTo and pin, the hold staying as the Service shares its IP, and the claim's
// status.usedBy). Counted from the audit log: every write either
// controller made while the test ran, whatever it concerned, so that waste anywhere shows; a
// class's capacity writes are counted per class and period instead.
func TestWriteBudgetOnTheSandbox(t *testing.T) {
	f := features.New("the write budget per reserved address and per attach").
		Assess("claims, then Services naming them", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			local := localCluster(t, "it counts writes in the local apiserver's audit log")
			c := ipamClient(t)
			ns := tenantNamespace(ctx, t, c, "tenant-budget")
			class := poolWithClass(ctx, t, c, "e2e-budget", ipamv1.ReclaimDelete, "203.0.113.192/28")
			t.Cleanup(func() {
				_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			})
			// Half the claims name no class: the class is also the default (the newest, so it
			// wins over the walk-through's), which sends them through the class the core records
			// in its stamp before it writes any status.
			patch := client.MergeFrom(class.DeepCopy())
			metav1.SetMetaDataAnnotation(&class.ObjectMeta, ipamv1.AnnotationDefaultClass, "true")
			if err := c.Patch(ctx, class, patch); err != nil {
				t.Fatal(err)
			}
			const n = 8

			// Quiet for longer than client-go's event retry (10s, jittered by up to 25%): an
			// earlier test's event whose first attempt failed (two alike events a millisecond apart
			// make a 404 patch and a 409 create) is sent again that long after, and must not land
			// in the counts below.
			since := waitQuiet(ctx, t, local.AuditLog, 15*time.Second)
			for i := range n {
				named := class.Name
				if i%2 == 1 {
					named = ""
				}
				newTenantClaim(ctx, t, c, ns, fmt.Sprintf("c%d", i), named, ipamv1.IPv4)
			}
			claims := make([]*ipamv1.IPAddressClaim, n)
			for i := range n {
				claims[i] = waitClaimBound(ctx, t, c, ns, fmt.Sprintf("c%d", i))
				if claims[i].Status.ClassName != class.Name {
					t.Errorf("claim %s is Bound in class %q, want %s", claims[i].Name, claims[i].Status.ClassName, class.Name)
				}
				waitHeld(ctx, t, c, claims[i].Status.Addresses[0].Name, claims[i].Status.Addresses[0].Address)
			}
			attachFrom := waitQuiet(ctx, t, local.AuditLog, 3*time.Second)
			classWrites, reserve := classStatusWrites(projectWrites(t, local.AuditLog, since))
			t.Logf("%d writes for %d reserved addresses (%.1f each):\n%s", len(reserve), n, float64(len(reserve))/n, strings.Join(reserve, "\n"))
			if len(reserve) > 7*n {
				t.Errorf("%d writes for %d reserved addresses (%.1f each), budget 7 each", len(reserve), n, float64(len(reserve))/n)
			}
			if i := slices.IndexFunc(reserve, func(w string) bool { return !strings.HasSuffix(w, " 200") && !strings.HasSuffix(w, " 201") }); i >= 0 {
				t.Errorf("a write was refused or failed: %s", reserve[i])
			}

			for i, claim := range claims {
				if err := c.Create(ctx, lbService(ns, fmt.Sprintf("s%d", i), map[string]string{claimAnnotation: claim.Name}, false)); err != nil {
					t.Fatal(err)
				}
			}
			for i, claim := range claims {
				waitIngress(ctx, t, c, ns, fmt.Sprintf("s%d", i), claimIPs(claim))
			}
			waitQuiet(ctx, t, local.AuditLog, 3*time.Second)
			attachClassWrites, attach := classStatusWrites(projectWrites(t, local.AuditLog, attachFrom))
			t.Logf("%d writes for %d attaches (%.1f each):\n%s", len(attach), n, float64(len(attach))/n, strings.Join(attach, "\n"))
			if len(attach) > 3*n {
				t.Errorf("%d writes for %d attaches (%.1f each), budget 3 each", len(attach), n, float64(len(attach))/n)
			}
			// Every class on the sandbox may have its capacity written once at the start of the
			// count, then once per period at most.
			classWrites = append(classWrites, attachClassWrites...)
			var classes ipamv1.IPAddressClassList
			if err := c.List(ctx, &classes); err != nil {
				t.Fatal(err)
			}
			periods := int(time.Since(since)/(30*time.Second)) + 1
			t.Logf("%d class status writes:\n%s", len(classWrites), strings.Join(classWrites, "\n"))
			if i := slices.IndexFunc(classWrites, func(w string) bool { return !strings.HasSuffix(w, " 200") }); i >= 0 {
				t.Errorf("a class status write was refused or failed: %s", classWrites[i])
			}
			if len(classWrites) > len(classes.Items)*periods {
				t.Errorf("%d class status writes in %d periods of 30s for %d classes", len(classWrites), periods, len(classes.Items))
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
