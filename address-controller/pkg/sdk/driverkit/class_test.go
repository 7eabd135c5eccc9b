package driverkit

import (
	"errors"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/testsupport/envtestutil"
)

// On a real apiserver: AcceptClass writes the Accepted condition of its own class once (with the
// class's generation), writes nothing when the condition stands, leaves another driver's class and
// a missing one alone, writes nothing when the verdict fails, and reports the condition before.
func TestAcceptClassWritesOnlyItsOwnChangedCondition(t *testing.T) {
	cfg := envtestutil.Start(t, &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const me = "me.example.org"
	for _, cl := range []*ipamv1.IPAddressClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: me}},
		{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: ipamv1.IPAddressClassSpec{Provisioner: "other.example.org"}},
	} {
		if err := c.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	accept := func(status metav1.ConditionStatus, reason string) func(*ipamv1.IPAddressClass) (metav1.Condition, error) {
		return func(*ipamv1.IPAddressClass) (metav1.Condition, error) {
			calls++
			return metav1.Condition{Status: status, Reason: reason, Message: "because " + reason}, nil
		}
	}
	rv := func(name string) string {
		var cl ipamv1.IPAddressClass
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &cl); err != nil {
			t.Fatal(err)
		}
		return cl.ResourceVersion
	}

	got, err := AcceptClass(ctx, c, "mine", me, accept(metav1.ConditionTrue, ReasonAccepted))
	if err != nil || !got.Wrote || got.Before != nil || got.Class == nil {
		t.Fatalf("first pass: %+v, %v; want a write with no condition before", got, err)
	}
	var cl ipamv1.IPAddressClass
	if err := c.Get(ctx, client.ObjectKey{Name: "mine"}, &cl); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(cl.Status.Conditions, ipamv1.ConditionAccepted)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonAccepted || cond.ObservedGeneration != cl.Generation {
		t.Fatalf("condition written: %+v", cond)
	}

	before := rv("mine")
	got, err = AcceptClass(ctx, c, "mine", me, accept(metav1.ConditionTrue, ReasonAccepted))
	if err != nil || got.Wrote || got.Before == nil || got.Before.Reason != ReasonAccepted || rv("mine") != before {
		t.Fatalf("unchanged verdict: %+v, %v, resourceVersion %s → %s; want no write", got, err, before, rv("mine"))
	}

	_, err = AcceptClass(ctx, c, "mine", me, func(*ipamv1.IPAddressClass) (metav1.Condition, error) {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: "Refused"}, errors.New("pool unreadable")
	})
	if err == nil || rv("mine") != before {
		t.Fatalf("failed verdict: err %v, resourceVersion %s → %s; want the error and no write", err, before, rv("mine"))
	}

	got, err = AcceptClass(ctx, c, "mine", me, accept(metav1.ConditionFalse, "Refused"))
	if err != nil || !got.Wrote || got.Before == nil || got.Before.Status != metav1.ConditionTrue {
		t.Fatalf("changed verdict: %+v, %v; want a write reporting the Accepted condition before", got, err)
	}

	calls = 0
	theirs := rv("theirs")
	for _, name := range []string{"theirs", "absent"} {
		got, err = AcceptClass(ctx, c, name, me, accept(metav1.ConditionTrue, ReasonAccepted))
		if err != nil || got.Wrote || got.Class != nil {
			t.Fatalf("class %s: %+v, %v; want nothing", name, got, err)
		}
	}
	if calls != 0 || rv("theirs") != theirs {
		t.Fatalf("another driver's class or a missing one was judged (%d calls) or written", calls)
	}
}
