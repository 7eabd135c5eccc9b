package charts

import (
	"slices"
	"testing"
)

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
