package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// cozystackTenantRoles creates Cozystack's tenant roles as the platform defines them: each level
// aggregates the roles labelled for it and for the levels below, and the view level's own rules
// read the namespace's pods, Services, endpoints, events (core group) and resource quotas.
// Existing roles are left alone.
func cozystackTenantRoles(ctx context.Context, t *testing.T, admin client.Client) {
	t.Helper()
	for role, levels := range map[string][]string{
		"cozy:tenant:view":  {"view"},
		"cozy:tenant:admin": {"view", "use", "admin"},
	} {
		var sel []metav1.LabelSelector
		for _, l := range levels {
			sel = append(sel, metav1.LabelSelector{MatchLabels: map[string]string{"rbac.cozystack.io/aggregate-to-tenant-" + l: "true"}})
		}
		err := admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: sel}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	err := admin.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cozy:tenant:view:base", Labels: map[string]string{"rbac.cozystack.io/aggregate-to-tenant-view": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""},
			Resources: []string{"pods", "services", "persistentvolumes", "endpoints", "events", "resourcequotas"},
			Verbs:     []string{"get", "list", "watch"}}},
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// namesNamespace reports whether text names the namespace ns as a whole word (a namespace
// name is lowercase letters, digits and dashes; tenant-a does not match in tenant-ab).
func namesNamespace(text, ns string) bool {
	return regexp.MustCompile(`(^|[^a-z0-9-])` + regexp.QuoteMeta(ns) + `($|[^a-z0-9-])`).MatchString(text)
}

// tenantRead is what a tenant's view role reads in its namespace and what the check found.
type tenantRead struct {
	events []corev1.Event
	claims []ipamv1.IPAddressClaim
}

// reasons are the reasons of the events read about the object named name.
func (r tenantRead) reasons(name string) map[string]bool {
	out := map[string]bool{}
	for _, e := range r.events {
		if e.InvolvedObject.Name == name {
			out[e.Reason] = true
		}
	}
	return out
}

// noOtherTenantNamed reads each namespace of nss as a user bound there to Cozystack's
// cozy:tenant:view role, and fails the test when anything that user reads names another tenant
// namespace (any namespace labelled as a tenant's, which includes the other namespaces of nss):
// an event's message or its related object, a claim's condition, a Service's condition. An
// event a tenant reads says that an address is reserved or in use, never by whom. It returns what
// each namespace's tenant read, for the caller to check that the events it expects were among it.
func noOtherTenantNamed(ctx context.Context, t *testing.T, admin client.Client, nss ...string) map[string]tenantRead {
	t.Helper()
	var list corev1.NamespaceList
	if err := admin.List(ctx, &list, client.HasLabels{tenantLabel}); err != nil {
		t.Fatal(err)
	}
	tenants := map[string]bool{}
	for _, n := range list.Items {
		tenants[n.Name] = true
	}
	for _, ns := range nss {
		tenants[ns] = true
	}
	cozystackTenantRoles(ctx, t, admin)
	out := map[string]tenantRead{}
	for _, ns := range nss {
		user := "tenant-viewer-" + ns
		bind(ctx, t, admin, ns, "cozy:tenant:view", rbacv1.Subject{Kind: "User", Name: user, APIGroup: rbacv1.GroupName})
		viewer, _ := as(t, user)
		var evs corev1.EventList
		var claims ipamv1.IPAddressClaimList
		var svcs corev1.ServiceList
		eventually(ctx, t, 30*time.Second, "the tenant view role to read events, claims and Services in "+ns, func(ctx context.Context) (bool, error) {
			for _, l := range []client.ObjectList{&evs, &claims, &svcs} {
				if err := viewer.List(ctx, l, client.InNamespace(ns)); apierrors.IsForbidden(err) {
					return false, nil // the role is still being aggregated
				} else if err != nil {
					return false, err
				}
			}
			return true, nil
		})
		said := func(what, text string) {
			for other := range tenants {
				if other != ns && namesNamespace(text, other) {
					t.Errorf("tenant %s reads %s naming tenant %s: %q", ns, what, other, text)
				}
			}
		}
		for _, e := range evs.Items {
			what := fmt.Sprintf("event %s on %s %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name)
			said(what, e.Message)
			if r := e.Related; r != nil && r.Namespace != "" && r.Namespace != ns {
				t.Errorf("tenant %s reads %s related to %s %s/%s", ns, what, r.Kind, r.Namespace, r.Name)
			}
		}
		for _, c := range claims.Items {
			for _, cond := range c.Status.Conditions {
				said(fmt.Sprintf("claim %s's condition %s (%s)", c.Name, cond.Type, cond.Reason), cond.Message)
			}
		}
		for _, s := range svcs.Items {
			for _, cond := range s.Status.Conditions {
				said(fmt.Sprintf("Service %s's condition %s (%s)", s.Name, cond.Type, cond.Reason), cond.Message)
			}
		}
		t.Logf("tenant %s read %d events, %d claims and %d Services, checked against %d other tenant namespaces",
			ns, len(evs.Items), len(claims.Items), len(svcs.Items), len(tenants)-1)
		out[ns] = tenantRead{events: evs.Items, claims: claims.Items}
	}
	return out
}

// Issue 31 item 3: tenant B names, pins, lists and holds an address reserved by tenant A, and
// shares a claim of its own between two Services. Everything either tenant reads says that the
// address is reserved or in use, never by whom: no event, claim condition or Service condition
// in one tenant's namespace names the other's.
func TestTenantEventsNameNoOtherTenant(t *testing.T) {
	f := features.New("events and conditions a tenant reads name no other tenant's objects").
		Assess("cross-tenant scenarios, read as each tenant", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := ipamClient(t)
			nsA := tenantNamespace(ctx, t, c, "tenant-events-a")
			nsB := tenantNamespace(ctx, t, c, "tenant-events-b")
			t.Cleanup(func() {
				for _, ns := range []string{nsA, nsB} {
					_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				}
			})
			const class = "e2e-tenant-events"
			poolWithClass(ctx, t, c, class, ipamv1.ReclaimRetain, "192.0.2.64/29")

			// Tenant A holds one address Bound and one Released (its claim deleted; Retain).
			newTenantClaim(ctx, t, c, nsA, "kept", class, ipamv1.IPv4)
			newTenantClaim(ctx, t, c, nsA, "left", class, ipamv1.IPv4)
			kept := waitClaimBound(ctx, t, c, nsA, "kept")
			left := waitClaimBound(ctx, t, c, nsA, "left")
			ip, keptAddr := kept.Status.Addresses[0].Address, kept.Status.Addresses[0].Name
			leftAddr := left.Status.Addresses[0].Name
			if err := c.Delete(ctx, left); err != nil {
				t.Fatal(err)
			}
			eventually(ctx, t, 60*time.Second, "tenant A's deleted claim to leave its address Released", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: leftAddr}, &a)
				return a.Status.Phase == ipamv1.AddressReleased, err
			})
			waitHeld(ctx, t, c, keptAddr, ip)

			// Tenant B names tenant A's addresses in claims of its own: AddressNotFound, as for an
			// address that does not exist.
			for name, addr := range map[string]string{"grab-bound": keptAddr, "grab-released": leftAddr} {
				if err := c.Create(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: name},
					Spec: ipamv1.IPAddressClaimSpec{AddressName: addr, Family: ipamv1.IPv4}}); err != nil {
					t.Fatal(err)
				}
				waitServiceEvent(ctx, t, c, nsB, name, ipamv1.ReasonAddressNotFound)
			}

			// A Service in tenant B's namespace requests tenant A's address (an admin's pin; the
			// admission policy keeps tenants from writing one): ReservedAddressRequested.
			pinner := lbService(nsB, "pinner", map[string]string{pinAnnotation: ip}, false)
			if err := c.Create(ctx, pinner); err != nil {
				t.Fatal(err)
			}
			waitServiceEvent(ctx, t, c, nsB, "pinner", "ReservedAddressRequested")
			deleteAndWait(ctx, t, c, pinner)

			// One lists it in spec.externalIPs: a Conflict, ReservedAddressConflict on the Service.
			extip := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "extip"},
				Spec: corev1.ServiceSpec{ExternalIPs: []string{ip}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
			if err := c.Create(ctx, extip); err != nil {
				t.Fatal(err)
			}
			waitServiceEvent(ctx, t, c, nsB, "extip", "ReservedAddressConflict")
			deleteAndWait(ctx, t, c, extip)
			waitNoConflict(ctx, t, c, keptAddr)

			// Two Services of tenant B name one claim of B: ClaimInUse on the second (a Service
			// names only claims of its own namespace, so the one in use is B's own).
			newTenantClaim(ctx, t, c, nsB, "shared", class, ipamv1.IPv4)
			shared := waitClaimBound(ctx, t, c, nsB, "shared")
			if err := c.Create(ctx, lbService(nsB, "first", map[string]string{claimAnnotation: "shared"}, false)); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, nsB, "first", claimIPs(shared))
			if err := c.Create(ctx, lbService(nsB, "second", map[string]string{claimAnnotation: "shared"}, false)); err != nil {
				t.Fatal(err)
			}
			waitServiceEvent(ctx, t, c, nsB, "second", "ClaimInUse")

			// A Service of tenant B holds tenant A's address (pinned by an admin while the driver
			// was down): a Conflict, ReservedAddressConflict on the Service.
			start := stopProcess(t, "metallb-iad")
			holders, err := servicesServing(ctx, c, ip)
			if err != nil || len(holders) != 1 || holders[0].Namespace != driverNamespace {
				t.Fatalf("the address's holders: %v %v", holders, err)
			}
			if err := c.Delete(ctx, &holders[0]); err != nil {
				t.Fatal(err)
			}
			intruder := lbService(nsB, "intruder", map[string]string{pinAnnotation: ip}, false)
			if err := c.Create(ctx, intruder); err != nil {
				t.Fatal(err)
			}
			waitIngress(ctx, t, c, nsB, "intruder", []string{ip})
			start()
			waitServiceEvent(ctx, t, c, nsB, "intruder", "ReservedAddressConflict")
			eventually(ctx, t, 30*time.Second, "the address's Conflict to name the holder (the admin reads it)", func(ctx context.Context) (bool, error) {
				var a ipamv1.IPAddress
				err := c.Get(ctx, client.ObjectKey{Name: keptAddr}, &a)
				cond := meta.FindStatusCondition(a.Status.Conditions, ipamv1.ConditionConflict)
				return cond != nil && cond.Status == metav1.ConditionTrue && namesNamespace(cond.Message, nsB), err
			})
			deleteAndWait(ctx, t, c, intruder)
			waitHeld(ctx, t, c, keptAddr, ip)

			read := noOtherTenantNamed(ctx, t, c, nsA, nsB)
			// The check read what it should: tenant B's view role shows every Warning above.
			for obj, reason := range map[string]string{"grab-bound": ipamv1.ReasonAddressNotFound, "grab-released": ipamv1.ReasonAddressNotFound,
				"pinner": "ReservedAddressRequested", "extip": "ReservedAddressConflict", "second": "ClaimInUse", "intruder": "ReservedAddressConflict"} {
				if !read[nsB].reasons(obj)[reason] {
					t.Errorf("tenant %s does not read %s about %s: %v", nsB, reason, obj, read[nsB].reasons(obj))
				}
			}
			for _, cl := range read[nsB].claims {
				if cond := meta.FindStatusCondition(cl.Status.Conditions, ipamv1.ConditionBound); cl.Spec.AddressName != "" &&
					(cond == nil || cond.Reason != ipamv1.ReasonAddressNotFound) {
					t.Errorf("claim %s/%s: %+v, want AddressNotFound", nsB, cl.Name, cond)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// deleteAndWait deletes an object and waits until it is gone.
func deleteAndWait(ctx context.Context, t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, o)
}

// waitNoConflict waits until the address carries no Conflict.
func waitNoConflict(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	eventually(ctx, t, 30*time.Second, "address "+name+" to carry no Conflict", func(ctx context.Context) (bool, error) {
		var a ipamv1.IPAddress
		err := c.Get(ctx, client.ObjectKey{Name: name}, &a)
		return err == nil && !meta.IsStatusConditionTrue(a.Status.Conditions, ipamv1.ConditionConflict), err
	})
}
