// Package tenantcluster puts a tenant Kubernetes cluster, as Cozystack runs one, in front of a
// host cluster in a test: a bare guest control plane (etcd and kube-apiserver as local processes,
// with Node objects for its nodes), the upstream service controller of k8s.io/cloud-provider
// running in the test process against it, and a load balancer that creates the host Services.
//
// The load balancer is a stand-in for cloud-provider-kubevirt's (pkg/provider/loadbalancer.go),
// which the Go module proxy does not serve. It is written here from that source at PinnedCommit
// and keeps its behaviour, the parts a tenant can notice included:
//
//   - the host Service is named by cloudprovider.DefaultLoadBalancerName: "a" and the guest
//     Service's UID without dashes, cut to 32 characters;
//   - it is created in the tenant namespace, type LoadBalancer, with the guest's annotations as
//     they are at that moment, the provider's labels and the infraLabels, the guest's
//     externalTrafficPolicy, spec.loadBalancerIP, spec.externalIPs and healthCheckNodePort, and
//     one port per guest port that targets the guest's NodePort;
//   - selectorless when the config says so (or when the EndpointSlice controller is on and the
//     policy is Local), else selecting the tenant cluster's worker VMs;
//   - after creating it, EnsureLoadBalancer looks for an ingress every creationPollInterval
//     (first after one interval) until creationPollTimeout, and returns the first ingress it
//     sees; after the timeout it returns an error;
//   - EnsureLoadBalancer on a host Service that exists already only rewrites its ports (an
//     Update whenever they differ from what the host stored, which includes the NodePorts the
//     host allocated) and returns its status as it is then, empty or not, without error;
//   - EnsureLoadBalancerDeleted deletes the host Service.
//
// Nothing here changes what the host does: the tenant ServiceAccount's RBAC is Cozystack's, and
// the host's admission policies treat it as any tenant.
package tenantcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The labels the provider puts on host Services (and the ones its selector would use).
const (
	TenantServiceNameLabelKey      = "cluster.x-k8s.io/tenant-service-name"
	TenantServiceNamespaceLabelKey = "cluster.x-k8s.io/tenant-service-namespace"
	TenantClusterNameLabelKey      = "cluster.x-k8s.io/cluster-name"
	TenantNodeRoleLabelKey         = "cluster.x-k8s.io/role"
)

// ProviderName is the provider's name, as the cloud controller manager's --cloud-provider.
const ProviderName = "kubevirt"

// ErrPollTimeout is what EnsureLoadBalancer returns when no ingress showed up within the
// creation poll: the message of the provider's wait.PollWithContext, which the service
// controller puts into a SyncLoadBalancerFailed event on the guest Service.
var ErrPollTimeout = errors.New("timed out waiting for the condition")

// LoadBalancer implements cloudprovider.LoadBalancer against the host cluster.
type LoadBalancer struct {
	// Namespace is where host Services go (the tenant namespace).
	Namespace string
	// Client talks to the host as the tenant cluster's ServiceAccount.
	Client client.Client
	// Config is the load balancer's part of the cloud config.
	Config LoadBalancerConfig
	// InfraLabels are added to every host Service.
	InfraLabels map[string]string
}

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// GetLoadBalancer reports the host Service's status, if it exists.
func (lb *LoadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	hostSvc, err := lb.get(ctx, lb.GetLoadBalancerName(ctx, clusterName, service))
	if err != nil || hostSvc == nil {
		return nil, false, err
	}
	return &hostSvc.Status.LoadBalancer, true, nil
}

// GetLoadBalancerName is the host Service's name: cloudprovider.DefaultLoadBalancerName.
func (lb *LoadBalancer) GetLoadBalancerName(_ context.Context, _ string, service *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(service)
}

// EnsureLoadBalancer creates the host Service and waits for its first ingress, or, when the
// host Service exists, brings its ports up to date and returns its status as it is.
func (lb *LoadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	name := lb.GetLoadBalancerName(ctx, clusterName, service)
	hostSvc, err := lb.get(ctx, name)
	if err != nil {
		return nil, err
	}
	ports := HostPorts(service)
	if hostSvc != nil {
		// An existing host Service: its ports follow the guest's; nothing else does.
		return &hostSvc.Status.LoadBalancer, lb.updatePorts(ctx, hostSvc, ports)
	}
	hostSvc = lb.HostService(clusterName, service, ports)
	if err := lb.Client.Create(ctx, hostSvc); err != nil {
		return nil, err
	}
	if hostSvc, err = lb.waitForIngress(ctx, name, hostSvc); err != nil {
		return nil, err
	}
	return &hostSvc.Status.LoadBalancer, nil
}

// UpdateLoadBalancer brings the host Service's ports up to date (the service controller calls it
// when the guest's nodes change); a missing host Service is an error.
func (lb *LoadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, _ []*corev1.Node) error {
	var hostSvc corev1.Service
	if err := lb.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: lb.GetLoadBalancerName(ctx, clusterName, service)}, &hostSvc); err != nil {
		return err
	}
	return lb.updatePorts(ctx, &hostSvc, HostPorts(service))
}

// EnsureLoadBalancerDeleted deletes the host Service if there is one.
func (lb *LoadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	hostSvc, err := lb.get(ctx, lb.GetLoadBalancerName(ctx, clusterName, service))
	if err != nil || hostSvc == nil {
		return err
	}
	return lb.Client.Delete(ctx, hostSvc)
}

// HostService is the host Service the provider creates for a guest Service.
func (lb *LoadBalancer) HostService(clusterName string, service *corev1.Service, ports []corev1.ServicePort) *corev1.Service {
	labels := map[string]string{
		TenantServiceNameLabelKey:      service.Name,
		TenantServiceNamespaceLabelKey: service.Namespace,
		TenantClusterNameLabelKey:      clusterName,
	}
	maps.Copy(labels, lb.InfraLabels)
	hostSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cloudprovider.DefaultLoadBalancerName(service),
			Namespace: lb.Namespace,
			// The guest's annotations as they are now: this is the only time they are copied.
			Annotations: maps.Clone(service.Annotations),
			Labels:      labels,
		},
		Spec: corev1.ServiceSpec{
			Ports:                 ports,
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: service.Spec.ExternalTrafficPolicy,
		},
	}
	switch {
	case isTrue(lb.Config.EnableEPSController) && service.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal:
	case isTrue(lb.Config.Selectorless):
	default:
		hostSvc.Spec.Selector = map[string]string{TenantNodeRoleLabelKey: "worker", TenantClusterNameLabelKey: clusterName}
	}
	if len(service.Spec.ExternalIPs) > 0 {
		hostSvc.Spec.ExternalIPs = service.Spec.ExternalIPs
	}
	if service.Spec.LoadBalancerIP != "" {
		hostSvc.Spec.LoadBalancerIP = service.Spec.LoadBalancerIP
	}
	if service.Spec.HealthCheckNodePort > 0 {
		hostSvc.Spec.HealthCheckNodePort = service.Spec.HealthCheckNodePort
	}
	return hostSvc
}

// HostPorts are the host Service's ports for a guest Service: each guest port, targeting the
// guest's NodePort for it.
func HostPorts(service *corev1.Service) []corev1.ServicePort {
	ports := make([]corev1.ServicePort, len(service.Spec.Ports))
	for i, p := range service.Spec.Ports {
		ports[i] = corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: intstr.FromInt32(p.NodePort)}
	}
	return ports
}

// PollInterval and PollTimeout are the creation poll's settings as the provider reads them.
func (lb *LoadBalancer) PollInterval() time.Duration {
	return pollSetting(lb.Config.CreationPollInterval, DefaultCreationPollInterval)
}

func (lb *LoadBalancer) PollTimeout() time.Duration {
	return pollSetting(lb.Config.CreationPollTimeout, DefaultCreationPollTimeout)
}

// waitForIngress is the provider's creation poll: a look every interval, the first one interval
// after the create, until an ingress shows or the timeout passes. A failed read ends it with
// that error; a host Service gone meanwhile is looked for again at the next tick.
func (lb *LoadBalancer) waitForIngress(ctx context.Context, name string, hostSvc *corev1.Service) (*corev1.Service, error) {
	tick := time.NewTicker(lb.PollInterval())
	defer tick.Stop()
	timeout := time.NewTimer(lb.PollTimeout())
	defer timeout.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrPollTimeout, ctx.Err())
		case <-timeout.C:
			return nil, ErrPollTimeout
		case <-tick.C:
		}
		if len(hostSvc.Status.LoadBalancer.Ingress) != 0 {
			return hostSvc, nil
		}
		now, err := lb.get(ctx, name)
		if err != nil {
			return nil, err
		}
		if now != nil && len(now.Status.LoadBalancer.Ingress) > 0 {
			return now, nil
		}
	}
}

// updatePorts rewrites the host Service's ports with a full Update of the object just read when
// they differ from the stored ones (which carry the host's NodePorts, so they nearly always do).
func (lb *LoadBalancer) updatePorts(ctx context.Context, hostSvc *corev1.Service, ports []corev1.ServicePort) error {
	if equality.Semantic.DeepEqual(ports, hostSvc.Spec.Ports) {
		return nil
	}
	hostSvc.Spec.Ports = ports
	return lb.Client.Update(ctx, hostSvc)
}

func (lb *LoadBalancer) get(ctx context.Context, name string) (*corev1.Service, error) {
	var svc corev1.Service
	if err := lb.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return &svc, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// Cloud is the cloudprovider.Interface around the load balancer; the rest of the provider
// (instances, zones) is not part of this harness.
type Cloud struct {
	LB cloudprovider.LoadBalancer
}

var _ cloudprovider.Interface = (*Cloud)(nil)

func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return c.LB, c.LB != nil }
func (c *Cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (c *Cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *Cloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (c *Cloud) ProviderName() string                                              { return ProviderName }
func (c *Cloud) HasClusterID() bool                                                { return true }
