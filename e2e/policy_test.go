package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/sandbox"
)

const driverSA = "system:serviceaccount:cozy-metallb-iad:metallb-iad"

// warnings collects the apiserver's warnings for one client.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.got, "\n")
}

// as returns a client that impersonates user and groups.
func as(t *testing.T, user string, groups ...string) (client.Client, *warnings) {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	w := &warnings{}
	cfg.WarningHandler = w
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ipamv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

func bind(ctx context.Context, t *testing.T, c client.Client, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer(":", "-", "/", "-").Replace(role + "-" + subject.Name))
	var err error
	if ns == "" {
		err = c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{subject}})
	} else {
		err = c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{subject}})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// protectedField is one field the policy guards, with a value to write into it.
type protectedField struct {
	name     string
	set      func(s *corev1.Service, v string)
	clear    func(s *corev1.Service)
	v1, v2   string
	inMessge string
	// removable: anyone may remove the field (dropping external IPs gives nothing away).
	removable bool
}

func annotationField(key, v1, v2 string) protectedField {
	return protectedField{name: key, v1: v1, v2: v2, inMessge: key,
		set: func(s *corev1.Service, v string) {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[key] = v
		},
		clear: func(s *corev1.Service) { delete(s.Annotations, key) },
	}
}

var protectedFields = []protectedField{
	annotationField("metallb.io/loadBalancerIPs", "192.0.2.10", "192.0.2.11"),
	annotationField("metallb.io/address-pool", "a", "b"),
	annotationField("metallb.io/allow-shared-ip", "a", "b"),
	annotationField("metallb.universe.tf/loadBalancerIPs", "192.0.2.12", "192.0.2.13"),
	annotationField("metallb.universe.tf/address-pool", "a", "b"),
	annotationField("metallb.universe.tf/allow-shared-ip", "a", "b"),
	annotationField(pinnedMarker, "true", "false"),
	{name: "spec.loadBalancerIP", v1: "192.0.2.14", v2: "192.0.2.15", inMessge: "spec.loadBalancerIP",
		set: func(s *corev1.Service, v string) { s.Spec.LoadBalancerIP = v }, clear: func(s *corev1.Service) { s.Spec.LoadBalancerIP = "" }},
	{name: "spec.externalIPs", v1: "192.0.2.16", v2: "192.0.2.17", inMessge: "spec.externalIPs", removable: true,
		set: func(s *corev1.Service, v string) { s.Spec.ExternalIPs = []string{v} }, clear: func(s *corev1.Service) { s.Spec.ExternalIPs = nil }},
}

func clusterIPService(ns, name string) *corev1.Service {
	// ClusterIP keeps MetalLB out of the way: the policy looks at the fields, not the type.
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
}

// expectWrite runs a Service write as c and checks that it is admitted, or denied with a
// message that names the field and the user.
func expectWrite(t *testing.T, what string, err error, admitted bool, field, user string) {
	t.Helper()
	if admitted {
		if err != nil {
			t.Errorf("%s: denied: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: admitted, want denied", what)
		return
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), user) {
		t.Errorf("%s: error %q should be a denial naming %s and %s", what, err, field, user)
	}
}

// writeEachWay sets, adds, changes and removes every protected field as c; seeding of the
// "changed" and "removed" cases is done by the admin.
func writeEachWay(ctx context.Context, t *testing.T, c client.Client, ns, user, tag string, admitted bool) {
	t.Helper()
	admin := ipamClient(t)
	for i, f := range protectedFields {
		base := fmt.Sprintf("%s-%d", tag, i)
		// set on create
		s := clusterIPService(ns, base+"-create")
		f.set(s, f.v1)
		expectWrite(t, user+" sets "+f.name+" on create", c.Create(ctx, s), admitted, f.inMessge, user)
		// added on update
		s = clusterIPService(ns, base+"-add")
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
		f.set(s, f.v1)
		expectWrite(t, user+" adds "+f.name, c.Update(ctx, s), admitted, f.inMessge, user)
		// changed, and removed (merge patches: the driver rightly removes a marker it finds on a
		// Service it did not pin, so the marker's removal is checked on a real pin, below)
		for _, op := range []string{"change", "remove"} {
			if op == "remove" && f.name == pinnedMarker {
				continue
			}
			s = clusterIPService(ns, base+"-"+op)
			f.set(s, f.v1)
			if err := admin.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
			orig := s.DeepCopy()
			if op == "change" {
				f.set(s, f.v2)
			} else {
				f.clear(s)
			}
			expectWrite(t, user+" "+op+"s "+f.name, c.Patch(ctx, s, client.MergeFrom(orig)), admitted || (op == "remove" && f.removable), f.inMessge, user)
		}
	}
}

// applyDriverChart upgrades the metallb-iad release with the given admission policy values.
func applyDriverChart(ctx context.Context, t *testing.T, policy map[string]any) {
	t.Helper()
	// On kind the driver runs from its package's release: upgrade it, keeping the Deployment.
	if up, ok := cluster.(provider.PackageUpgrader); ok {
		if err := up.UpgradePackage(ctx, "metallb-iad", map[string]any{"admissionPolicy": policy}); err != nil {
			t.Fatal(err)
		}
		return
	}
	root, err := sandbox.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := charts.Load(charts.Dir(root, "metallb-iad"))
	if err != nil {
		t.Fatal(err)
	}
	local := localCluster(t, "it upgrades the driver's chart release")
	base, err := local.DriverChartValues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	values := provider.FluxValues(base, map[string]any{"admissionPolicy": policy})
	if _, err := charts.Apply(ctx, cluster.Kubeconfig(), driverNamespace, "metallb-iad", ch, values); err != nil {
		t.Fatal(err)
	}
}

func TestAdmissionPolicy(t *testing.T) {
	f := features.New("metallb-iad-service-pins keeps tenants from pinning addresses").
		Assess("denied for tenants, admitted for the driver and admins", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			admin := ipamClient(t)
			tenant := tenantNamespace(ctx, t, admin, "tenant-policy")
			plain := "plain-policy"
			if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plain}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plain}})
			})
			for _, ns := range []string{tenant, plain} {
				bind(ctx, t, admin, ns, "edit", rbacv1.Subject{Kind: "User", Name: "alice", APIGroup: rbacv1.GroupName})
				bind(ctx, t, admin, ns, "edit", rbacv1.Subject{Kind: "User", Name: "carol", APIGroup: rbacv1.GroupName})
			}
			for _, g := range []string{"kubeadm:cluster-admins", "cozystack-cluster-admin", "e2e-network-admins"} {
				bind(ctx, t, admin, "", "cluster-admin", rbacv1.Subject{Kind: "Group", Name: g, APIGroup: rbacv1.GroupName})
			}
			eventually(ctx, t, 30*time.Second, "the edit role to be aggregated", func(ctx context.Context) (bool, error) {
				alice, _ := as(t, "alice")
				var l corev1.ServiceList
				return true, alice.List(ctx, &l, client.InNamespace(tenant))
			})

			alice, _ := as(t, "alice")
			writeEachWay(ctx, t, alice, tenant, "alice", "tenant", false)
			writeEachWay(ctx, t, alice, plain, "alice", "plain", true)
			driver, _ := as(t, driverSA, "system:serviceaccounts")
			bind(ctx, t, admin, tenant, "edit", rbacv1.Subject{Kind: "ServiceAccount", Name: "metallb-iad", Namespace: driverNamespace})
			writeEachWay(ctx, t, driver, tenant, driverSA, "driver", true)
			writeEachWay(ctx, t, admin, tenant, "local-admin", "masters", true)
			for i, g := range []string{"kubeadm:cluster-admins", "cozystack-cluster-admin"} {
				member, _ := as(t, fmt.Sprintf("member-%d", i), g)
				writeEachWay(ctx, t, member, tenant, fmt.Sprintf("member-%d", i), fmt.Sprintf("group%d", i), true)
			}

			// The driver's pin on a tenant Service does not stop the tenant from updating the rest.
			poolWithClass(ctx, t, admin, "e2e-policy", ipamv1.ReclaimDelete, "198.51.100.232/30")
			newTenantClaim(ctx, t, admin, tenant, "pinned", "e2e-policy", ipamv1.IPv4)
			ip := claimIPs(waitClaimBound(ctx, t, admin, tenant, "pinned"))
			if err := alice.Create(ctx, lbService(tenant, "pinned", map[string]string{claimAnnotation: "pinned"}, false)); err != nil {
				t.Fatalf("a tenant could not name a claim: %v", err)
			}
			svc := waitIngress(ctx, t, admin, tenant, "pinned", ip)
			if err := alice.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
				t.Fatal(err)
			}
			orig := svc.DeepCopy()
			svc.Labels = map[string]string{"tier": "frontend"}
			svc.Spec.Ports[0].Port = 8080
			if err := alice.Patch(ctx, svc, client.MergeFrom(orig)); err != nil {
				t.Fatalf("an update leaving the pin alone was denied: %v", err)
			}
			// Removing the driver's pin or its marker is denied to the tenant.
			for _, key := range []string{pinnedMarker, "metallb.io/loadBalancerIPs"} {
				orig := svc.DeepCopy()
				delete(svc.Annotations, key)
				expectWrite(t, "alice removes the driver's "+key, alice.Patch(ctx, svc, client.MergeFrom(orig)), false, key, "alice")
				svc = orig
			}

			// External IPs: a tenant may not list a reserved address (or any other) as an external
			// IP, nor append one to a list an admin wrote; keeping or shrinking the list is fine.
			reserved := clusterIPService(tenant, "steal-external")
			reserved.Spec.ExternalIPs = []string{ip[0]}
			expectWrite(t, "alice lists the reserved "+ip[0]+" in spec.externalIPs", alice.Create(ctx, reserved), false, ip[0], "alice")
			ext := clusterIPService(tenant, "external-list")
			ext.Spec.ExternalIPs = []string{"192.0.2.20", "192.0.2.21"}
			if err := admin.Create(ctx, ext); err != nil {
				t.Fatal(err)
			}
			orig = ext.DeepCopy()
			ext.Spec.ExternalIPs = append(ext.Spec.ExternalIPs, "192.0.2.22")
			expectWrite(t, "alice appends an external IP", alice.Patch(ctx, ext, client.MergeFrom(orig)), false, "192.0.2.22", "alice")
			ext = orig.DeepCopy()
			ext.Labels = map[string]string{"tier": "edge"}
			expectWrite(t, "alice updates a Service keeping its external IPs", alice.Patch(ctx, ext, client.MergeFrom(orig)), true, "", "alice")
			orig = ext.DeepCopy()
			ext.Spec.ExternalIPs = []string{"192.0.2.21"}
			expectWrite(t, "alice drops one of two external IPs", alice.Patch(ctx, ext, client.MergeFrom(orig)), true, "", "alice")

			// Warn and Audit: admitted, with a warning.
			applyDriverChart(ctx, t, map[string]any{"validationActions": []any{"Warn", "Audit"}})
			eventually(ctx, t, 30*time.Second, "a violation to be admitted with a warning", func(ctx context.Context) (bool, error) {
				c, w := as(t, "alice")
				s := clusterIPService(tenant, fmt.Sprintf("warned-%d", time.Now().UnixNano()))
				s.Annotations = map[string]string{"metallb.io/address-pool": "x"}
				err := c.Create(ctx, s)
				return err == nil && strings.Contains(w.all(), "metallb.io/address-pool"), nil
			})
			eventually(ctx, t, 30*time.Second, "an external IP to be admitted with a warning", func(ctx context.Context) (bool, error) {
				c, w := as(t, "alice")
				s := clusterIPService(tenant, fmt.Sprintf("warned-ext-%d", time.Now().UnixNano()))
				s.Spec.ExternalIPs = []string{"192.0.2.40"} // not reserved: no Conflict for the tests after
				err := c.Create(ctx, s)
				return err == nil && strings.Contains(w.all(), "spec.externalIPs") && strings.Contains(w.all(), "192.0.2.40"), nil
			})

			// guardExternalIPs=false leaves external IPs to whatever else governs them.
			applyDriverChart(ctx, t, map[string]any{"guardExternalIPs": false})
			// (Deny is back at the same time as the guard goes: wait for both.)
			eventually(ctx, t, 30*time.Second, "external IPs unguarded while pins stay denied", func(ctx context.Context) (bool, error) {
				ext := clusterIPService(tenant, "unguarded")
				ext.Spec.ExternalIPs = []string{"192.0.2.30"}
				pin := clusterIPService(tenant, "still-pinned")
				pin.Annotations = map[string]string{"metallb.io/address-pool": "x"}
				err := alice.Create(ctx, pin, client.DryRunAll)
				return alice.Create(ctx, ext, client.DryRunAll) == nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)), nil
			})

			// allowedGroups replaced: the old groups lose the exemption, the new one has it.
			applyDriverChart(ctx, t, map[string]any{"allowedGroups": []any{"e2e-network-admins"}})
			t.Cleanup(func() {
				// Back to the defaults, and wait until the apiserver enforces them again: the
				// tests after this one write MetalLB annotations as the admin.
				bg := context.Background()
				applyDriverChart(bg, t, map[string]any{})
				eventually(bg, t, 30*time.Second, "the default exemptions to be back", func(ctx context.Context) (bool, error) {
					s := clusterIPService(tenant, "restored-check")
					s.Annotations = map[string]string{"metallb.io/address-pool": "x"}
					return admin.Create(ctx, s, client.DryRunAll) == nil, nil
				})
			})
			eventually(ctx, t, 30*time.Second, "the replaced group list to take effect", func(ctx context.Context) (bool, error) {
				old, _ := as(t, "bob", "kubeadm:cluster-admins")
				s := clusterIPService(tenant, fmt.Sprintf("old-group-%d", time.Now().UnixNano()))
				s.Annotations = map[string]string{"metallb.io/address-pool": "x"}
				err := old.Create(ctx, s)
				return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
			})
			newAdmin, _ := as(t, "dave", "e2e-network-admins")
			s := clusterIPService(tenant, "new-group")
			s.Annotations = map[string]string{"metallb.io/address-pool": "x"}
			if err := newAdmin.Create(ctx, s); err != nil {
				t.Fatalf("a member of the configured group was denied: %v", err)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestTenantAccess(t *testing.T) {
	f := features.New("tenant roles: view reads claims, admin manages them, nobody sees addresses or classes").
		Assess("tenant roles", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			admin := ipamClient(t)
			ns := tenantNamespace(ctx, t, admin, "tenant-access")
			other := tenantNamespace(ctx, t, admin, "tenant-other")
			t.Cleanup(func() {
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})
			})
			// Cozystack's tenant roles, as the platform defines them: aggregated by label, each
			// level including the ones below.
			cozystackTenantRoles(ctx, t, admin)
			bind(ctx, t, admin, ns, "cozy:tenant:view", rbacv1.Subject{Kind: "User", Name: "viewer", APIGroup: rbacv1.GroupName})
			bind(ctx, t, admin, ns, "cozy:tenant:admin", rbacv1.Subject{Kind: "User", Name: "owner", APIGroup: rbacv1.GroupName})
			viewer, _ := as(t, "viewer")
			owner, _ := as(t, "owner")

			// The owner creates, updates and deletes claims in its namespace...
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"},
				Spec: ipamv1.IPAddressClaimSpec{ClassName: "none-yet"}}
			eventually(ctx, t, 30*time.Second, "the tenant admin role to be aggregated", func(ctx context.Context) (bool, error) {
				return owner.Create(ctx, claim) == nil, nil
			})
			if err := owner.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				t.Fatal(err)
			}
			orig := claim.DeepCopy()
			claim.Labels = map[string]string{"team": "web"}
			if err := owner.Patch(ctx, claim, client.MergeFrom(orig)); err != nil {
				t.Fatalf("tenant admin update: %v", err)
			}
			// ...but not elsewhere.
			if err := owner.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "theirs"}}); !apierrors.IsForbidden(err) {
				t.Fatalf("tenant admin created a claim in another tenant's namespace: %v", err)
			}
			// The viewer reads claims and cannot create them.
			var claims ipamv1.IPAddressClaimList
			if err := viewer.List(ctx, &claims, client.InNamespace(ns)); err != nil || len(claims.Items) != 1 {
				t.Fatalf("tenant view list: %d claims, %v", len(claims.Items), err)
			}
			if err := viewer.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nope"}}); !apierrors.IsForbidden(err) {
				t.Fatalf("tenant view created a claim: %v", err)
			}
			// Nobody in the tenant reads the cluster-scoped objects.
			for name, c := range map[string]client.Client{"viewer": viewer, "owner": owner} {
				if err := c.List(ctx, &ipamv1.IPAddressList{}); !apierrors.IsForbidden(err) {
					t.Errorf("%s listed IPAddresses: %v", name, err)
				}
				if err := c.List(ctx, &ipamv1.IPAddressClassList{}); !apierrors.IsForbidden(err) {
					t.Errorf("%s listed IPAddressClasses: %v", name, err)
				}
			}
			// Neither tenant reads anything naming the other.
			noOtherTenantNamed(ctx, t, admin, ns, other)
			if err := owner.Delete(ctx, claim); err != nil {
				t.Fatalf("tenant admin delete: %v", err)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
