package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// The guarded patches on the real apiserver: they test exactly their inputs, leave the rest of
// the object alone, and report a changed input instead of writing over it.
func TestGuardedPatchesTestOnlyTheirInputs(t *testing.T) {
	stopCore(t)
	ctx := context.Background()
	ref := &ipamv1.ClaimReference{Namespace: "guarded", Name: "c", UID: "u-1"}
	a := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-198-51-100-77", Finalizers: []string{"teardown.example.com"}},
		Spec:       ipamv1.IPAddressSpec{Address: "198.51.100.77", ClassName: "guarded", ClaimRef: ref},
	}
	create(t, a)
	read := func() *ipamv1.IPAddress {
		var got ipamv1.IPAddress
		if err := admin.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	// No status yet (dropped on create), and the driver's condition written after the read: the
	// core's fields merge next to it.
	fresh := a.DeepCopy()
	withDriver := read()
	orig := withDriver.DeepCopy()
	meta.SetStatusCondition(&withDriver.Status.Conditions, metav1.Condition{Type: "Held", Status: metav1.ConditionTrue, Reason: "Test", Message: "m"})
	if err := admin.Status().Patch(ctx, withDriver, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if ok, err := setPhaseGuarded(ctx, admin, fresh, ipamv1.AddressBound, nil); err != nil || !ok {
		t.Fatalf("phase on a fresh address: ok=%v err=%v", ok, err)
	}
	if got := read(); got.Status.Phase != ipamv1.AddressBound || !meta.IsStatusConditionTrue(got.Status.Conditions, "Held") {
		t.Fatalf("status %+v, want Bound next to the driver's Held", got.Status)
	}
	orig = read()
	// A stale claimRef: refused, nothing written.
	stale := orig.DeepCopy()
	stale.Spec.ClaimRef = &ipamv1.ClaimReference{Namespace: "guarded", Name: "other"}
	if ok, err := setPhaseGuarded(ctx, admin, stale, ipamv1.AddressReleased, nil); err != nil || ok {
		t.Fatalf("phase over a stale claimRef: ok=%v err=%v, want refused", ok, err)
	}
	if got := read(); got.Status.Phase != ipamv1.AddressBound {
		t.Fatalf("phase %q after a refused patch, want Bound", got.Status.Phase)
	}
	// A driver condition changed since the read: not an input of the phase, so no refusal.
	changed := read()
	o2 := changed.DeepCopy()
	meta.SetStatusCondition(&changed.Status.Conditions, metav1.Condition{Type: "Held", Status: metav1.ConditionFalse, Reason: "Test", Message: "m2"})
	if err := admin.Status().Patch(ctx, changed, client.MergeFrom(o2)); err != nil {
		t.Fatal(err)
	}
	// A read from before the driver's condition, but with the status and claimRef as they are:
	// the phase and releasedAt change, the condition stays.
	before := o2.DeepCopy()
	now := metav1.Now()
	if ok, err := setPhaseGuarded(ctx, admin, before, ipamv1.AddressReleased, &now); err != nil || !ok {
		t.Fatalf("phase next to the driver's condition: ok=%v err=%v", ok, err)
	}
	got := read()
	if c := meta.FindStatusCondition(got.Status.Conditions, "Held"); got.Status.Phase != ipamv1.AddressReleased || got.Status.ReleasedAt == nil ||
		len(got.Status.Conditions) != 1 || c == nil || c.Status != metav1.ConditionFalse || c.Message != "m2" {
		t.Fatalf("status %+v: want Released with releasedAt and the driver's latest Held (False, m2), not the read's", got.Status)
	}
	if ok, err := setPhaseGuarded(ctx, admin, got.DeepCopy(), ipamv1.AddressBound, nil); err != nil || !ok {
		t.Fatalf("back to Bound: ok=%v err=%v", ok, err)
	}
	if got := read(); got.Status.Phase != ipamv1.AddressBound || got.Status.ReleasedAt != nil {
		t.Fatalf("status %+v: want Bound without releasedAt", got.Status)
	}

	// The finalizer: a changed list refuses, the list as read gets the finalizer appended.
	staleF := read()
	staleF.Finalizers = []string{"someone.else"}
	if ok, err := addFinalizerGuarded(ctx, admin, staleF, ipamv1.FinalizerAddress); err != nil || ok {
		t.Fatalf("finalizer over a changed list: ok=%v err=%v, want refused", ok, err)
	}
	if ok, err := addFinalizerGuarded(ctx, admin, read(), ipamv1.FinalizerAddress); err != nil || !ok {
		t.Fatalf("finalizer: ok=%v err=%v", ok, err)
	}
	if got := read(); len(got.Finalizers) != 2 || got.Finalizers[0] != "teardown.example.com" || got.Finalizers[1] != ipamv1.FinalizerAddress {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	t.Cleanup(func() {
		got := read()
		p := client.MergeFrom(got.DeepCopy())
		got.Finalizers = nil
		_ = admin.Patch(ctx, got, p)
		_ = admin.Delete(ctx, got)
	})
}

// A claimRef stored with a field this client omits (an explicit empty uid, as a hand-written
// manifest may have) never matches the guarded patch's test: the phase still converges, through
// the locked patch, at the cost of one refusal per phase change and no loop.
func TestPhaseConvergesWhenTheClaimRefTestCannotMatch(t *testing.T) {
	ctx := context.Background()
	since := time.Now()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "local.sdn.cozystack.io/v1alpha1", "kind": "IPAddress",
		"metadata": map[string]any{"name": "ip-198-51-100-78"},
		"spec": map[string]any{"address": "198.51.100.78", "className": "fallback",
			"claimRef": map[string]any{"namespace": "fallback", "name": "gone", "uid": ""}},
	}}
	if err := admin.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var a ipamv1.IPAddress
		if admin.Get(ctx, client.ObjectKey{Name: "ip-198-51-100-78"}, &a) == nil {
			p := client.MergeFrom(a.DeepCopy())
			a.Finalizers = nil
			_ = admin.Patch(ctx, &a, p)
			_ = admin.Delete(ctx, &a)
		}
	})
	a := waitAddressPhase(t, "ip-198-51-100-78", ipamv1.AddressReleased)
	// The driver reports a conflict: the phase must follow, through the fallback.
	orig := a.DeepCopy()
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: ipamv1.ConditionConflict, Status: metav1.ConditionTrue, Reason: "Test", Message: "m"})
	if err := admin.Status().Patch(ctx, a, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	waitAddressPhase(t, "ip-198-51-100-78", ipamv1.AddressConflict)
	consistently(t, "no more refusals", 2*time.Second, func() (bool, error) {
		var refused []string
		for _, w := range auditedRecords(t, coreUser, since) {
			if w.Resource == "ipaddresses" && w.Name == "ip-198-51-100-78" && w.Code >= 400 {
				refused = append(refused, fmt.Sprintf("%s %s: %d", w.Verb, w.URI, w.Code))
			}
		}
		if len(refused) > 1 {
			return false, fmt.Errorf("%d refused writes, want at most the one guarded patch:\n%s", len(refused), strings.Join(refused, "\n"))
		}
		return true, nil
	})
}

func TestTestFailedTellsAPatchThatDoesNotApplyFromARefusal(t *testing.T) {
	gk := schema.GroupKind{Group: "local.sdn.cozystack.io", Kind: "IPAddress"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the patch handler's 422", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "testing value /spec/claimRef failed", 0, false), true},
		{"a validation rule or admission policy", apierrors.NewInvalid(gk, "ip-198-51-100-1", field.ErrorList{field.Forbidden(field.NewPath("status"), "no")}), false},
		{"a ValidatingAdmissionPolicy denial with reason Invalid", &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: `ipaddresses "ip-198-51-100-1" is invalid: ValidatingAdmissionPolicy 'p' with binding 'b' denied request`,
			Details: &metav1.StatusDetails{Name: "ip-198-51-100-1", Group: "local.sdn.cozystack.io", Kind: "ipaddresses",
				Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Message: "denied"}}}}}, false},
		{"a conflict", apierrors.NewConflict(schema.GroupResource{}, "x", nil), false},
		{"no error", nil, false},
	} {
		if got := testFailed(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
