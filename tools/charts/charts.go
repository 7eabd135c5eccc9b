// Package charts installs, renders and lints the project's Helm charts with the Helm v4 Go SDK,
// as Cozystack's operator installs them through Flux's helm-controller, for the sandbox, the e2e
// suite and the charts' own tests.
package charts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/kube"
	helmcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"

	helmrender "github.com/cozystack/reserved-ips/tools/charts/render"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// Chart is a loaded Helm chart.
type Chart = helmrender.Chart

// Release is an installed release, as Helm stores it.
type Release = release.Release

// Dir is the directory of one of the project's charts in the checkout at root.
func Dir(root, name string) string { return filepath.Join(root, "charts", name) }

// FieldManager is the field manager of every object Apply writes: Flux's helm-controller's, as
// on a Cozystack cluster, so that a later server-side apply by the platform finds the fields owned
// by the manager it uses itself.
const FieldManager = "helm-controller"

func init() { kube.ManagedFieldsManager = FieldManager }

// Options say how Apply installs and upgrades a release. The zero value is how Flux's
// helm-controller (v1.5 and later, on the Helm v4 SDK), and so Cozystack's operator through it,
// installs a HelmRelease, but for the wait: server-side apply with conflicts forced, taking over
// objects that exist without Helm's ownership, values reset to the chart's on upgrade.
type Options struct {
	// Wait waits, after the install or upgrade, until every object of the release is current by
	// kstatus (Deployments available, CRDs established, ...), as helm-controller does by default.
	Wait bool
	// Timeout bounds the wait (5 minutes when zero).
	Timeout time.Duration
	// MaxHistory is how many releases Helm keeps (Cozystack's operator sets 5; 0 keeps all).
	MaxHistory int
	// Labels are Helm's release labels.
	Labels map[string]string
}

// Apply installs the chart as release name in namespace, or upgrades it when it exists, as Flux's
// helm-controller does without its wait (Options' zero value).
func Apply(ctx context.Context, kubeconfig, namespace, name string, c *Chart, values map[string]any) (*Release, error) {
	return ApplyWith(ctx, kubeconfig, namespace, name, c, values, Options{})
}

// ApplyWith is Apply with the given options.
func ApplyWith(ctx context.Context, kubeconfig, namespace, name string, c *Chart, values map[string]any, o Options) (*Release, error) {
	cfg, err := configuration(kubeconfig, namespace)
	if err != nil {
		return nil, err
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	wait := kube.HookOnlyStrategy
	if o.Wait {
		wait = kube.StatusWatcherStrategy
	}
	var r any
	last, err := cfg.Releases.Last(name)
	if err == nil {
		// A release left pending by an install or upgrade that was interrupted (its process
		// killed) locks every later one out ("another operation is in progress"); as Flux's
		// helm-controller does, it is marked failed first, and the next upgrade goes ahead.
		if rel, ok := last.(*release.Release); ok && rel.Info != nil && rel.Info.Status.IsPending() {
			rel.Info.Description = "interrupted while " + string(rel.Info.Status) + "; marked failed to go on"
			rel.Info.Status = helmcommon.StatusFailed
			if err := cfg.Releases.Update(rel); err != nil {
				return nil, fmt.Errorf("unlocking release %s left pending: %w", name, err)
			}
		}
	}
	if errors.Is(err, driver.ErrReleaseNotFound) {
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace = name, namespace
		install.ServerSideApply, install.ForceConflicts, install.TakeOwnership = true, true, true
		install.WaitStrategy, install.Timeout, install.WaitForJobs = wait, o.Timeout, o.Wait
		install.Labels = o.Labels
		if r, err = install.RunWithContext(ctx, c, values); err != nil {
			return nil, fmt.Errorf("installing %s: %w", name, err)
		}
	} else if err != nil {
		return nil, err
	} else {
		upgrade := action.NewUpgrade(cfg)
		upgrade.Namespace = namespace
		upgrade.ServerSideApply, upgrade.ForceConflicts, upgrade.TakeOwnership = "true", true, true
		upgrade.ResetValues, upgrade.MaxHistory = true, o.MaxHistory
		upgrade.WaitStrategy, upgrade.Timeout, upgrade.WaitForJobs = wait, o.Timeout, o.Wait
		upgrade.Labels = o.Labels
		if r, err = upgrade.RunWithContext(ctx, name, c, values); err != nil {
			return nil, fmt.Errorf("upgrading %s: %w", name, err)
		}
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("release %s: Helm returned a %T", name, r)
	}
	return rel, waitForCRDs(ctx, kubeconfig, rel)
}

// configuration is Helm's action configuration for namespace of the cluster of kubeconfig, with
// releases in Secrets (Helm's default, and helm-controller's) and Helm's log discarded.
func configuration(kubeconfig, namespace string) (*action.Configuration, error) {
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler)
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Get returns the release's current state.
func Get(kubeconfig, namespace, name string) (*Release, error) {
	cfg, err := configuration(kubeconfig, namespace)
	if err != nil {
		return nil, err
	}
	r, err := action.NewGet(cfg).Run(name)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("release %s: Helm returned a %T", name, r)
	}
	return rel, nil
}

// waitForCRDs waits until every CRD the release manifest holds is Established, as Helm does for
// a chart's crds/ directory: the core's chart ships its CRDs as templates (so that upgrades
// update them), and whatever comes next (a controller's informers, objects of those kinds) needs
// them served.
func waitForCRDs(ctx context.Context, kubeconfig string, rel *release.Release) error {
	objs, err := kubeapply.Decode([]byte(rel.Manifest))
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			names = append(names, o.GetName())
		}
	}
	if len(names) == 0 {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, name := range names {
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s of release %s is not established: %w", name, rel.Name, err)
		}
	}
	return nil
}

// Uninstall removes a release, like `helm uninstall`, waiting until its objects are gone when
// wait is set (helm-controller's uninstall waits).
func Uninstall(kubeconfig, namespace, name string) error {
	return UninstallWith(kubeconfig, namespace, name, false)
}

// UninstallWith is Uninstall, waiting for the objects to be gone when wait is set.
func UninstallWith(kubeconfig, namespace, name string, wait bool) error {
	cfg, err := configuration(kubeconfig, namespace)
	if err != nil {
		return err
	}
	u := action.NewUninstall(cfg)
	u.WaitStrategy, u.Timeout = kube.HookOnlyStrategy, 5*time.Minute
	if wait {
		u.WaitStrategy = kube.StatusWatcherStrategy
	}
	_, err = u.Run(name)
	return err
}

// Offline rendering lives in package render, which the control plane imports too (it renders
// MetalLB's chart for its RBAC); these are its names for the charts' callers.
var (
	Load          = helmrender.Load
	Render        = helmrender.Render
	RenderRelease = helmrender.RenderRelease
	RenderFor     = helmrender.RenderFor
	RenderAt      = helmrender.RenderAt
	ServedKinds   = helmrender.ServedKinds
)

// Lint runs Helm's linter (strict) over a chart directory with the given values.
func Lint(dir string, values map[string]any) []error {
	l := action.NewLint()
	l.Strict = true
	res := l.Run([]string{dir}, values)
	if res.TotalChartsLinted == 0 {
		return res.Errors // the chart could not be loaded
	}
	var out []error
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev { // warnings and errors
			out = append(out, fmt.Errorf("%s: %w", m.Path, m.Err))
		}
	}
	return out
}
