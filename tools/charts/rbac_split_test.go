package charts

import (
	"fmt"
	"slices"
	"testing"
)

// clusterServiceVerbs are what the driver may do to Services and their status in any namespace:
// read them, and patch (attach writes its annotations, detach clears the status it wrote).
var clusterServiceVerbs = map[string][]string{
	"services":        {"get", "list", "watch", "patch"},
	"services/status": {"get", "patch"},
}

// clusterServiceGrantErrors reports every verb on Services (or their status) that a ClusterRole
// bound cluster-wide to the ServiceAccount namespace/name grants beyond clusterServiceVerbs,
// counting wildcards in apiGroups, resources and verbs: "*", deletecollection, update, create and
// delete are all refused, as is a ClusterRole the chart binds but does not render (its rules
// could be anything) or one that aggregates others.
func clusterServiceGrantErrors(objs map[string]map[string]any, namespace, name string) []error {
	var errs []error
	for key, b := range objs {
		if dig(b, "kind") != "ClusterRoleBinding" {
			continue
		}
		bound := false
		subjects, _ := dig(b, "subjects").([]any)
		for _, s := range subjects {
			s, _ := s.(map[string]any)
			if s["kind"] == "ServiceAccount" && s["namespace"] == namespace && s["name"] == name {
				bound = true
			}
		}
		if !bound {
			continue
		}
		roleName, _ := dig(b, "roleRef", "name").(string)
		role := objs["ClusterRole/"+roleName]
		if role == nil {
			errs = append(errs, fmt.Errorf("%s binds the driver to ClusterRole %s, which the chart does not render", key, roleName))
			continue
		}
		if dig(role, "aggregationRule") != nil {
			errs = append(errs, fmt.Errorf("ClusterRole %s aggregates other roles", roleName))
		}
		rules, _ := dig(role, "rules").([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			groups, resources, verbs := toStrings(rule["apiGroups"]), toStrings(rule["resources"]), toStrings(rule["verbs"])
			if !slices.Contains(groups, "") && !slices.Contains(groups, "*") {
				continue
			}
			for _, res := range []string{"services", "services/status"} {
				if !slices.Contains(resources, res) && !slices.Contains(resources, "*") &&
					!(res == "services/status" && slices.Contains(resources, "*/status")) {
					continue
				}
				for _, v := range verbs {
					if !slices.Contains(clusterServiceVerbs[res], v) {
						errs = append(errs, fmt.Errorf("ClusterRole %s lets the driver %s %s in every namespace (allowed: %v)",
							roleName, v, res, clusterServiceVerbs[res]))
					}
				}
			}
		}
	}
	return errs
}

// The check above refuses each way of granting too much on Services cluster-wide.
func TestClusterServiceGrantErrors(t *testing.T) {
	binding := map[string]any{"kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "d"},
		"roleRef":  map[string]any{"kind": "ClusterRole", "name": "d"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}}}
	role := func(rules ...map[string]any) map[string]map[string]any {
		var rs []any
		for _, r := range rules {
			rs = append(rs, r)
		}
		return map[string]map[string]any{"ClusterRoleBinding/d": binding, "ClusterRole/d": {"kind": "ClusterRole", "rules": rs}}
	}
	rule := func(groups, resources, verbs []any) map[string]any {
		return map[string]any{"apiGroups": groups, "resources": resources, "verbs": verbs}
	}
	core, svc := []any{""}, []any{"services"}
	for _, tc := range []struct {
		name string
		objs map[string]map[string]any
		bad  bool
	}{
		{"read and patch", role(rule(core, svc, []any{"get", "list", "watch", "patch"}), rule(core, []any{"services/status"}, []any{"get", "patch"})), false},
		{"another resource", role(rule(core, []any{"configmaps"}, []any{"*"})), false},
		{"verb *", role(rule(core, svc, []any{"*"})), true},
		{"deletecollection", role(rule(core, svc, []any{"get", "deletecollection"})), true},
		{"update", role(rule(core, svc, []any{"update"})), true},
		{"create", role(rule(core, svc, []any{"create"})), true},
		{"delete", role(rule(core, svc, []any{"delete"})), true},
		{"update on status", role(rule(core, []any{"services/status"}, []any{"update"})), true},
		{"resource *", role(rule(core, []any{"*"}, []any{"delete"})), true},
		{"*/status", role(rule(core, []any{"*/status"}, []any{"update"})), true},
		{"apiGroup *", role(rule([]any{"*"}, svc, []any{"delete"})), true},
		{"unrendered role", map[string]map[string]any{"ClusterRoleBinding/d": binding}, true},
		{"aggregated", map[string]map[string]any{"ClusterRoleBinding/d": binding,
			"ClusterRole/d": {"kind": "ClusterRole", "aggregationRule": map[string]any{}}}, true},
	} {
		errs := clusterServiceGrantErrors(tc.objs, "ns", "sa")
		if (len(errs) > 0) != tc.bad {
			t.Errorf("%s: errors %v, want refused %v", tc.name, errs, tc.bad)
		}
	}
}

// The driver's RBAC split (issue 10, issue 14 defect 6): Services are created and deleted only in
// its own namespace, pools read only in MetalLB's; cluster-wide it may only read and patch
// Services (attach, detach) — a leaked token cannot delete a tenant's Service.
func TestMetalLBIADRBACSplit(t *testing.T) {
	objs := render(t, "metallb-iad", map[string]any{"metallbNamespace": "metallb-system"})
	verbsOf := func(obj map[string]any, group, resource string) []string {
		var out []string
		rules, _ := dig(obj, "rules").([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			if slices.Contains(toStrings(rule["apiGroups"]), group) && slices.Contains(toStrings(rule["resources"]), resource) {
				out = append(out, toStrings(rule["verbs"])...)
			}
		}
		return out
	}
	cluster := objs["ClusterRole/metallb-iad"]
	own := objs["Role/metallb-iad"]
	pools := objs["Role/metallb-iad-metallb"]
	if cluster == nil || own == nil || pools == nil || objs["ClusterRoleBinding/metallb-iad"] == nil ||
		objs["RoleBinding/metallb-iad"] == nil || objs["RoleBinding/metallb-iad-metallb"] == nil {
		t.Fatalf("missing RBAC objects; got %v", keys(objs))
	}
	if v := verbsOf(cluster, "", "services"); slices.Contains(v, "create") || slices.Contains(v, "delete") || !slices.Contains(v, "patch") {
		t.Errorf("cluster-wide Service verbs %v: want patch (attach) and neither create nor delete", v)
	}
	if v := verbsOf(cluster, "", "services/status"); !slices.Contains(v, "patch") {
		t.Errorf("cluster-wide services/status verbs %v: detach needs patch", v)
	}
	// Every ClusterRole the chart binds to the driver's ServiceAccount, with wildcards counted:
	// on Services cluster-wide nothing beyond what attach and detach need.
	for _, err := range clusterServiceGrantErrors(objs, "cozy-metallb-iad", "metallb-iad") {
		t.Error(err)
	}
	// The check does see the chart's binding: one more verb on the rendered ClusterRole is refused.
	widened := dig(cluster, "rules").([]any)
	cluster["rules"] = append(widened, map[string]any{"apiGroups": []any{""}, "resources": []any{"services"}, "verbs": []any{"deletecollection"}})
	if len(clusterServiceGrantErrors(objs, "cozy-metallb-iad", "metallb-iad")) == 0 {
		t.Error("deletecollection on Services added to the chart's ClusterRole went unnoticed")
	}
	cluster["rules"] = widened
	if v := verbsOf(cluster, "metallb.io", "ipaddresspools"); len(v) > 0 {
		t.Errorf("pools readable cluster-wide: %v", v)
	}
	if ns := dig(own, "metadata", "namespace"); ns != "cozy-metallb-iad" {
		t.Errorf("own Role in %v", ns)
	}
	if v := verbsOf(own, "", "services"); !slices.Contains(v, "create") || !slices.Contains(v, "delete") {
		t.Errorf("own-namespace Service verbs %v", v)
	}
	if v := verbsOf(own, "", "events"); !slices.Contains(v, "create") {
		t.Errorf("leader election events refused: own-namespace core events verbs %v", v)
	}
	// MetalLB's AllocationFailed reports on the placeholders are read from the driver's cache.
	if v := verbsOf(own, "", "events"); !slices.Contains(v, "list") || !slices.Contains(v, "watch") {
		t.Errorf("own-namespace core events verbs %v: the cache of MetalLB's reports needs list and watch", v)
	}
	// The core's leader election records its event in its own namespace too (the core group).
	core := render(t, "address-controller", nil)
	if v := verbsOf(core["Role/address-controller-leader-election"], "", "events"); !slices.Contains(v, "create") || !slices.Contains(v, "patch") {
		t.Errorf("the core's leader election events refused: its own-namespace core events verbs %v", v)
	}
	if v := verbsOf(own, "coordination.k8s.io", "leases"); !slices.Contains(v, "update") {
		t.Errorf("lease verbs %v", v)
	}
	if ns := dig(pools, "metadata", "namespace"); ns != "metallb-system" {
		t.Errorf("pool Role in %v, want the metallbNamespace value", ns)
	}
	if v := verbsOf(pools, "metallb.io", "ipaddresspools"); !slices.Equal(v, []string{"get", "list", "watch"}) {
		t.Errorf("pool verbs %v", v)
	}
	for _, b := range []string{"RoleBinding/metallb-iad", "RoleBinding/metallb-iad-metallb"} {
		if dig(objs[b], "subjects", 0, "namespace") != "cozy-metallb-iad" || dig(objs[b], "roleRef", "kind") != "Role" {
			t.Errorf("%s: %v", b, objs[b])
		}
	}
}

// coreClassVerbs are all the core may do to IPAddressClasses: read them, and patch their
// finalizer and the auto-claim-enabled-at stamp. It never sends a whole class back (update).
var coreClassVerbs = []string{"get", "list", "watch", "patch"}

// Least privilege on classes (issue 31, item 4): the ClusterRole the core's chart binds to its
// ServiceAccount grants on ipaddressclasses nothing beyond coreClassVerbs, wildcards counted,
// and patch is among them.
func TestAddressControllerClassVerbs(t *testing.T) {
	objs := render(t, "address-controller", nil)
	role := objs["ClusterRole/address-controller"]
	if role == nil || objs["ClusterRoleBinding/address-controller"] == nil {
		t.Fatalf("missing the core's ClusterRole or its binding; got %v", keys(objs))
	}
	var granted []string
	rules, _ := dig(role, "rules").([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		groups, resources := toStrings(rule["apiGroups"]), toStrings(rule["resources"])
		if !slices.Contains(groups, "local.sdn.cozystack.io") && !slices.Contains(groups, "*") {
			continue
		}
		if !slices.Contains(resources, "ipaddressclasses") && !slices.Contains(resources, "*") {
			continue
		}
		granted = append(granted, toStrings(rule["verbs"])...)
	}
	for _, v := range granted {
		if !slices.Contains(coreClassVerbs, v) {
			t.Errorf("the core's ClusterRole grants %q on ipaddressclasses (allowed: %v)", v, coreClassVerbs)
		}
	}
	if !slices.Contains(granted, "patch") {
		t.Errorf("the core's ClusterRole grants %v on ipaddressclasses: its finalizer needs patch", granted)
	}
}
