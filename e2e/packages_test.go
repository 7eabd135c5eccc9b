package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
	"github.com/cozystack/reserved-ips/address-controller/pkg/sdk/autoclaim"
	"github.com/cozystack/reserved-ips/e2e/provider"
	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// packageOrder is the order the platform installs the packages (the driver depends on the core)
// and, reversed, the order of the product page's teardown.
var packageOrder = []string{"address-controller", "metallb-iad"}

// The packages as Cozystack installs, upgrades and removes them (the kind provider: the
// operator's namespaces and values, Flux's helm-controller on the Helm v4 SDK with server-side
// apply, conflicts forced, ownership taken and a kstatus wait):
//
//  1. as installed: each release deployed by server-side apply, its objects owned by
//     helm-controller's field manager, the namespaces labelled as the operator labels them;
//  2. a values change of the driver's package (log level, workers) rolls the driver and keeps
//     what the driver itself wrote into the release's objects (the parking webhook's caBundle);
//  3. a chart change (a new chart version adding an object) adds it, and the next chart (without
//     it) removes it;
//  4. the product page's teardown (Services, claims, addresses, classes, then the driver's and the
//     core's packages) leaves nothing of the feature behind: no custom object, RBAC, policy,
//     webhook, workload, Secret or placeholder, the CRDs kept empty (the core's chart keeps them),
//     the namespaces kept (as the operator keeps them) with only what the operator and
//     Kubernetes put there and the controllers' leader-election Leases;
//  5. installed again, the feature works: a claim is Bound and a Service that names it gets its
//     address, parked on the way where the webhook parks.
func TestPackagesInstallUpgradeAndRemoveAsCozystack(t *testing.T) {
	f := features.New("packages installed, upgraded and removed as Cozystack does").
		Assess("install, upgrade, remove, install again", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pm, ok := cluster.(provider.PackageManager)
			if !ok {
				t.Skipf("SKIPPED on the %s provider: it runs the controllers as processes, not as Cozystack packages", providerName())
			}
			c := ipamClient(t)
			cs, err := kubernetes.NewForConfig(cluster.Config())
			if err != nil {
				t.Fatal(err)
			}
			webhook, err := usesParkingWebhook(cs)
			if err != nil {
				t.Fatal(err)
			}
			packages := map[string]provider.PackageInstall{}
			for _, in := range pm.Packages() {
				packages[in.Component] = in
			}

			// 1. As installed.
			for _, name := range packageOrder {
				in := packages[name]
				rel, err := charts.Get(cluster.Kubeconfig(), in.Namespace, in.ReleaseName)
				if err != nil {
					t.Fatal(err)
				}
				if rel.ApplyMethod != "ssa" || rel.Info.Status != "deployed" {
					t.Errorf("%s: release %s by %q, want deployed by server-side apply", name, rel.Info.Status, rel.ApplyMethod)
				}
				var dep appsv1.Deployment
				if err := c.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, &dep); err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(dep.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
					return m.Manager == charts.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply
				}) {
					t.Errorf("%s: the Deployment is not applied by %s: %v", name, charts.FieldManager, managers(dep.ManagedFields))
				}
				var ns corev1.Namespace
				if err := c.Get(ctx, client.ObjectKey{Name: in.Namespace}, &ns); err != nil {
					t.Fatal(err)
				}
				if ns.Labels["cozystack.io/system"] != "true" || ns.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("%s: namespace %s labelled %v, annotated %v: not as the operator applies it", name, ns.Name, ns.Labels, ns.Annotations)
				}
			}
			var whc admissionregistrationv1.MutatingWebhookConfiguration
			caBundle := func() string {
				if err := c.Get(ctx, client.ObjectKey{Name: "metallb-iad-parking"}, &whc); err != nil {
					t.Fatal(err)
				}
				return string(whc.Webhooks[0].ClientConfig.CABundle)
			}
			var bundle string
			if webhook {
				if bundle = caBundle(); bundle == "" {
					t.Fatal("the parking webhook's configuration trusts no authority: the driver did not write it")
				}
			}

			// 2. A values change of the driver's package.
			if err := pm.UpgradePackage(ctx, "metallb-iad", map[string]any{"logLevel": "debug", "workers": 8}); err != nil {
				t.Fatal(err)
			}
			var dep appsv1.Deployment
			if err := c.Get(ctx, client.ObjectKey{Namespace: packages["metallb-iad"].Namespace, Name: "metallb-iad"}, &dep); err != nil {
				t.Fatal(err)
			}
			args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
			if !strings.Contains(args, "--zap-log-level=debug") || !strings.Contains(args, "--workers=8") {
				t.Errorf("after the values change the driver runs with %s", args)
			}
			if dep.Status.UpdatedReplicas != *dep.Spec.Replicas || dep.Status.AvailableReplicas != *dep.Spec.Replicas {
				t.Errorf("the upgrade returned before the rollout ended (kstatus wait): %+v", dep.Status)
			}
			if webhook {
				// An upgrade that changes the webhook's configuration and not the driver's pods
				// (which would write the caBundle again as they start): the caBundle is the
				// driver's field, which helm-controller's server-side apply neither owns nor
				// changes.
				before := dep.Generation
				if err := pm.UpgradePackage(ctx, "metallb-iad", map[string]any{"logLevel": "debug", "workers": 8,
					"admissionPolicy": map[string]any{"parkingWebhook": map[string]any{"timeoutSeconds": 6}}}); err != nil {
					t.Fatal(err)
				}
				if err := c.Get(ctx, client.ObjectKeyFromObject(&dep), &dep); err != nil || dep.Generation != before {
					t.Fatalf("the configuration-only upgrade changed the driver's Deployment (generation %d → %d, %v): its pods would write the caBundle again", before, dep.Generation, err)
				}
				if got := caBundle(); got != bundle {
					t.Error("the upgrade changed the caBundle the driver keeps (server-side apply must leave a field it does not set)")
				}
				if ts := whc.Webhooks[0].TimeoutSeconds; ts == nil || *ts != 6 {
					t.Errorf("the upgrade did not reach the configuration: timeoutSeconds %v", ts)
				}
				for _, m := range whc.ManagedFields {
					if m.Manager == charts.FieldManager && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), "caBundle") {
						t.Errorf("%s owns the caBundle: the next upgrade would clear it", charts.FieldManager)
					}
				}
			}
			// Back to the Package values it was installed with.
			if err := pm.UpgradePackage(ctx, "metallb-iad", nil); err != nil {
				t.Fatal(err)
			}

			// 3. A chart change: a new version of the core's chart with one more object, then the
			// chart as it is again.
			changed := changedChart(t, packages["address-controller"].ChartDir, "address-controller")
			if err := pm.ApplyPackage(ctx, "address-controller", changed, nil); err != nil {
				t.Fatal(err)
			}
			var probe corev1.ConfigMap
			key := client.ObjectKey{Namespace: packages["address-controller"].Namespace, Name: "upgrade-probe"}
			if err := c.Get(ctx, key, &probe); err != nil {
				t.Fatalf("the new chart's object is not there: %v", err)
			}
			if probe.Data["chart"] != "0.1.1-upgrade" {
				t.Errorf("the new object was rendered by chart %q, want the new version 0.1.1-upgrade", probe.Data["chart"])
			}
			if err := pm.ApplyPackage(ctx, "address-controller", "", nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, key, &probe); !apierrors.IsNotFound(err) {
				t.Errorf("the object the next chart dropped is still there: %v", err)
			}

			// 4. The product page's teardown, then nothing left. Whatever happens, the packages
			// are installed again at the end, for the tests that follow.
			reinstalled := false
			reinstall := func(ctx context.Context) error {
				for _, name := range packageOrder {
					if err := pm.ApplyPackage(ctx, name, "", nil); err != nil {
						return fmt.Errorf("installing the %s package again: %w", name, err)
					}
				}
				reinstalled = true
				return nil
			}
			t.Cleanup(func() {
				if !reinstalled {
					if err := reinstall(context.Background()); err != nil {
						t.Error(err)
					}
				}
			})
			teardownEverything(ctx, t, c)
			for _, name := range slices.Backward(packageOrder) {
				if err := pm.RemovePackage(ctx, name); err != nil {
					t.Fatalf("removing the %s package: %v", name, err)
				}
			}
			eventually(ctx, t, 2*time.Minute, "nothing of the feature to be left", func(ctx context.Context) (bool, error) {
				left, err := featureLeftovers(ctx, c, cs, packages)
				if len(left) > 0 {
					t.Logf("still there: %v", left)
				}
				return len(left) == 0, err
			})

			// 5. Installed again, as the platform would once the packages are enabled again.
			if err := reinstall(ctx); err != nil {
				t.Fatal(err)
			}
			ns := tenantNamespace(ctx, t, c, "tenant-reinstalled")
			poolWithClass(ctx, t, c, "e2e-reinstalled", ipamv1.ReclaimDelete, "198.51.100.252/30")
			newTenantClaim(ctx, t, c, ns, "web", "e2e-reinstalled", ipamv1.IPv4)
			claim := waitClaimBound(ctx, t, c, ns, "web")
			svc := lbService(ns, "web", map[string]string{claimAnnotation: "web"}, false)
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			if webhook && !autoclaim.Parked(svc) && svc.Annotations[pinnedMarker] == "" {
				t.Errorf("after the reinstall the parking webhook did not park the new Service: %v", svc.Annotations)
			}
			waitIngress(ctx, t, c, ns, "web", claimIPs(claim))
			t.Cleanup(func() { _ = c.Delete(context.Background(), svc) })
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// usesParkingWebhook: the cluster serves no MutatingAdmissionPolicy, so the chart parks through
// the driver's webhook.
func usesParkingWebhook(cs kubernetes.Interface) (bool, error) {
	served, err := controlplane.ServesMutatingAdmissionPolicy(cs.Discovery())
	return !served, err
}

func managers(fields []metav1.ManagedFieldsEntry) []string {
	var out []string
	for _, m := range fields {
		out = append(out, m.Manager+"/"+string(m.Operation))
	}
	return out
}

// changedChart copies the wrapper chart in dir and makes its vendored chart (name) a new version
// with one more object, a ConfigMap upgrade-probe.
func changedChart(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := binaries.CopyTree(dir, out); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(out, "charts", name)
	meta, err := os.ReadFile(filepath.Join(sub, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(meta), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "version:") {
			lines[i] = "version: 0.1.1-upgrade"
		}
	}
	if err := os.WriteFile(filepath.Join(sub, "Chart.yaml"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: upgrade-probe\n  namespace: {{ .Release.Namespace }}\ndata:\n  chart: {{ .Chart.Version | quote }}\n"
	if err := os.WriteFile(filepath.Join(sub, "templates", "upgrade-probe.yaml"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// teardownEverything removes the feature's objects in the product page's order: the claim (and
// class) annotation off every Service, and no Service left pinned or parked, then every claim,
// every remaining address, every class.
func teardownEverything(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if _, named := s.Annotations[claimAnnotation]; named || s.Annotations[classAnnotation] != "" {
			patchAnnotations(ctx, t, c, s, map[string]*string{claimAnnotation: nil, classAnnotation: nil})
		}
	}
	eventually(ctx, t, 2*time.Minute, "no Service to be pinned or parked", func(ctx context.Context) (bool, error) {
		var svcs corev1.ServiceList
		if err := c.List(ctx, &svcs); err != nil {
			return false, err
		}
		for _, s := range svcs.Items {
			if s.Annotations[pinnedMarker] != "" || autoclaim.Parked(&s) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, step := range []struct {
		what string
		list client.ObjectList
	}{{"claims", &ipamv1.IPAddressClaimList{}}, {"addresses", &ipamv1.IPAddressList{}}, {"classes", &ipamv1.IPAddressClassList{}}} {
		eventually(ctx, t, 3*time.Minute, "every one of the "+step.what+" to be deleted", func(ctx context.Context) (bool, error) {
			if err := c.List(ctx, step.list); err != nil {
				return false, err
			}
			items, err := metaItems(step.list)
			if err != nil {
				return false, err
			}
			for _, o := range items {
				if o.GetDeletionTimestamp() == nil {
					if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
						return false, err
					}
				}
			}
			return len(items) == 0, nil
		})
	}
}

// metaItems are the objects of a list.
func metaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		co, ok := o.(client.Object)
		if !ok {
			return nil, fmt.Errorf("%T is not an object", o)
		}
		out = append(out, co)
	}
	return out, nil
}

// featureLeftovers lists what is left of the feature once both packages are removed.
func featureLeftovers(ctx context.Context, c client.Client, cs kubernetes.Interface, packages map[string]provider.PackageInstall) ([]string, error) {
	var left []string
	ours := func(labels map[string]string) bool {
		return labels["app.kubernetes.io/managed-by"] == "Helm" && slices.Contains(packageOrder, labels["app.kubernetes.io/name"])
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return nil, err
	}
	// The CRDs stay, empty, as the core's chart keeps them (crds.keep): deleting a CRD deletes
	// every object of its kind, which an uninstall must never do by accident.
	for _, crd := range crds.Items {
		if crd.Spec.Group == ipamv1.GroupVersion.Group && crd.Annotations["helm.sh/resource-policy"] != "keep" {
			left = append(left, "CRD "+crd.Name+" (not marked to be kept)")
		}
	}
	for _, l := range []client.ObjectList{&ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}, &ipamv1.IPAddressClassList{}} {
		if err := c.List(ctx, l); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return nil, err
		}
		objs, err := metaItems(l)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			left = append(left, fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName()))
		}
	}
	for _, l := range []struct {
		kind string
		list client.ObjectList
	}{
		{"ClusterRole", &rbacv1.ClusterRoleList{}}, {"ClusterRoleBinding", &rbacv1.ClusterRoleBindingList{}},
		{"ValidatingAdmissionPolicy", &admissionregistrationv1.ValidatingAdmissionPolicyList{}},
		{"ValidatingAdmissionPolicyBinding", &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}},
		{"MutatingWebhookConfiguration", &admissionregistrationv1.MutatingWebhookConfigurationList{}},
	} {
		if err := c.List(ctx, l.list); err != nil {
			return nil, err
		}
		objs, err := metaItems(l.list)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if ours(o.GetLabels()) || strings.HasPrefix(o.GetName(), "metallb-iad-") || strings.HasPrefix(o.GetName(), "address-controller-") {
				left = append(left, l.kind+" "+o.GetName())
			}
		}
	}
	if served, err := controlplane.ServesMutatingAdmissionPolicy(cs.Discovery()); err != nil {
		return nil, err
	} else if served {
		for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
			var l unstructured.UnstructuredList
			l.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind + "List"})
			if err := c.List(ctx, &l); err != nil {
				return nil, err
			}
			for _, o := range l.Items {
				if ours(o.GetLabels()) {
					left = append(left, kind+" "+o.GetName())
				}
			}
		}
	}
	// The packages' namespaces: kept, holding only what Kubernetes and the operator put there,
	// and the leader-election Leases the controllers released on their way out.
	for _, name := range packageOrder {
		ns := packages[name].Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
			left = append(left, fmt.Sprintf("namespace %s: %v", ns, err))
			continue
		}
		for _, l := range []struct {
			kind string
			list client.ObjectList
			may  func(client.Object) bool
		}{
			{"Deployment", &appsv1.DeploymentList{}, nil}, {"Service", &corev1.ServiceList{}, nil},
			{"ServiceAccount", &corev1.ServiceAccountList{}, func(o client.Object) bool { return o.GetName() == "default" }},
			{"ConfigMap", &corev1.ConfigMapList{}, func(o client.Object) bool { return o.GetName() == "kube-root-ca.crt" }},
			{"Secret", &corev1.SecretList{}, func(o client.Object) bool { return o.GetName() == provider.CozystackValues }},
			{"Role", &rbacv1.RoleList{}, nil}, {"RoleBinding", &rbacv1.RoleBindingList{}, nil},
			// The controllers' leader-election Leases: made by the controllers, not the charts,
			// so an uninstall leaves them (the operating guide's teardown says so).
			{"Lease", &coordinationv1.LeaseList{}, func(o client.Object) bool {
				return o.GetName() == name+".local.sdn.cozystack.io"
			}},
		} {
			if err := c.List(ctx, l.list, client.InNamespace(ns)); err != nil {
				return nil, err
			}
			objs, err := metaItems(l.list)
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				if l.may == nil || !l.may(o) {
					left = append(left, fmt.Sprintf("%s %s/%s", l.kind, ns, o.GetName()))
				}
			}
		}
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		return nil, err
	}
	for _, s := range svcs.Items {
		if s.Labels[ipamv1.LabelDriverService] != "" {
			left = append(left, "placeholder "+s.Namespace+"/"+s.Name)
		}
		for k := range s.Annotations {
			if strings.Contains(k, "local.sdn.cozystack.io/") && k != claimAnnotation && k != classAnnotation && k != ipamv1.AnnotationAutoClaim {
				left = append(left, fmt.Sprintf("annotation %s on Service %s/%s", k, s.Namespace, s.Name))
			}
		}
	}
	return left, nil
}
