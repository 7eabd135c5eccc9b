package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

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

// bindClusterRole applies a generated ClusterRole (config/rbac/role.yaml) and binds it to a
// ServiceAccount, so the controller runs with exactly the permissions its markers declare.
func bindClusterRole(ctx context.Context, s *Sandbox, rolePath, namespace, serviceAccount string) error {
	data, err := os.ReadFile(rolePath)
	if err != nil {
		return err
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		return fmt.Errorf("%s: %w", rolePath, err)
	}
	roles := s.Client.RbacV1().ClusterRoles()
	if _, err := roles.Create(ctx, &role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		existing, err := roles.Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		role.ResourceVersion = existing.ResourceVersion
		if _, err := roles.Update(ctx, &role, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	_, err = s.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: serviceAccount}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Controller describes one of the project's controllers as the sandbox runs it.
type Controller struct {
	// Name of the command, the process, the ServiceAccount and the ClusterRole.
	Name      string
	Package   string
	Namespace string
	// RBAC is the generated ClusterRole, relative to the checkout.
	RBAC string
	// Args are extra flags.
	Args []string
}

// AddressController is the core, run as ServiceAccount cozy-address-controller/address-controller.
var AddressController = Controller{
	Name:      "address-controller",
	Package:   "./address-controller/cmd/address-controller",
	Namespace: "cozy-address-controller",
	RBAC:      "address-controller/config/rbac/role.yaml",
}

// MetalLBIAD is the MetalLB driver, run as ServiceAccount cozy-metallb-iad/metallb-iad.
var MetalLBIAD = Controller{
	Name:      "metallb-iad",
	Package:   "./metallb-iad/cmd/metallb-iad",
	Namespace: "cozy-metallb-iad",
	RBAC:      "metallb-iad/config/rbac/role.yaml",
	Args:      []string{"--namespace=cozy-metallb-iad"},
}

// runController builds the controller, grants it its generated RBAC, and runs it as its own
// ServiceAccount with metrics and probes on free loopback ports.
func runController(ctx context.Context, s *Sandbox, c Controller) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	bin, err := buildController(root, s.Dir, c.Package, c.Name)
	if err != nil {
		return err
	}
	if err := bindClusterRole(ctx, s, filepath.Join(root, c.RBAC), c.Namespace, c.Name); err != nil {
		return fmt.Errorf("granting %s its RBAC: %w", c.Name, err)
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
	_, err = s.StartProcess(ctx, controlplane.ProcessSpec{
		Name:  c.Name,
		Path:  bin,
		Args:  args,
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

func installCRDs(ctx context.Context, s *Sandbox) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return s.InstallCRDs(ctx, filepath.Join(root, "address-controller", "config", "crd"))
}
