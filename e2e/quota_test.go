package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// quotaResource is the object-count quota of claims, as the operating guide documents it.
const quotaResource corev1.ResourceName = "count/ipaddressclaims.local.sdn.cozystack.io"

func TestTenantQuotaLimitsClaims(t *testing.T) {
	f := features.New("a ResourceQuota on count/ipaddressclaims limits how many addresses a tenant reserves").
		Assess("the third claim is refused with the quota named, and allowed once one is deleted", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			admin := ipamClient(t)
			ns := tenantNamespace(ctx, t, admin, "tenant-quota")
			t.Cleanup(func() {
				bg := context.Background()
				_ = admin.DeleteAllOf(bg, &ipamv1.IPAddressClaim{}, client.InNamespace(ns))
				_ = admin.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			})
			quota := &corev1.ResourceQuota{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reserved-ips"},
				Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{quotaResource: resource.MustParse("2")}},
			}
			if err := admin.Create(ctx, quota); err != nil {
				t.Fatal(err)
			}
			// The quota controller (kube-controller-manager) computes the usage; until it has,
			// the apiserver refuses every claim of the namespace. It counts a custom resource only
			// once its discovery (every 30 s) has found the CRD; a quota it saw before that is
			// recomputed at its next full resync (5 minutes by default, 30 s on the local control
			// plane).
			eventually(ctx, t, 3*time.Minute, "the quota's usage to be computed", func(ctx context.Context) (bool, error) {
				if err := admin.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
					return false, err
				}
				_, ok := quota.Status.Used[quotaResource]
				return ok, nil
			})
			// The tenant's admin, through the chart's tenant role.
			bind(ctx, t, admin, ns, "address-controller-tenant-admin", rbacv1.Subject{Kind: "User", Name: "quota-owner", APIGroup: rbacv1.GroupName})
			owner, _ := as(t, "quota-owner")
			claim := func(name string) *ipamv1.IPAddressClaim {
				// A class that does not exist: the claims stay Pending and reserve nothing in
				// MetalLB, which is all this test needs.
				return &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: ipamv1.IPAddressClaimSpec{ClassName: "quota-test-none"}}
			}
			eventually(ctx, t, 30*time.Second, "the tenant role binding to take effect", func(ctx context.Context) (bool, error) {
				err := owner.Create(ctx, claim("first"))
				return err == nil || apierrors.IsAlreadyExists(err), err
			})
			if err := owner.Create(ctx, claim("second")); err != nil {
				t.Fatalf("the second claim, within the quota: %v", err)
			}
			err := owner.Create(ctx, claim("third"))
			if !apierrors.IsForbidden(err) {
				t.Fatalf("the third claim over a quota of 2: %v, want Forbidden", err)
			}
			for _, want := range []string{"exceeded quota: reserved-ips", string(quotaResource), "limited: " + string(quotaResource) + "=2"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
			// Deleting a claim (its finalizer removed by the core) frees a slot.
			if err := owner.Delete(ctx, claim("first")); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "a claim within the quota again", func(ctx context.Context) (bool, error) {
				err := owner.Create(ctx, claim("third"))
				return err == nil, err
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
