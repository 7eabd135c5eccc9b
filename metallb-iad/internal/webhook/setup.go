package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipamv1 "github.com/cozystack/reserved-ips/address-controller/api/v1alpha1"
)

// Options are the parking webhook's settings (the driver's --parking-webhook-* flags).
type Options struct {
	// BindAddress is where it listens (host:port; an empty host listens on every address).
	BindAddress string
	// Namespace holds the Secret; Secret names it.
	Namespace, Secret string
	// Configuration is the MutatingWebhookConfiguration the chart installs for it.
	Configuration string
	// Service is the Service in Namespace through which the apiserver calls it ("" when the
	// configuration calls a URL); Hosts are further names or IP addresses the certificate is for
	// (the URL's host, for a driver outside the cluster).
	Service string
	Hosts   []string
}

// Certs makes the certificate keeper for o (its clients are set by Setup).
func (o Options) Certs() *Certs {
	c := &Certs{Namespace: o.Namespace, Secret: o.Secret, Configuration: o.Configuration}
	if o.Service != "" {
		svc := o.Service + "." + o.Namespace + ".svc"
		c.DNSNames = append(c.DNSNames, o.Service, o.Service+"."+o.Namespace, svc, svc+".cluster.local")
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			c.IPs = append(c.IPs, ip)
		} else if h != "" {
			c.DNSNames = append(c.DNSNames, h)
		}
	}
	return c
}

// Server is the manager's webhook server for o, serving the certificates of certs.
func (o Options) Server(certs *Certs) (ctrlwebhook.Server, error) {
	host, port, err := net.SplitHostPort(o.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("--parking-webhook-bind-address %q: %w", o.BindAddress, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("--parking-webhook-bind-address %q: not a port", o.BindAddress)
	}
	return ctrlwebhook.NewServer(ctrlwebhook.Options{Host: host, Port: p, TLSOpts: []func(*tls.Config){
		func(cfg *tls.Config) {
			cfg.GetCertificate = certs.GetCertificate
			cfg.MinVersion = tls.VersionTLS12
		},
	}}), nil
}

// NamespaceLabels reads the labels of a namespace from cache, and from live when cache does not
// hold it: a namespace created just before its first Service may not have reached the cache, and
// taking it for one without labels would leave a Service unparked that a class restricted to
// labelled namespaces serves (MetalLB could give it a foreign address).
func NamespaceLabels(cache, live client.Reader) func(ctx context.Context, name string) (map[string]string, error) {
	return func(ctx context.Context, name string) (map[string]string, error) {
		for _, r := range []client.Reader{cache, live} {
			ns := &metav1.PartialObjectMetadata{}
			ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
			err := r.Get(ctx, client.ObjectKey{Name: name}, ns)
			if err == nil {
				return ns.Labels, nil
			}
			if !apierrors.IsNotFound(err) {
				return nil, err
			}
		}
		return nil, nil
	}
}

// Setup registers the parking webhook, its certificate keeper, the switch of its auto-claim
// webhook and its readiness check with mgr, whose webhook server is o.Server(certs).
func Setup(mgr manager.Manager, certs *Certs) error {
	certs.Client, certs.Reader = mgr.GetClient(), mgr.GetAPIReader()
	if err := mgr.Add(certs); err != nil {
		return err
	}
	if err := mgr.Add(&AutoClaimSwitch{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Cache: mgr.GetCache(),
		Configuration: certs.Configuration, Recheck: certs.Recheck}); err != nil {
		return err
	}
	c := mgr.GetClient()
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: &Parking{
		Decoder: admission.NewDecoder(mgr.GetScheme()),
		Classes: func(ctx context.Context) ([]ipamv1.IPAddressClass, error) {
			var list ipamv1.IPAddressClassList
			if err := c.List(ctx, &list); err != nil {
				return nil, err
			}
			return list.Items, nil
		},
		NamespaceLabels: NamespaceLabels(c, mgr.GetAPIReader()),
	}})
	started := mgr.GetWebhookServer().StartedChecker()
	return mgr.AddReadyzCheck("parking-webhook", func(req *http.Request) error {
		if err := certs.Ready(); err != nil {
			return err
		}
		return started(req)
	})
}
