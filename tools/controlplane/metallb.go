package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

func (cp *ControlPlane) startMetalLB(ctx context.Context) error {
	controller, err := binaries.MetalLB.Path("metallb-controller")
	if err != nil {
		return err
	}
	crds, err := binaries.MetalLB.Path("crds")
	if err != nil {
		return err
	}
	if err := cp.InstallCRDs(ctx, crds); err != nil {
		return fmt.Errorf("installing MetalLB's CRDs: %w", err)
	}
	if err := cp.EnsureNamespace(ctx, cp.MetalLBNamespace, nil); err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.Dir, "metallb.kubeconfig")
	if err := cp.writeCertKubeconfig(kubeconfig, "metallb"); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	_, err = cp.StartProcess(ctx, ProcessSpec{
		Name: "metallb-controller",
		Path: controller,
		Args: []string{
			"--webhook-mode=disabled",
			"--port=" + strconv.Itoa(port),
			"--namespace=" + cp.MetalLBNamespace,
			"--log-level=info",
		},
		Env:   []string{"KUBECONFIG=" + kubeconfig, "METALLB_NAMESPACE=" + cp.MetalLBNamespace},
		Ready: HTTPCheck(fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil),
	})
	return err
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
