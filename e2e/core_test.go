package e2e

import (
	"context"
	"fmt"
	"io"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	_ = apiextensionsv1.AddToScheme(scheme)
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
				t.Logf("%s provider: the audit-log and loopback metrics checks are not run (the local provider's files and endpoints)", providerName())
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

// A restart of the core over settled objects writes nothing. The restarted controllers are
// first shown to have run over every object (their reconcile counters, read from the new
// process's metrics endpoint, reach the number of objects), so a core that never started cannot
// pass.
func TestCoreRestartOverSettledObjectsWritesNothing(t *testing.T) {
	f := features.New("a restarted core reconciles every object and writes nothing").
		Assess("restart", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			local := localCluster(t, "it reads the restarted controller's reconcile counters from its loopback metrics endpoint and its writes from the apiserver audit log")
			ns := tenantNamespace(ctx, t, c, "tenant-core-restart")
			t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
			class := &ipamv1.IPAddressClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-core-restart"},
				Spec: ipamv1.IPAddressClassSpec{Provisioner: "nobody.example.org", ReclaimPolicy: ipamv1.ReclaimDelete}}
			if err := c.Create(ctx, class); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteClassAndAddresses(t, c, class.Name) })
			mine := map[string]bool{class.Name: true, ns: true}
			for i, ip := range []string{"198.51.100.236", "198.51.100.237", "198.51.100.238"} {
				a := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "ip-" + strings.ReplaceAll(ip, ".", "-")},
					Spec: ipamv1.IPAddressSpec{Address: ip, ClassName: class.Name, ReclaimPolicy: ipamv1.ReclaimDelete}}
				if err := c.Create(ctx, a); err != nil {
					t.Fatal(err)
				}
				mine[a.Name] = true
				if i < 2 {
					newTenantClaim(ctx, t, c, ns, fmt.Sprintf("c%d", i), class.Name, ipamv1.IPv4)
				}
			}
			for i := range 2 {
				waitClaimBound(ctx, t, c, ns, fmt.Sprintf("c%d", i))
			}
			sa := "system:serviceaccount:cozy-address-controller:address-controller"
			coreWrites := func(since time.Time) ([]controlplane.AuditEvent, error) {
				return controlplane.AuditWrites(local.AuditLog, func(e controlplane.AuditEvent) bool {
					return e.User.Username == sa && e.Stamp.After(since) && (e.ObjectRef == nil || e.ObjectRef.Resource != "leases")
				})
			}
			// Settled: the core has stopped writing about anything.
			quiet := time.Now()
			eventually(ctx, t, 60*time.Second, "the core to stop writing", func(ctx context.Context) (bool, error) {
				w, err := coreWrites(quiet)
				if err != nil || len(w) > 0 {
					quiet = time.Now()
					return false, err
				}
				return time.Since(quiet) > 2*time.Second, nil
			})

			since := time.Now()
			restart(ctx, t, "address-controller")
			// The auto-claim controller reconciles every Service but a driver's own (the core does
			// not cache those).
			waitEveryObjectReconciled(ctx, t, c, local, "address-controller", 90*time.Second, map[string]objectsOf{
				"ipaddressclaim": {list: ipamv1.GroupVersion.WithKind("IPAddressClaimList")},
				"ipaddress":      {list: ipamv1.GroupVersion.WithKind("IPAddressList")},
				"ipaddressclass": {list: ipamv1.GroupVersion.WithKind("IPAddressClassList")},
				"autoclaim": {list: corev1.SchemeGroupVersion.WithKind("ServiceList"), skip: func(o metav1.PartialObjectMetadata) bool {
					_, mine := o.Labels[ipamv1.LabelDriverService]
					return mine
				}},
			})
			consistently(ctx, t, 3*time.Second, "the restarted core to write nothing about this test's objects", func(ctx context.Context) (bool, error) {
				writes, err := coreWrites(since)
				if err != nil {
					return false, err
				}
				var lines []string
				for _, w := range writes {
					if w.ObjectRef != nil && (mine[w.ObjectRef.Name] || mine[w.ObjectRef.Namespace]) {
						lines = append(lines, w.Verb+" "+w.RequestURI)
					}
				}
				if len(lines) > 0 {
					return false, fmt.Errorf("%d writes:\n%s", len(lines), strings.Join(lines, "\n"))
				}
				return true, nil
			})
			if writes, _ := coreWrites(since); len(writes) > 0 {
				for _, w := range writes {
					t.Logf("after the restart the core wrote (objects of other tests): %s %s", w.Verb, w.RequestURI)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
