package charts

import (
	"context"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	helmcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Apply installs and upgrades as Flux's helm-controller does, on a real apiserver: server-side
// apply by helm-controller's field manager, and a release left pending by an interrupted run (its
// process killed mid-upgrade) is marked failed and upgraded, not left to lock every later one out.
func TestApplyGoesOnAfterAnInterruptedRelease(t *testing.T) {
	cp := startAPIServer(t)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, "probe", nil); err != nil {
		t.Fatal(err)
	}
	c := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "probe", Version: "0.1.0"},
		Templates: []*common.File{{Name: "templates/cm.yaml",
			Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  v: {{ .Values.v | quote }}\n")}},
	}
	rel, err := Apply(ctx, cp.Kubeconfig, "probe", "probe", c, map[string]any{"v": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if rel.ApplyMethod != "ssa" {
		t.Errorf("installed by %q, want server-side apply", rel.ApplyMethod)
	}
	cm, err := cp.Client.CoreV1().ConfigMaps("probe").Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var managers []string
	for _, m := range cm.ManagedFields {
		managers = append(managers, m.Manager+"/"+string(m.Operation))
	}
	if strings.Join(managers, ",") != FieldManager+"/Apply" {
		t.Errorf("the object's field managers are %v, want only %s applying", managers, FieldManager)
	}

	// An upgrade whose process died: the release stays pending-upgrade in Helm's storage.
	cfg, err := configuration(cp.Kubeconfig, "probe")
	if err != nil {
		t.Fatal(err)
	}
	last, err := cfg.Releases.Last("probe")
	if err != nil {
		t.Fatal(err)
	}
	stuck := *last.(*release.Release)
	info := *stuck.Info
	info.Status = helmcommon.StatusPendingUpgrade
	stuck.Info, stuck.Version = &info, stuck.Version+1
	if err := cfg.Releases.Create(&stuck); err != nil {
		t.Fatal(err)
	}
	rel, err = Apply(ctx, cp.Kubeconfig, "probe", "probe", c, map[string]any{"v": "2"})
	if err != nil {
		t.Fatalf("an upgrade after an interrupted one: %v", err)
	}
	if rel.Info.Status != helmcommon.StatusDeployed {
		t.Errorf("the release is %s, want deployed", rel.Info.Status)
	}
	cm, err = cp.Client.CoreV1().ConfigMaps("probe").Get(ctx, "probe", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "2" {
		t.Errorf("the upgrade did not apply: %v %v", cm.Data, err)
	}
}
