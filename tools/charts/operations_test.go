package charts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var charts = []string{"address-controller", "metallb-iad"}

// Defaults: metrics served securely with the review permissions that needs, no fixed user,
// monitoring objects off.
func TestChartDefaultsForOperators(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			objs := render(t, name, nil)
			dep := objs["Deployment/"+name]
			pod := dig(dep, "spec", "template", "spec").(map[string]any)
			if strings.Contains(toYAML(t, pod), "runAsUser") {
				t.Errorf("the pod fixes a user ID: %v", pod["securityContext"])
			}
			if dig(pod, "securityContext", "runAsNonRoot") != true || dig(pod, "containers", 0, "securityContext", "readOnlyRootFilesystem") != true {
				t.Errorf("default security contexts: %v / %v", pod["securityContext"], dig(pod, "containers", 0, "securityContext"))
			}
			args := toStrings(dig(pod, "containers", 0, "args"))
			if !slices.Contains(args, "--metrics-secure=true") || !slices.Contains(args, "--leader-elect=true") {
				t.Errorf("args %v", args)
			}
			if dig(pod, "containers", 0, "ports", 0, "name") != "https-metrics" || dig(objs["Service/"+name+"-metrics"], "spec", "ports", 0, "targetPort") != "https-metrics" {
				t.Error("the metrics port is not named https-metrics in the pod and Service")
			}
			auth := objs["ClusterRole/"+name+"-metrics-auth"]
			rules := toYAML(t, dig(auth, "rules"))
			for _, want := range []string{"tokenreviews", "subjectaccessreviews", "create"} {
				if !strings.Contains(rules, want) {
					t.Errorf("metrics-auth rules lack %s: %s", want, rules)
				}
			}
			if strings.Contains(rules, "get") || strings.Contains(rules, "list") {
				t.Errorf("metrics-auth grants more than create: %s", rules)
			}
			if dig(objs["ClusterRoleBinding/"+name+"-metrics-auth"], "subjects", 0, "name") != name {
				t.Error("metrics-auth is not bound to the controller's ServiceAccount")
			}
			if dig(objs["ClusterRole/"+name+"-metrics-reader"], "rules", 0, "nonResourceURLs", 0) != "/metrics" {
				t.Error("no metrics-reader role for scrapers")
			}
			if objs["ClusterRoleBinding/"+name+"-metrics-reader"] != nil {
				t.Error("the metrics-reader role is bound to someone by default")
			}
			for _, k := range []string{"ServiceMonitor/" + name, "VMServiceScrape/" + name, "PrometheusRule/" + name, "ConfigMap/" + name + "-dashboard", "GrafanaDashboard/" + name, "PodDisruptionBudget/" + name} {
				if objs[k] != nil {
					t.Errorf("%s is rendered by default", k)
				}
			}
		})
	}
}

// firstAlert is the first alert of each chart's files/alerts.yaml, whose severity the test sets.
var firstAlert = map[string]string{"address-controller": "ReservedIPClaimsPending", "metallb-iad": "ReservedIPPoolNearlyExhausted"}

// Every operator knob reaches the objects.
func TestChartOperatorValues(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			objs := render(t, name, map[string]any{
				"replicas":            2,
				"podDisruptionBudget": map[string]any{"enabled": true},
				"priorityClassName":   "system-cluster-critical",
				"podLabels":           map[string]any{"team": "net"},
				"podAnnotations":      map[string]any{"example.org/a": "b"},
				"extraArgs":           []any{"--kube-api-qps=80"},
				"serviceAccount":      map[string]any{"annotations": map[string]any{"example.org/role": "x"}},
				"podSecurityContext":  map[string]any{"runAsNonRoot": nil, "fsGroup": 2000},
				"securityContext":     map[string]any{"readOnlyRootFilesystem": false},
				"nodeSelector":        map[string]any{"node-role.kubernetes.io/control-plane": ""},
				"tolerations":         []any{map[string]any{"operator": "Exists"}},
				"metrics": map[string]any{
					"readers":          []any{map[string]any{"namespace": "cozy-monitoring", "name": "vmagent"}},
					"serviceMonitor":   map[string]any{"enabled": true, "interval": "30s", "labels": map[string]any{"release": "prom"}},
					"vmServiceScrape":  map[string]any{"enabled": true},
					"prometheusRule":   map[string]any{"enabled": true, "severities": map[string]any{firstAlert[name]: "critical"}},
					"dashboard":        map[string]any{"enabled": true},
					"grafanaDashboard": map[string]any{"enabled": true, "labels": map[string]any{"team": "net"}},
				},
			})
			dep := objs["Deployment/"+name]
			pod := dig(dep, "spec", "template", "spec").(map[string]any)
			if dig(dep, "spec", "replicas") != float64(2) && dig(dep, "spec", "replicas") != int64(2) {
				t.Errorf("replicas %v", dig(dep, "spec", "replicas"))
			}
			if pod["priorityClassName"] != "system-cluster-critical" || dig(pod, "nodeSelector", "node-role.kubernetes.io/control-plane") != "" || pod["tolerations"] == nil {
				t.Errorf("placement: %v %v %v", pod["priorityClassName"], pod["nodeSelector"], pod["tolerations"])
			}
			if dig(dep, "spec", "template", "metadata", "labels", "team") != "net" || dig(dep, "spec", "template", "metadata", "annotations", "example.org/a") != "b" {
				t.Errorf("pod metadata %v", dig(dep, "spec", "template", "metadata"))
			}
			if args := toStrings(dig(pod, "containers", 0, "args")); args[len(args)-1] != "--kube-api-qps=80" {
				t.Errorf("extraArgs not appended: %v", args)
			}
			if dig(pod, "securityContext", "fsGroup") == nil || dig(pod, "securityContext", "runAsNonRoot") != nil || dig(pod, "securityContext", "seccompProfile") == nil {
				t.Errorf("pod securityContext not merged as documented: %v", pod["securityContext"])
			}
			if dig(pod, "containers", 0, "securityContext", "readOnlyRootFilesystem") != false {
				t.Error("container securityContext not overridable")
			}
			if dig(objs["ServiceAccount/"+name], "metadata", "annotations", "example.org/role") != "x" {
				t.Error("serviceAccount.annotations not applied")
			}
			pdb := objs["PodDisruptionBudget/"+name]
			if pdb == nil || dig(pdb, "spec", "selector", "matchLabels", "app.kubernetes.io/name") != name {
				t.Errorf("PodDisruptionBudget %v", pdb)
			}
			sm := objs["ServiceMonitor/"+name]
			if dig(sm, "metadata", "labels", "release") != "prom" || dig(sm, "spec", "endpoints", 0, "scheme") != "https" ||
				dig(sm, "spec", "endpoints", 0, "port") != "https-metrics" || dig(sm, "spec", "endpoints", 0, "interval") != "30s" ||
				dig(sm, "spec", "endpoints", 0, "authorization", "credentials", "name") != name+"-metrics-scraper-token" ||
				dig(sm, "spec", "endpoints", 0, "bearerTokenFile") != nil {
				t.Errorf("ServiceMonitor %v", sm)
			}
			if vs := objs["VMServiceScrape/"+name]; dig(vs, "spec", "endpoints", 0, "scheme") != "https" {
				t.Errorf("VMServiceScrape %v", vs)
			}
			rule := objs["PrometheusRule/"+name]
			rules := toYAML(t, dig(rule, "spec", "groups"))
			if !strings.Contains(rules, `namespace="cozy-`+name+`"`) || !strings.Contains(rules, "severity: critical") || !strings.Contains(rules, "{{ $labels.") {
				t.Errorf("PrometheusRule groups:\n%s", rules)
			}
			reader := objs["ClusterRoleBinding/"+name+"-metrics-reader"]
			if dig(reader, "roleRef", "name") != name+"-metrics-reader" || dig(reader, "subjects", 0, "namespace") != "cozy-monitoring" ||
				dig(reader, "subjects", 0, "name") != "vmagent" || dig(reader, "subjects", 0, "kind") != "ServiceAccount" {
				t.Errorf("metrics.readers binding: %v", reader)
			}
			cm := objs["ConfigMap/"+name+"-dashboard"]
			if dig(cm, "metadata", "labels", "grafana_dashboard") != "1" {
				t.Errorf("dashboard ConfigMap labels %v", dig(cm, "metadata", "labels"))
			}
			var dash map[string]any
			if err := json.Unmarshal([]byte(dig(cm, "data", name+".json").(string)), &dash); err != nil || dash["panels"] == nil {
				t.Errorf("dashboard JSON: %v", err)
			}

			// grafana-operator's GrafanaDashboard, as Cozystack's Grafana loads dashboards: the same
			// JSON inline, picked up by Grafana instances labelled dashboards=grafana in any namespace.
			gd := objs["GrafanaDashboard/"+name]
			if dig(gd, "apiVersion") != "grafana.integreatly.org/v1beta1" || dig(gd, "spec", "instanceSelector", "matchLabels", "dashboards") != "grafana" ||
				dig(gd, "spec", "allowCrossNamespaceImport") != true || dig(gd, "spec", "folder") != "reserved-ips" ||
				dig(gd, "metadata", "labels", "team") != "net" || dig(gd, "metadata", "namespace") != "cozy-"+name {
				t.Errorf("GrafanaDashboard %v", gd)
			}
			if dig(gd, "spec", "json") != dig(cm, "data", name+".json") {
				t.Error("the GrafanaDashboard's JSON is not the dashboard's")
			}
			// Without the ConfigMap too: the GrafanaDashboard does not depend on it.
			objs = render(t, name, map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"enabled": true, "allowCrossNamespaceImport": false}}})
			if objs["GrafanaDashboard/"+name] == nil || objs["ConfigMap/"+name+"-dashboard"] != nil || dig(objs["GrafanaDashboard/"+name], "spec", "allowCrossNamespaceImport") != nil {
				t.Errorf("grafanaDashboard alone: %v", keys(objs))
			}

			// Plain HTTP metrics: no review permissions, http scrapes.
			objs = render(t, name, map[string]any{"metrics": map[string]any{"secure": false, "serviceMonitor": map[string]any{"enabled": true}}})
			if objs["ClusterRole/"+name+"-metrics-auth"] != nil || dig(objs["ServiceMonitor/"+name], "spec", "endpoints", 0, "scheme") != "http" ||
				!slices.Contains(toStrings(dig(objs["Deployment/"+name], "spec", "template", "spec", "containers", 0, "args")), "--metrics-secure=false") {
				t.Error("metrics.secure=false still renders the secure set-up")
			}
		})
	}
}

// CRDs: templates kept on uninstall by default; crds.enabled=false leaves them out.
func TestCRDSwitches(t *testing.T) {
	objs := render(t, "address-controller", nil)
	crd := objs["CustomResourceDefinition/ipaddressclaims.local.sdn.cozystack.io"]
	if dig(crd, "metadata", "annotations", "helm.sh/resource-policy") != "keep" || dig(crd, "spec", "versions", 0, "schema") == nil {
		t.Errorf("CRD %v", dig(crd, "metadata"))
	}
	if objs := render(t, "address-controller", map[string]any{"crds": map[string]any{"keep": false}}); dig(objs["CustomResourceDefinition/ipaddressclaims.local.sdn.cozystack.io"], "metadata", "annotations", "helm.sh/resource-policy") != nil {
		t.Error("crds.keep=false still keeps the CRDs")
	}
	objs = render(t, "address-controller", map[string]any{"crds": map[string]any{"enabled": false}})
	for k := range objs {
		if strings.HasPrefix(k, "CustomResourceDefinition/") {
			t.Errorf("crds.enabled=false renders %s", k)
		}
	}
}

func TestSchemasRejectBadOperatorValues(t *testing.T) {
	for _, tc := range []struct {
		chart  string
		values map[string]any
		want   string
	}{
		{"address-controller", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "five minutes"}}}, "interval"},
		{"address-controller", map[string]any{"extraArgs": []any{"leader-elect=false"}}, "extraArgs"},
		{"address-controller", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"pendingMinutes": 0}}}, "pendingMinutes"},
		{"address-controller", map[string]any{"crds": map[string]any{"install": true}}, "install"},
		{"metallb-iad", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"poolFreeRatio": 2}}}, "poolFreeRatio"},
		{"metallb-iad", map[string]any{"podDisruptionBudget": map[string]any{"maxUnavailable": "half"}}, "maxUnavailable"},
		{"metallb-iad", map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"a": 1}}}, "annotations"},
		{"metallb-iad", map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"folder": ""}}}, "folder"},
		{"address-controller", map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"instanceSelector": map[string]any{"matchLabel": map[string]any{}}}}}, "matchLabel"},
	} {
		c, err := Load(Dir(root, tc.chart))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Render(c, "ns", tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s with %v: error %v, want one naming %s", tc.chart, tc.values, err, tc.want)
		}
	}
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
