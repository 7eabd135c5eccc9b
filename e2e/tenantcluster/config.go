package tenantcluster

import (
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// PinnedCommit is the cloud-provider-kubevirt commit whose load balancer this package
// reproduces: the commit Cozystack builds its kubevirt-cloud-provider image from (its
// packages/apps/kubernetes/images/kubevirt-cloud-provider/Dockerfile). Its
// pkg/provider/loadbalancer.go and pkg/provider/cloud.go are unchanged from there through v0.6.0
// and the provider's main branch as of 2026-03-23; Cozystack's patches on top touch only the
// EndpointSlice controller.
const PinnedCommit = "a0acf3389a24069e16eedb544ed90d2733fbce92"

// The provider's defaults for the creation poll, used when the cloud config leaves a key out or
// sets it to zero or less.
const (
	DefaultCreationPollInterval = 5 * time.Second
	DefaultCreationPollTimeout  = 5 * time.Minute
)

// CloudConfig is the part of cloud-provider-kubevirt's cloud config (the file passed with
// --cloud-config) that its load balancer reads, with the provider's key names.
type CloudConfig struct {
	// Kubeconfig is the path of the infrastructure cluster's kubeconfig; empty means the
	// in-cluster ServiceAccount, as on Cozystack. Read for completeness: the harness passes the
	// host's config itself.
	Kubeconfig   string             `json:"kubeconfig,omitempty"`
	LoadBalancer LoadBalancerConfig `json:"loadBalancer"`
	// Namespace is where the host Services are created: the tenant namespace.
	Namespace string `json:"namespace,omitempty"`
	// InfraLabels are added to every host Service's labels.
	InfraLabels map[string]string `json:"infraLabels,omitempty"`
}

// LoadBalancerConfig holds the load balancer's keys. Durations are whole seconds, as in the
// provider.
type LoadBalancerConfig struct {
	// Enabled turns the load balancer on; true unless the file says otherwise.
	Enabled bool `json:"enabled"`
	// CreationPollInterval is how often EnsureLoadBalancer looks for an ingress on a host Service
	// it has just created.
	CreationPollInterval *int `json:"creationPollInterval,omitempty"`
	// CreationPollTimeout is how long it looks before giving up with an error.
	CreationPollTimeout *int `json:"creationPollTimeout,omitempty"`
	// Selectorless leaves the host Service without a selector (its EndpointSlices are written
	// by the provider's EndpointSlice controller instead).
	Selectorless *bool `json:"selectorless,omitempty"`
	// EnableEPSController turns that controller on; with it, a Service with
	// externalTrafficPolicy: Local is selectorless whatever Selectorless says.
	EnableEPSController *bool `json:"enableEPSController,omitempty"`
}

// ParseCloudConfig reads a cloud config the way the provider does: its defaults first (load
// balancer enabled, a 5 s interval and a 5 min timeout), then whatever the file sets.
func ParseCloudConfig(data []byte) (CloudConfig, error) {
	interval, timeout := int(DefaultCreationPollInterval.Seconds()), int(DefaultCreationPollTimeout.Seconds())
	cfg := CloudConfig{LoadBalancer: LoadBalancerConfig{Enabled: true, CreationPollInterval: &interval, CreationPollTimeout: &timeout}}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return CloudConfig{}, fmt.Errorf("parsing the cloud config: %w", err)
	}
	return cfg, nil
}

// CozystackCloudConfig is the cloud config Cozystack gives a tenant Kubernetes cluster's cloud
// controller manager (packages/apps/kubernetes/templates/cloud-config.yaml), for the release
// name and tenant namespace given.
func CozystackCloudConfig(release, namespace string) string {
	app := strings.TrimPrefix(release, "kubernetes-")
	return fmt.Sprintf(`loadBalancer:
  creationPollInterval: 5
  creationPollTimeout: 60
  enableEPSController: true
  selectorless: true
namespace: %s
infraLabels:
  apps.cozystack.io/application.group: apps.cozystack.io
  apps.cozystack.io/application.kind: Kubernetes
  apps.cozystack.io/application.name: %s
  internal.cozystack.io/tenantresource: "true"
`, namespace, app)
}

// pollSetting is the provider's reading of a poll key: whole seconds, or the default when the
// key is missing or not positive.
func pollSetting(v *int, def time.Duration) time.Duration {
	if v == nil || *v <= 0 {
		return def
	}
	return time.Duration(*v) * time.Second
}
