package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountKubeconfig makes sure the ServiceAccount exists, requests a token for it
// (TokenRequest, valid for a day) and writes a kubeconfig that authenticates as it, so a
// controller can run under its own identity and RBAC. It returns the kubeconfig's path and the
// matching REST config.
func (cp *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, *rest.Config, error) {
	sas := cp.Client.CoreV1().ServiceAccounts(namespace)
	_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{ServiceAccountIssuer},
			ExpirationSeconds: &expiry,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	path := filepath.Join(cp.Dir, "kubeconfigs", namespace+"."+name+".kubeconfig")
	if err := writeKubeconfig(path, cp.server, cp.pki.path("ca.crt"), &clientcmdapi.AuthInfo{Token: tr.Status.Token}); err != nil {
		return "", nil, err
	}
	cfg := &rest.Config{
		Host:            cp.server,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.pki.path("ca.crt")},
		QPS:             cp.Config.QPS,
		Burst:           cp.Config.Burst,
	}
	return path, cfg, nil
}

// Impersonate returns an admin config that impersonates user and groups, for tests that act as
// a tenant.
func (cp *ControlPlane) Impersonate(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}
