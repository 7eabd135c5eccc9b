package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
	"github.com/cozystack/reserved-ips/tools/charts/render"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// MetalLB's controller runs as Cozystack's cozystack.metallb package runs it: the upstream chart
// installed as release "metallb" (so its ServiceAccount is metallb-controller), with the
// chart's RBAC and no more, a Pod object of its own (v0.16 reads it at start), and its health
// probe and metrics ports. Only the Deployment is replaced by a local process: nothing here runs
// containers, so the Pod stays Pending and exists for MetalLB to read.
const (
	// MetalLBRelease is the Helm release name Cozystack gives MetalLB's chart.
	MetalLBRelease = "metallb"
	// MetalLBServiceAccount is the controller's ServiceAccount in that release.
	MetalLBServiceAccount = MetalLBRelease + "-controller"
	// MetalLBPod is the name of the controller's Pod object.
	MetalLBPod = MetalLBRelease + "-controller-0"
	// metricsReader is the ServiceAccount (in MetalLB's namespace) the control plane scrapes
	// MetalLB's metrics with, as a Prometheus would.
	metricsReader = "metrics-reader"
)

// MetalLBUser is the apiserver username of MetalLB's controller in a control plane whose
// MetalLB runs in namespace.
func MetalLBUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + MetalLBServiceAccount
}

// MetalLBSecureMetrics says whether a MetalLB version serves its metrics over HTTPS with
// authentication and reads its own Pod at start (v0.16 and later). Earlier versions serve plain
// HTTP metrics and have no health probe.
func MetalLBSecureMetrics(v string) bool {
	parsed, err := version.ParseSemantic(v)
	return err == nil && parsed.AtLeast(version.MustParseSemantic("v0.16.0"))
}

// MetalLBImage is the controller image a cluster would run for MetalLB version v. An image tag
// cannot hold the "+" of a patched build's version (v0.16.1+patched), so it becomes "-":
// quay.io/metallb/controller:v0.16.1-patched, the tag a build carrying the patches would push.
func MetalLBImage(v string) string {
	return "quay.io/metallb/controller:" + strings.ReplaceAll(v, "+", "-")
}

// MetricsEndpoint is a metrics URL and what it takes to read it.
type MetricsEndpoint struct {
	URL string
	// Token is sent as a bearer token when set.
	Token string
	// Client verifies the server's certificate.
	Client *http.Client
}

// Scrape reads the endpoint once.
func (m *MetricsEndpoint) Scrape(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return nil, err
	}
	if m.Token != "" {
		req.Header.Set("Authorization", "Bearer "+m.Token)
	}
	resp, err := m.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s", m.URL, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

func (cp *ControlPlane) startMetalLB(ctx context.Context) error {
	mlb := binaries.MetalLBAt(cp.MetalLBVersion)
	controller, err := mlb.Path("metallb-controller")
	if err != nil {
		return err
	}
	crds, err := mlb.Path("crds")
	if err != nil {
		return err
	}
	if err := cp.InstallCRDs(ctx, crds); err != nil {
		return fmt.Errorf("installing MetalLB's CRDs: %w", err)
	}
	ns := cp.MetalLBNamespace
	if err := cp.EnsureNamespace(ctx, ns, nil); err != nil {
		return err
	}
	if err := cp.applyMetalLBRBAC(ctx, mlb); err != nil {
		return fmt.Errorf("MetalLB %s's RBAC: %w", mlb.Version, err)
	}
	kubeconfig, _, err := cp.ServiceAccountKubeconfig(ctx, ns, MetalLBServiceAccount)
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	spec := ProcessSpec{
		Name: "metallb-controller",
		Path: controller,
		Args: []string{
			"--webhook-mode=disabled",
			"--port=" + strconv.Itoa(port),
			"--namespace=" + ns,
			"--log-level=info",
		},
		Env: []string{"KUBECONFIG=" + kubeconfig, "METALLB_NAMESPACE=" + ns},
	}
	metrics := &MetricsEndpoint{URL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), Client: http.DefaultClient}
	if !MetalLBSecureMetrics(mlb.Version) {
		spec.Ready = HTTPCheck(metrics.URL, nil)
	} else {
		if err := cp.createMetalLBPod(ctx, mlb.Version); err != nil {
			return err
		}
		probe, err := FreePort()
		if err != nil {
			return err
		}
		// Metrics over HTTPS with a certificate of the cluster's CA (as a cert-manager issued
		// metrics certificate would be), read with a ServiceAccount token that MetalLB checks
		// with a TokenReview and a SubjectAccessReview.
		certDir := filepath.Join(cp.Dir, "metallb-metrics")
		if err := cp.issueServing(certDir, "metallb-metrics", "127.0.0.1"); err != nil {
			return err
		}
		token, err := cp.metricsReaderToken(ctx)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(cp.pki.path("ca.crt"))
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(ca)
		metrics = &MetricsEndpoint{
			URL:    fmt.Sprintf("https://127.0.0.1:%d/metrics", port),
			Token:  token,
			Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		}
		spec.Args = append(spec.Args,
			"--health-probe-port="+strconv.Itoa(probe),
			"--pod-name="+MetalLBPod,
			"--metrics-cert-dir="+certDir,
		)
		spec.Env = append(spec.Env, "METALLB_POD_NAME="+MetalLBPod)
		spec.Ready = HTTPCheck(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), nil)
	}
	if _, err := cp.StartProcess(ctx, spec); err != nil {
		return err
	}
	cp.MetalLBMetrics = metrics
	return nil
}

// applyMetalLBRBAC renders the ServiceAccounts and RBAC of MetalLB's chart (of the version in
// use) as Cozystack's release of it, and applies them.
func (cp *ControlPlane) applyMetalLBRBAC(ctx context.Context, mlb binaries.Component) error {
	dir, err := mlb.Path("chart")
	if err != nil {
		return err
	}
	ch, err := render.Load(dir)
	if err != nil {
		return err
	}
	manifest, err := render.RenderRelease(ch, MetalLBRelease, cp.MetalLBNamespace, nil)
	if err != nil {
		return fmt.Errorf("rendering MetalLB's chart: %w", err)
	}
	objs, err := kubeapply.Decode([]byte(manifest))
	if err != nil {
		return err
	}
	var rbac []byte
	found := false
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			data, err := yaml.Marshal(o.Object)
			if err != nil {
				return err
			}
			rbac = append(append(rbac, "---\n"...), data...)
			found = found || (o.GetKind() == "ServiceAccount" && o.GetName() == MetalLBServiceAccount)
		}
	}
	if !found {
		return fmt.Errorf("the chart renders no ServiceAccount %s", MetalLBServiceAccount)
	}
	_, err = kubeapply.Apply(ctx, cp.Config, "controlplane", rbac)
	return err
}

// createMetalLBPod makes the Pod object MetalLB's controller reads at start (its
// ConfigurationState is owned by it).
func (cp *ControlPlane) createMetalLBPod(ctx context.Context, v string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: MetalLBPod, Namespace: cp.MetalLBNamespace, Labels: map[string]string{
			"app.kubernetes.io/name":      "metallb",
			"app.kubernetes.io/instance":  MetalLBRelease,
			"app.kubernetes.io/component": "controller",
		}},
		Spec: corev1.PodSpec{
			ServiceAccountName: MetalLBServiceAccount,
			Containers:         []corev1.Container{{Name: "controller", Image: MetalLBImage(v)}},
		},
	}
	_, err := cp.Client.CoreV1().Pods(cp.MetalLBNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating MetalLB's Pod object: %w", err)
	}
	return nil
}

// metricsReaderToken returns a token of a ServiceAccount allowed to read /metrics and nothing
// else.
func (cp *ControlPlane) metricsReaderToken(ctx context.Context) (string, error) {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "controlplane:metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: cp.MetalLBNamespace, Name: metricsReader}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	_, cfg, err := cp.ServiceAccountKubeconfig(ctx, cp.MetalLBNamespace, metricsReader)
	if err != nil {
		return "", err
	}
	return cfg.BearerToken, nil
}

// issueServing writes tls.crt and tls.key for hosts, signed by the cluster's CA, into dir.
func (cp *ControlPlane) issueServing(dir, name string, hosts ...string) error {
	if err := cp.pki.issue(name, name, nil, hosts); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{name + ".crt": "tls.crt", name + ".key": "tls.key"} {
		data, err := os.ReadFile(cp.pki.path(src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// InstallCRDs creates (or replaces) every CustomResourceDefinition in the YAML files of dir and
// waits until each is established.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, dir string) error {
	client, err := apiextensionsclient.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict([]byte(doc), &crd); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			api := client.ApiextensionsV1().CustomResourceDefinitions()
			existing, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = api.Create(ctx, &crd, metav1.CreateOptions{})
			case err == nil:
				crd.ResourceVersion = existing.ResourceVersion
				_, err = api.Update(ctx, &crd, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		err := cp.waitFor(ctx, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
