package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cozystack/reserved-ips/tools/charts"
	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// RepoRoot finds the checkout the sandbox runs from (the directory of go.work), where the
// controllers' sources, CRDs and RBAC live.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("locating the checkout (go env GOWORK): %w", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		return "", fmt.Errorf("the sandbox runs from inside the checkout (no go.work found from %s)", mustGetwd())
	}
	return filepath.Dir(work), nil
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

// buildController compiles one of the project's commands into the state directory, so the
// sandbox always runs the code of the checkout.
func buildController(root, dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, "bin", name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// Controller describes one of the project's controllers as the sandbox runs it.
type Controller struct {
	// Name of the command, the process, the chart, its release and its ServiceAccount.
	Name      string
	Package   string
	Namespace string
	// Values are the chart values the sandbox installs it with (deploy is always false: the
	// sandbox runs the controller as a local process, as the chart's ServiceAccount).
	Values map[string]any
	// Args are extra flags.
	Args []string
}

// AddressController is the core, run as ServiceAccount cozy-address-controller/address-controller.
var AddressController = Controller{
	Name:      "address-controller",
	Package:   "./address-controller/cmd/address-controller",
	Namespace: "cozy-address-controller",
}

// MetalLBIAD is the MetalLB driver, run as ServiceAccount cozy-metallb-iad/metallb-iad.
var MetalLBIAD = Controller{
	Name:      "metallb-iad",
	Package:   "./metallb-iad/cmd/metallb-iad",
	Namespace: "cozy-metallb-iad",
	Values:    map[string]any{"metallbNamespace": "cozy-metallb"},
	Args:      []string{"--namespace=cozy-metallb-iad"},
}

// installChart installs (or upgrades) the controller's chart with the Helm Go SDK: CRDs, RBAC
// generated from the code's markers, the ServiceAccount, tenant roles, the admission policy.
func installChart(ctx context.Context, s *Sandbox, c Controller) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	load := s.charts
	if load == nil {
		load = func(name string) (*charts.Chart, error) { return charts.Load(charts.Dir(root, name)) }
	}
	ch, err := load(c.Name)
	if err != nil {
		return err
	}
	_, err = charts.Apply(ctx, s.Kubeconfig, c.Namespace, c.Name, ch, chartValues(c))
	return err
}

// chartValues are the values the sandbox installs c's chart with: deploy is always false (the
// sandbox runs the controller as a local process).
func chartValues(c Controller) map[string]any {
	values := map[string]any{"deploy": false}
	for k, v := range c.Values {
		values[k] = v
	}
	return values
}

// chartEnv is the environment the chart's Deployment gives the controller by default (its
// memoryTarget as GOMEMLIMIT), so that the sandbox, the e2e suite and the benchmark run the
// shipped settings. An explicit GOMEMLIMIT in the sandbox's own environment wins.
func chartEnv(root string, c Controller) ([]string, error) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return nil, nil
	}
	ch, err := charts.Load(charts.Dir(root, c.Name))
	if err != nil {
		return nil, err
	}
	if target, _ := ch.Values["memoryTarget"].(string); target != "" {
		return []string{"GOMEMLIMIT=" + target}, nil
	}
	return nil, nil
}

// runController builds the controller and runs it as the ServiceAccount its chart created (so
// the chart's RBAC is what it gets), with metrics and probes on free loopback ports.
func runController(ctx context.Context, s *Sandbox, c Controller) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	bin, err := buildController(root, s.Dir, c.Package, c.Name)
	if err != nil {
		return err
	}
	kubeconfig, _, err := s.ServiceAccountKubeconfig(ctx, c.Namespace, c.Name)
	if err != nil {
		return err
	}
	metricsPort, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	probePort, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		"--leader-election-namespace=" + c.Namespace,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
	}, c.Args...)
	args = append(args, s.controllerArgs...)
	if c.Name == MetalLBIAD.Name {
		args = append(args, s.driverArgs...)
	}
	env, err := chartEnv(root, c)
	if err != nil {
		return err
	}
	_, err = s.StartProcess(ctx, controlplane.ProcessSpec{
		Name:  c.Name,
		Path:  bin,
		Args:  args,
		Env:   env,
		Ready: controlplane.HTTPCheck(fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort), nil),
	})
	if err != nil {
		return err
	}
	if s.Endpoints == nil {
		s.Endpoints = map[string]string{}
	}
	s.Endpoints[c.Name+"/metrics"] = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	return nil
}
