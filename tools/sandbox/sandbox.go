// Package sandbox turns a local control plane into a Cozystack-shaped cluster: the platform's
// namespaces, then every add-on (the project's controllers, charts and examples, as later work
// plugs them in). The `sandbox` command and the e2e suite's local provider both use it, so what a
// developer tries by hand is what the tests run.
package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/controlplane"
	"github.com/cozystack/reserved-ips/tools/kubeapply"
)

// TenantLabel marks tenant namespaces on Cozystack; the admission policy selects on it.
const TenantLabel = "namespace.cozystack.io/host"

// Namespaces of a Cozystack cluster that the project uses, with their labels.
var Namespaces = []struct {
	Name   string
	Labels map[string]string
}{
	{"cozy-metallb", nil},
	{"cozy-address-controller", nil},
	{"cozy-metallb-iad", nil},
	{"tenant-root", map[string]string{TenantLabel: "root.example.org"}},
	{"tenant-example", map[string]string{TenantLabel: "example.example.org"}},
}

// Addon is one piece set up on top of the control plane, in order. This is where the
// controllers plug in: an add-on can install manifests, obtain a ServiceAccount kubeconfig with
// ControlPlane.ServiceAccountKubeconfig and run a process with ControlPlane.StartProcess, which
// the control plane then stops before its own components.
type Addon struct {
	Name string
	// Hint is printed by the sandbox command under "what to try next" (optional).
	Hint  string
	Start func(ctx context.Context, s *Sandbox) error
}

// Addons run in this order on every sandbox and e2e cluster.
var Addons = []Addon{
	{Name: "namespaces", Start: createNamespaces},
	{Name: "the address-controller chart", Start: func(ctx context.Context, s *Sandbox) error {
		return installChart(ctx, s, AddressController)
	}, Hint: "kubectl get ipam -A                              # classes, addresses and claims"},
	{Name: "the metallb-iad chart", Start: func(ctx context.Context, s *Sandbox) error {
		c, err := s.driver(ctx)
		if err != nil {
			return err
		}
		return installChart(ctx, s, c)
	}},
	{Name: "address-controller", Start: func(ctx context.Context, s *Sandbox) error {
		return runController(ctx, s, AddressController)
	}},
	{Name: "metallb-iad", Start: func(ctx context.Context, s *Sandbox) error {
		c, err := s.driver(ctx)
		if err != nil {
			return err
		}
		c.Args = append(c.Args, "--metallb-namespace="+s.MetalLBNamespace)
		return runController(ctx, s, c)
	}},
	{Name: "the example pool and class", Start: applyExamples,
		Hint: "kubectl apply -f examples/claim-web.yaml -f examples/service-web.yaml   # reserve, then attach"},
}

// applyExamples creates the product page's pool, advertisement and default class, when the
// sandbox is asked for them (the sandbox command; not the e2e suite, whose tests create their
// own).
func applyExamples(ctx context.Context, s *Sandbox) error {
	if !s.examples {
		return nil
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, f := range []string{"metallb-pool.yaml", "class-public.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "examples", f))
		if err != nil {
			return err
		}
		if _, err := kubeapply.Apply(ctx, s.Config, "sandbox", data); err != nil {
			return err
		}
	}
	return nil
}

// Options configures Start.
type Options struct {
	// ControlPlane configures the underlying control plane.
	ControlPlane controlplane.Options
	// Logf receives progress lines (also passed to the control plane when it has none).
	Logf func(format string, args ...any)
	// Examples also creates the example MetalLB pool and default class.
	Examples bool
	// ControllerArgs are extra flags for both controllers (after the sandbox's own).
	ControllerArgs []string
	// DriverArgs are extra flags for metallb-iad alone (after ControllerArgs).
	DriverArgs []string
	// Charts loads a controller's chart by name (address-controller, metallb-iad); nil: the
	// checkout's charts/<name>. A test sets it to pull the published charts from a registry.
	Charts func(name string) (*charts.Chart, error)
}

// Sandbox is a running control plane with every add-on set up.
type Sandbox struct {
	*controlplane.ControlPlane
	Logf func(format string, args ...any)
	// Endpoints are the URLs add-ons serve on loopback ("address-controller/metrics", ...).
	Endpoints map[string]string

	examples       bool
	controllerArgs []string
	driverArgs     []string
	charts         func(name string) (*charts.Chart, error)
	// parkingWebhookPort is the loopback port of the driver's parking webhook, on an apiserver
	// without MutatingAdmissionPolicy (0 until driver decides, -1 where the policies park).
	parkingWebhookPort int
}

// DriverChartValues are the values the sandbox installed the metallb-iad chart with, for a test
// that upgrades the release with values of its own merged over them.
func (s *Sandbox) DriverChartValues(ctx context.Context) (map[string]any, error) {
	c, err := s.driver(ctx)
	if err != nil {
		return nil, err
	}
	return chartValues(c), nil
}

// driver is MetalLBIAD as this sandbox runs it. Where the apiserver serves no
// MutatingAdmissionPolicy (Kubernetes before 1.36) the chart parks Services through the driver's
// webhook: the driver runs outside the cluster here, so the webhook listens on a loopback port and
// the chart's configuration calls that URL, with the address in the driver's certificate.
func (s *Sandbox) driver(ctx context.Context) (Controller, error) {
	c := MetalLBIAD
	if s.parkingWebhookPort == 0 {
		served, err := s.ServesMutatingAdmissionPolicy(ctx)
		if err != nil {
			return c, err
		}
		s.parkingWebhookPort = -1
		if !served {
			if s.parkingWebhookPort, err = controlplane.FreePort(); err != nil {
				return c, err
			}
		}
	}
	if s.parkingWebhookPort > 0 {
		addr := fmt.Sprintf("127.0.0.1:%d", s.parkingWebhookPort)
		values := map[string]any{}
		for k, v := range c.Values {
			values[k] = v
		}
		values["admissionPolicy"] = map[string]any{"parkingWebhook": map[string]any{"url": "https://" + addr + "/park"}}
		c.Values = values
		c.Args = append(slices.Clone(c.Args), "--parking-webhook-bind-address="+addr, "--parking-webhook-service=",
			"--parking-webhook-hosts=127.0.0.1")
	}
	return c, nil
}

// Start starts the control plane and the add-ons; on error everything is stopped again.
func Start(ctx context.Context, opts Options) (*Sandbox, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.ControlPlane.Logf == nil {
		opts.ControlPlane.Logf = logf
	}
	cp, err := controlplane.Start(ctx, opts.ControlPlane)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{ControlPlane: cp, Logf: logf, examples: opts.Examples, controllerArgs: opts.ControllerArgs, driverArgs: opts.DriverArgs,
		charts: opts.Charts}
	for _, a := range Addons {
		logf("setting up %s", a.Name)
		if err := a.Start(ctx, s); err != nil {
			_ = cp.Stop()
			return nil, fmt.Errorf("setting up %s: %w", a.Name, err)
		}
	}
	return s, nil
}

func createNamespaces(ctx context.Context, s *Sandbox) error {
	for _, ns := range Namespaces {
		if err := s.EnsureNamespace(ctx, ns.Name, ns.Labels); err != nil {
			return fmt.Errorf("namespace %s: %w", ns.Name, err)
		}
	}
	return nil
}
