package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/cozystack/reserved-ips/tools/policycel"
)

// The fuzz test of tools/policycel evaluates the chart's policy with the apiserver's CEL library
// outside any cluster. This checks, for a seeded sample of the same generated writes, that the
// real apiserver decides exactly as that evaluation does (dry-run writes as each user).
func TestPolicyCELMatchesTheAPIServer(t *testing.T) {
	f := features.New("service-pins policy: offline CEL evaluation agrees with the apiserver").
		Assess("a seeded sample of Service writes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			admin := ipamClient(t)
			ns := tenantNamespace(ctx, t, admin, "tenant-celsample")
			t.Cleanup(func() {
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			})
			for _, g := range []string{"system:authenticated", "system:serviceaccounts"} {
				bind(ctx, t, admin, ns, "edit", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
			}
			driverUser := "system:serviceaccount:" + driverNamespace + ":metallb-iad"
			policy, err := policycel.Load(filepath.Join(".."), driverNamespace, map[string]any{"metallbNamespace": metallbNamespace})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(13, 13))
			const samples = 40
			agreed, denied := 0, 0
			for i := range samples {
				b := make([]byte, 64)
				for j := range b {
					b[j] = byte(rng.IntN(256))
				}
				req := policycel.GenRequest(b, driverUser)
				name := fmt.Sprintf("cel-%d", i)
				newObj := toService(t, req.Object, ns, name)
				c, _ := as(t, req.Username, req.Groups...)
				if req.OldObject != nil {
					old := toService(t, req.OldObject, ns, name)
					if err := admin.Create(ctx, old); err != nil {
						t.Fatalf("sample %d: creating the old Service as admin: %v", i, err)
					}
					// Controllers may touch the Service between the create and the update: the
					// apiserver then decides on what it holds, so the offline evaluation does too.
					for attempt := 0; ; attempt++ {
						var current corev1.Service
						if err = admin.Get(ctx, client.ObjectKeyFromObject(old), &current); err != nil {
							t.Fatal(err)
						}
						if req.OldObject, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&current); err != nil {
							t.Fatal(err)
						}
						newObj.ResourceVersion = current.ResourceVersion
						err = c.Update(ctx, newObj, client.DryRunAll)
						if !apierrors.IsConflict(err) || attempt == 5 {
							break
						}
					}
				} else {
					err = c.Create(ctx, newObj, client.DryRunAll)
				}
				want, evalErr := policy.Evaluate(req)
				if evalErr != nil {
					t.Fatal(evalErr)
				}
				admitted := err == nil
				if err != nil && !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || err != nil && !strings.Contains(err.Error(), policycel.PolicyName) {
					t.Fatalf("sample %d as %s: the write failed for another reason than the policy: %v", i, req.Username, err)
				}
				if admitted != want.Allowed {
					t.Errorf("sample %d as %s %v: apiserver admitted=%v (%v), offline CEL allowed=%v (%q)\nold %v\nnew %v",
						i, req.Username, req.Groups, admitted, err, want.Allowed, want.Message, req.OldObject, req.Object)
					continue
				}
				agreed++
				if !admitted {
					denied++
				}
			}
			t.Logf("%d of %d sampled writes decided alike (%d denied, %d admitted)", agreed, samples, denied, agreed-denied)
			if denied == 0 || denied == agreed {
				t.Fatalf("the sample does not exercise both outcomes (%d denied of %d)", denied, agreed)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func toService(t *testing.T, obj map[string]any, ns, name string) *corev1.Service {
	t.Helper()
	u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(obj)}
	u.SetNamespace(ns)
	u.SetName(name)
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &svc); err != nil {
		t.Fatal(err)
	}
	return &svc
}
