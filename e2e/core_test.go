package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// ipamClient is a client that knows the project's API.
func ipamClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ipamv1.AddToScheme(scheme)
	c, err := client.New(cluster.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCoreRunsAsItsServiceAccount(t *testing.T) {
	f := features.New("the address-controller process binds claims with its own identity and RBAC").
		Assess("a claim binds a pre-provisioned address", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			class := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-manual"},
				Spec: ipamv1.IPAddressClassSpec{Provisioner: "nobody.example.org"}}
			addr := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "ip-198-51-100-200"},
				Spec: ipamv1.IPAddressSpec{Address: "198.51.100.200", ClassName: class.Name, ReclaimPolicy: ipamv1.ReclaimDelete}}
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Name: "e2e-core", Namespace: "tenant-example"},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: class.Name}}
			for _, o := range []client.Object{class, addr, claim} {
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			eventually(ctx, t, 30*time.Second, "the claim to be Bound", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim)
				return claim.Status.Phase == ipamv1.ClaimBound, err
			})
			if got := claim.Status.Addresses; len(got) != 1 || got[0].Address != "198.51.100.200" {
				t.Fatalf("claim addresses %+v", got)
			}

			local, ok := cluster.(*provider.LocalCluster)
			if !ok {
				return ctx
			}
			// The writes came from the controller's ServiceAccount, so its generated RBAC suffices.
			sa := "system:serviceaccount:cozy-address-controller:address-controller"
			writes, err := controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
				return e.User.Username == sa && e.ObjectRef != nil && e.ObjectRef.Resource == "ipaddressclaims"
			})
			if err != nil || len(writes) == 0 {
				t.Fatalf("no claim writes by %s in the audit log (%v)", sa, err)
			}
			// Its metrics endpoint serves the project's metrics.
			resp, err := http.Get(local.Endpoints["address-controller/metrics"])
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, want := range []string{
				`address_controller_addresses{class="e2e-manual",phase="Bound"} 1`,
				`address_controller_claims{phase="Bound"}`,
				`address_controller_claim_bind_duration_seconds_count`,
				`controller_runtime_reconcile_total{controller="ipaddressclaim"`,
			} {
				if !strings.Contains(string(body), want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			// Clean up in the documented order: claim (the Delete policy removes the address), class.
			if err := c.Delete(ctx, claim); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the address to be deleted with its claim", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(addr), addr)
				return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
			})
			if err := c.Delete(ctx, class); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 30*time.Second, "the class to be deleted", func(ctx context.Context) (bool, error) {
				err := c.Get(ctx, client.ObjectKeyFromObject(class), class)
				return err != nil, client.IgnoreNotFound(err)
			})
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
