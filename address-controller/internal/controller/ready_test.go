package controller

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// kubectl runs the envtest kubectl as an admin (group system:masters) and returns its output and
// error.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	user, err := testEnv.AddUser(envtest.User{Name: "kubectl-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := user.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := k.Run(args...)
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	return string(out) + string(errOut), err
}

// checkReady fails unless the claim's Ready condition has the wanted status and reason and, like
// Bound and the status itself, records the claim's generation.
func checkReady(t *testing.T, c *ipamv1.IPAddressClaim, status metav1.ConditionStatus, reason string) {
	t.Helper()
	ready := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionReady)
	bound := meta.FindStatusCondition(c.Status.Conditions, ipamv1.ConditionBound)
	if ready == nil || ready.Status != status || ready.Reason != reason {
		t.Fatalf("Ready = %+v, want %s with reason %s", ready, status, reason)
	}
	if bound == nil || bound.Status != ready.Status || bound.Reason != ready.Reason || bound.Message != ready.Message {
		t.Fatalf("Bound = %+v does not say what Ready = %+v says", bound, ready)
	}
	for _, cond := range []*metav1.Condition{ready, bound} {
		if cond.ObservedGeneration != c.Generation {
			t.Fatalf("%s records generation %d, the claim is at %d", cond.Type, cond.ObservedGeneration, c.Generation)
		}
	}
	if c.Status.ObservedGeneration != c.Generation {
		t.Fatalf("status.observedGeneration = %d, the claim is at %d", c.Status.ObservedGeneration, c.Generation)
	}
}

// A claim is Ready when Bound and not before: a new claim reads observedGeneration 0 (so that
// kstatus sees it in progress before the core wrote anything), a Pending one has Ready False
// with Bound's reason, and kubectl wait --for=condition=Ready returns only once it is Bound.
func TestClaimReadyCondition(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ipamv1.GroupVersion.String(), "kind": "IPAddressClaim",
		"metadata": map[string]any{"namespace": ns, "name": "web"},
		"spec":     map[string]any{"className": "ready-later"},
	}}
	if err := admin.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	// The apiserver's own answer to the creation, before the core can have written anything.
	if og, found, err := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); err != nil || !found || og != 0 {
		t.Fatalf("a new claim's status.observedGeneration = %d (found %v, %v), want 0", og, found, err)
	}
	if conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); len(conds) != 0 {
		t.Fatalf("a new claim has conditions: %v", conds)
	}

	c := waitClaimReason(t, ns, "web", ipamv1.ReasonClassNotFound)
	checkReady(t, c, metav1.ConditionFalse, ipamv1.ReasonClassNotFound)
	ref := "ipaddressclaims.local.sdn.cozystack.io/web"
	if out, err := kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=2s", ref); err == nil {
		t.Fatalf("kubectl wait returned for a Pending claim: %s", out)
	}

	newClass(t, "ready-later", driverName)
	if out, err := kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", ref); err != nil {
		t.Fatalf("kubectl wait for a claim that binds: %v: %s", err, out)
	}
	c = getClaim(t, ns, "web")
	if c.Status.Phase != ipamv1.ClaimBound {
		t.Fatalf("Ready, but phase %s", c.Status.Phase)
	}
	checkReady(t, c, metav1.ConditionTrue, ipamv1.ReasonBound)
}

// status.usedBy names the objects the driver reports the claim's addresses attached to, in the
// claim's namespace only, and the Used-By column shows them.
func TestClaimUsedBy(t *testing.T) {
	ns := newNamespace(t)
	newClass(t, "used-by", driverName)
	newClaim(t, ns, "shared", "used-by", ipamv1.Dual)
	c := waitClaimPhase(t, ns, "shared", ipamv1.ClaimBound)
	if len(c.Status.UsedBy) != 0 {
		t.Fatalf("usedBy of a claim no Service uses: %+v", c.Status.UsedBy)
	}
	attach := func(ref *ipamv1.AttachmentReference) {
		t.Helper()
		for _, a := range c.Status.Addresses {
			addr := getAddress(t, a.Name)
			patch := client.MergeFrom(addr.DeepCopy())
			addr.Status.AttachedTo = ref
			if err := admin.Status().Patch(context.Background(), addr, patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUsedBy := func(want ...ipamv1.ClaimUser) {
		t.Helper()
		eventually(t, fmt.Sprintf("usedBy to be %v", want), func() (bool, error) {
			return slices.Equal(getClaim(t, ns, "shared").Status.UsedBy, want), nil
		})
	}

	attach(&ipamv1.AttachmentReference{Kind: "Service", Namespace: ns, Name: "web", UID: "u1"})
	waitUsedBy(ipamv1.ClaimUser{Kind: "Service", Name: "web"}) // both families, one entry
	out, err := kubectl(t, "get", "-n", ns, "ipaddressclaims.local.sdn.cozystack.io", "shared")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		!strings.Contains(lines[0], "USED-BY") || !strings.Contains(lines[1], " web ") {
		t.Fatalf("kubectl get shows no Used-By column with web:\n%s", out)
	}

	attach(&ipamv1.AttachmentReference{Kind: "Service", Namespace: "elsewhere", Name: "other"})
	waitUsedBy()
	attach(nil)
	consistently(t, "usedBy to stay empty", suiteQuietWait/8, func() (bool, error) {
		return len(getClaim(t, ns, "shared").Status.UsedBy) == 0, nil
	})
}
