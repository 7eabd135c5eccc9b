package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/cozystack/reserved-ips/tools/images"
)

// The chart settings platform teams expect from a chart of MetalLB's or cert-manager's kind, one
// render test each, over both charts.

// image is a map in cert-manager's shape; its parts build the reference, global.imageRegistry
// replaces the registry and keeps the repository path, and a plain string stays a whole reference.
func TestChartImageValue(t *testing.T) {
	digest := "sha256:" + strings.Repeat("c", 64)
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			image := func(values map[string]any) string {
				objs := render(t, name, values)
				return dig(objs["Deployment/"+name], "spec", "template", "spec", "containers", 0, "image").(string)
			}
			// The default: the chart's own image map, composed (a release rewrites the map, so the
			// test reads it rather than naming ghcr.io).
			defaults := mustLoad(t, name).Values["image"].(map[string]any)
			registry, repository := defaults["registry"].(string), defaults["repository"].(string)
			if got, want := image(nil), images.ImageRef(defaults); got != want || !strings.Contains(got, "@sha256:") || !strings.HasSuffix(repository, "/"+name) {
				t.Errorf("default image %q, want %s, a digest reference", got, want)
			}
			parts := map[string]any{"registry": "registry.example.org", "repository": "team/" + name, "tag": "v1.2.3", "digest": digest}
			if got, want := image(map[string]any{"image": parts}), "registry.example.org/team/"+name+":v1.2.3@"+digest; got != want {
				t.Errorf("image from parts %q, want %q", got, want)
			}
			if got, want := image(map[string]any{"image": map[string]any{"tag": "", "digest": digest}}), registry+"/"+repository+"@"+digest; got != want {
				t.Errorf("digest alone %q, want %q", got, want)
			}
			global := map[string]any{"imageRegistry": "mirror.example.org:5000"}
			got := image(map[string]any{"global": global})
			if !strings.HasPrefix(got, "mirror.example.org:5000/"+repository+":") {
				t.Errorf("global.imageRegistry gives %q, want the mirror with the repository path kept", got)
			}
			whole := "other.example.org/x/" + name + "@" + digest
			if got := image(map[string]any{"image": whole, "global": global}); got != whole {
				t.Errorf("a string image %q became %q", whole, got)
			}
			if _, err := RenderRelease(mustLoad(t, name), name, "cozy-"+name, map[string]any{"image": map[string]any{"digest": "sha256:nothex"}}); err == nil {
				t.Error("schema accepts a malformed digest")
			}
		})
	}
}

// A NetworkPolicy, off by default, admitting the metrics port (from metricsFrom) and the probe
// port and letting the pods reach the apiserver and DNS.
func TestChartNetworkPolicy(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			if objs := render(t, name, nil); objs["NetworkPolicy/"+name] != nil {
				t.Fatal("NetworkPolicy rendered by default")
			}
			from := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "cozy-monitoring"}}}}
			objs := render(t, name, map[string]any{"networkPolicy": map[string]any{"enabled": true, "metricsFrom": from}})
			np := objs["NetworkPolicy/"+name]
			if np == nil {
				t.Fatalf("no NetworkPolicy: %v", keys(objs))
			}
			if dig(np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/name") != name ||
				!slices.Equal(toStrings(dig(np, "spec", "policyTypes")), []string{"Ingress", "Egress"}) {
				t.Errorf("selector or policy types: %v", np["spec"])
			}
			if num(dig(np, "spec", "ingress", 0, "ports", 0, "port")) != "8080" ||
				dig(np, "spec", "ingress", 0, "from", 0, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "cozy-monitoring" {
				t.Errorf("metrics ingress: %v", dig(np, "spec", "ingress", 0))
			}
			if num(dig(np, "spec", "ingress", 1, "ports", 0, "port")) != "8081" || dig(np, "spec", "ingress", 1, "from") != nil {
				t.Errorf("probe ingress: %v", dig(np, "spec", "ingress", 1))
			}
			var egress []string
			for _, rule := range dig(np, "spec", "egress").([]any) {
				for _, p := range rule.(map[string]any)["ports"].([]any) {
					egress = append(egress, num(p.(map[string]any)["port"])+"/"+p.(map[string]any)["protocol"].(string))
				}
			}
			for _, want := range []string{"443/TCP", "6443/TCP", "53/UDP", "53/TCP"} {
				if !slices.Contains(egress, want) {
					t.Errorf("egress %v lacks %s", egress, want)
				}
			}
		})
	}
}

// topologySpreadConstraints (through tpl) and the deployment strategy reach the Deployment.
func TestChartSpreadAndStrategy(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			objs := render(t, name, map[string]any{
				"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": 0}},
				"topologySpreadConstraints": []any{map[string]any{
					"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
					"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/instance": "{{ .Release.Name }}"}},
				}},
			})
			dep := objs["Deployment/"+name]
			if dig(dep, "spec", "strategy", "type") != "RollingUpdate" || num(dig(dep, "spec", "strategy", "rollingUpdate", "maxUnavailable")) != "0" {
				t.Errorf("strategy %v", dig(dep, "spec", "strategy"))
			}
			tsc := dig(dep, "spec", "template", "spec", "topologySpreadConstraints", 0)
			if dig(tsc.(map[string]any), "topologyKey") != "kubernetes.io/hostname" ||
				dig(tsc.(map[string]any), "labelSelector", "matchLabels", "app.kubernetes.io/instance") != name {
				t.Errorf("topologySpreadConstraints %v", tsc)
			}
			if dep := render(t, name, nil)["Deployment/"+name]; dig(dep, "spec", "strategy") != nil || dig(dep, "spec", "template", "spec", "topologySpreadConstraints") != nil {
				t.Error("strategy or spread rendered by default")
			}
		})
	}
}

// Probes: their timings are values, each can be turned off, and the endpoints stay the chart's.
func TestChartProbes(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			c := dig(render(t, name, nil)["Deployment/"+name], "spec", "template", "spec", "containers", 0).(map[string]any)
			if dig(c, "livenessProbe", "httpGet", "path") != "/healthz" || num(dig(c, "livenessProbe", "initialDelaySeconds")) != "10" ||
				dig(c, "readinessProbe", "httpGet", "path") != "/readyz" || dig(c, "livenessProbe", "enabled") != nil {
				t.Errorf("default probes %v %v", c["livenessProbe"], c["readinessProbe"])
			}
			c = dig(render(t, name, map[string]any{
				"livenessProbe":  map[string]any{"periodSeconds": 30, "failureThreshold": 6},
				"readinessProbe": map[string]any{"enabled": false},
			})["Deployment/"+name], "spec", "template", "spec", "containers", 0).(map[string]any)
			if num(dig(c, "livenessProbe", "periodSeconds")) != "30" || num(dig(c, "livenessProbe", "failureThreshold")) != "6" ||
				dig(c, "livenessProbe", "httpGet", "port") != "probes" || c["readinessProbe"] != nil {
				t.Errorf("configured probes %v %v", c["livenessProbe"], c["readinessProbe"])
			}
			if _, err := RenderRelease(mustLoad(t, name), name, "cozy-"+name, map[string]any{"livenessProbe": map[string]any{"exec": map[string]any{}}}); err == nil {
				t.Error("schema accepts a probe handler, which the chart sets itself")
			}
		})
	}
}

// serviceAccount.create, rbac.create, nameOverride and fullnameOverride.
func TestChartIdentityValues(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			objs := render(t, name, map[string]any{"serviceAccount": map[string]any{"create": false, "name": "existing"}, "rbac": map[string]any{"create": false}})
			for k := range objs {
				kind := k[:strings.Index(k, "/")]
				if kind == "ServiceAccount" || strings.HasPrefix(kind, "ClusterRole") || strings.HasPrefix(kind, "Role") {
					t.Errorf("%s rendered with serviceAccount.create and rbac.create false", k)
				}
			}
			if sa := dig(objs["Deployment/"+name], "spec", "template", "spec", "serviceAccountName"); sa != "existing" {
				t.Errorf("serviceAccountName %v, want existing", sa)
			}

			objs = render(t, name, map[string]any{"fullnameOverride": "rip", "nameOverride": "rip-name", "serviceAccount": map[string]any{"name": ""}})
			dep := objs["Deployment/rip"]
			if dep == nil {
				t.Fatalf("fullnameOverride: no Deployment/rip in %v", keys(objs))
			}
			if dig(dep, "spec", "selector", "matchLabels", "app.kubernetes.io/name") != "rip-name" || dig(dep, "metadata", "labels", "app.kubernetes.io/name") != "rip-name" {
				t.Errorf("nameOverride not in labels: %v", dig(dep, "spec", "selector"))
			}
			if objs["ServiceAccount/rip"] == nil || dig(dep, "spec", "template", "spec", "serviceAccountName") != "rip" {
				t.Errorf("empty serviceAccount.name is not the fullname: %v", keys(objs))
			}
			if objs["Service/rip-metrics"] == nil {
				t.Errorf("metrics Service not renamed: %v", keys(objs))
			}
			for k, o := range objs {
				subjects, _ := dig(o, "subjects").([]any)
				for _, s := range subjects {
					if s.(map[string]any)["kind"] == "ServiceAccount" && s.(map[string]any)["name"] == name {
						t.Errorf("%s still binds ServiceAccount %s", k, name)
					}
				}
			}
		})
	}
}

// The ServiceMonitor and VMServiceScrape authenticate with the chart's scraper token through
// `authorization`, and verify the endpoint against the CA of metrics.tls when there is one.
func TestChartScrapeAuthorization(t *testing.T) {
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			on := map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "vmServiceScrape": map[string]any{"enabled": true}}
			objs := render(t, name, map[string]any{"metrics": on})
			token := objs["Secret/"+name+"-metrics-scraper-token"]
			if dig(token, "type") != "kubernetes.io/service-account-token" || dig(token, "metadata", "annotations", "kubernetes.io/service-account.name") != name+"-metrics-scraper" {
				t.Errorf("scraper token Secret %v", token)
			}
			if b := objs["ClusterRoleBinding/"+name+"-metrics-scraper"]; dig(b, "roleRef", "name") != name+"-metrics-reader" || dig(b, "subjects", 0, "name") != name+"-metrics-scraper" {
				t.Errorf("scraper binding %v", b)
			}
			for _, kind := range []string{"ServiceMonitor", "VMServiceScrape"} {
				ep := dig(objs[kind+"/"+name], "spec", "endpoints", 0).(map[string]any)
				if dig(ep, "authorization", "type") != "Bearer" || dig(ep, "authorization", "credentials", "name") != name+"-metrics-scraper-token" ||
					dig(ep, "authorization", "credentials", "key") != "token" || ep["bearerTokenFile"] != nil {
					t.Errorf("%s endpoint %v", kind, ep)
				}
			}

			// With a certificate from cert-manager: mounted, served, verified; nothing skips verification.
			on["tls"] = map[string]any{"certManager": map[string]any{"enabled": true}}
			objs = render(t, name, map[string]any{"metrics": on})
			secret := name + "-metrics-tls"
			if dig(objs["Certificate/"+name+"-metrics"], "spec", "secretName") != secret || objs["Issuer/"+name+"-metrics-selfsigned"] == nil ||
				dig(objs["Certificate/"+name+"-metrics"], "spec", "dnsNames", 0) != name+"-metrics.cozy-"+name+".svc" {
				t.Errorf("cert-manager objects: %v", keys(objs))
			}
			pod := dig(objs["Deployment/"+name], "spec", "template", "spec").(map[string]any)
			if dig(pod, "volumes", 0, "secret", "secretName") != secret || !slices.Contains(toStrings(dig(pod, "containers", 0, "args")), "--metrics-cert-dir=/etc/metrics-tls") {
				t.Errorf("certificate not served: %v", pod["volumes"])
			}
			for _, kind := range []string{"ServiceMonitor", "VMServiceScrape"} {
				tls := dig(objs[kind+"/"+name], "spec", "endpoints", 0, "tlsConfig").(map[string]any)
				if tls["insecureSkipVerify"] != nil || dig(tls, "ca", "secret", "name") != secret || dig(tls, "ca", "secret", "key") != "ca.crt" ||
					tls["serverName"] != name+"-metrics.cozy-"+name+".svc" {
					t.Errorf("%s tlsConfig %v", kind, tls)
				}
			}
			// An issuer of the cluster's own.
			on["tls"] = map[string]any{"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "ca"}}}
			objs = render(t, name, map[string]any{"metrics": on})
			if objs["Issuer/"+name+"-metrics-selfsigned"] != nil || dig(objs["Certificate/"+name+"-metrics"], "spec", "issuerRef", "kind") != "ClusterIssuer" {
				t.Errorf("issuerRef not used: %v", keys(objs))
			}
		})
	}
}

// Alerts: a severity each (critical and warning both used), and a runbook_url whose anchor is a
// heading of docs/troubleshooting.md.
func TestChartAlertsSeveritiesAndRunbooks(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^#+ (.+)$").FindAllStringSubmatch(string(guide), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	severities := map[string]bool{}
	for _, name := range charts {
		t.Run(name, func(t *testing.T) {
			objs := render(t, name, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
			groups := dig(objs["PrometheusRule/"+name], "spec", "groups").([]any)
			n := 0
			for _, g := range groups {
				for _, r := range g.(map[string]any)["rules"].([]any) {
					rule := r.(map[string]any)
					n++
					sev, _ := dig(rule, "labels", "severity").(string)
					if sev != "critical" && sev != "warning" {
						t.Errorf("%v: severity %q", rule["alert"], sev)
					}
					severities[sev] = true
					url, _ := dig(rule, "annotations", "runbook_url").(string)
					base, anchor, ok := strings.Cut(url, "#")
					if !ok || base != "https://github.com/cozystack/reserved-ips/blob/main/docs/troubleshooting.md" || !anchors[anchor] {
						t.Errorf("%v: runbook_url %q is not a section of docs/troubleshooting.md", rule["alert"], url)
					}
				}
			}
			if n == 0 {
				t.Fatal("no alerts")
			}
		})
	}
	if !severities["critical"] || !severities["warning"] {
		t.Errorf("severities used: %v, want both critical and warning", severities)
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The replicas value says how to run highly available, and the README carries it.
func TestChartHighAvailabilityWord(t *testing.T) {
	for _, name := range charts {
		for _, f := range []string{"values.yaml", "README.md"} {
			data, err := os.ReadFile(filepath.Join(Dir(root, name), f))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "high availability") || !strings.Contains(string(data), "topologySpreadConstraints") {
				t.Errorf("%s/%s says nothing of high availability", name, f)
			}
		}
	}
}

// num prints a rendered number (an int64 or a float64, as the decoder gives it).
func num(v any) string { return fmt.Sprint(v) }

func mustLoad(t *testing.T, name string) *chart.Chart {
	t.Helper()
	c, err := Load(Dir(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
