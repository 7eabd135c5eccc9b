package tenantcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/component-base/featuregate"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/reserved-ips/tools/controlplane"
)

// Options configures Start.
type Options struct {
	// Host is an admin config of the host cluster: it sets up the tenant ServiceAccount and its
	// RBAC, and nothing else.
	Host *rest.Config
	// Namespace is the tenant namespace on the host (it must exist).
	Namespace string
	// Release is the tenant cluster's Helm release name on Cozystack, "kubernetes-<name>": it
	// names the ServiceAccount and roles, and is the cluster name the service controller passes.
	Release string
	// CloudConfig is the provider's cloud config; CozystackCloudConfig(Release, Namespace) when
	// empty. Its namespace is where host Services go.
	CloudConfig string
	// Nodes is how many guest Nodes to create (2 when zero).
	Nodes int
	// Workers is the service controller's --concurrent-service-syncs; 1 when zero, the default
	// of every cloud controller manager and what Cozystack's runs with.
	Workers int
	// NewLoadBalancer builds the load balancer from the host config of the tenant ServiceAccount;
	// the stand-in when nil. It lets another implementation (the provider's own, built from its
	// source) run in the same harness.
	NewLoadBalancer func(host *rest.Config, cfg CloudConfig) (cloudprovider.LoadBalancer, error)
	// Dir is the guest control plane's state directory (a temporary one when empty).
	Dir string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// Guest is a running tenant cluster.
type Guest struct {
	// ControlPlane is the guest's etcd and kube-apiserver.
	ControlPlane *controlplane.ControlPlane
	// Config and Client are the guest's admin.
	Config *rest.Config
	Client kubernetes.Interface
	// HostTenant is the host config of the tenant cluster's ServiceAccount, as the provider
	// uses it; HostTenantUser is that ServiceAccount's user name.
	HostTenant     *rest.Config
	HostTenantUser string
	// CloudConfig is the parsed cloud config.
	CloudConfig CloudConfig
	// LoadBalancer is what the service controller calls.
	LoadBalancer cloudprovider.LoadBalancer
	// Release is the cluster name the service controller passes to the load balancer.
	Release string

	opts    Options
	newLB   func(host *rest.Config, cfg CloudConfig) (cloudprovider.LoadBalancer, error)
	cancel  context.CancelFunc
	done    chan struct{}
	factory informers.SharedInformerFactory
	once    sync.Once
	stopErr error
}

// Start sets up the tenant cluster's ServiceAccount on the host with the RBAC Cozystack gives
// it, starts the guest control plane and its Nodes, and runs the service controller. Stop undoes
// it all except the host objects, which live in the tenant namespace (the two cluster-scoped
// ones are deleted by Stop).
func Start(ctx context.Context, opts Options) (g *Guest, err error) {
	if opts.Host == nil || opts.Namespace == "" || opts.Release == "" {
		return nil, errors.New("tenantcluster: Host, Namespace and Release are required")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Workers == 0 {
		opts.Workers = 1
	}
	if opts.CloudConfig == "" {
		opts.CloudConfig = CozystackCloudConfig(opts.Release, opts.Namespace)
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	cfg, err := ParseCloudConfig([]byte(opts.CloudConfig))
	if err != nil {
		return nil, err
	}
	if cfg.Namespace == "" {
		cfg.Namespace = opts.Namespace
	}
	g = &Guest{opts: opts, CloudConfig: cfg, Release: opts.Release, done: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = g.Stop()
		}
	}()

	host, err := kubernetes.NewForConfig(opts.Host)
	if err != nil {
		return g, err
	}
	if g.HostTenant, g.HostTenantUser, err = tenantServiceAccount(ctx, host, opts.Host, opts.Namespace, opts.Release); err != nil {
		return g, err
	}
	g.newLB = opts.NewLoadBalancer
	if g.newLB == nil {
		g.newLB = NewStandIn
	}
	if g.LoadBalancer, err = g.newLB(g.HostTenant, cfg); err != nil {
		return g, err
	}

	g.ControlPlane, err = controlplane.Start(ctx, controlplane.Options{Dir: opts.Dir, WithoutControllerManager: true, Logf: opts.Logf})
	if err != nil {
		return g, fmt.Errorf("starting the guest control plane: %w", err)
	}
	g.Config, g.Client = g.ControlPlane.Config, g.ControlPlane.Client
	for i := range opts.Nodes {
		if err := createNode(ctx, g.Client, fmt.Sprintf("%s-md0-%d", opts.Release, i)); err != nil {
			return g, err
		}
	}

	// A cloud controller manager's informers resync every 12 hours or more; the service
	// controller's own 30 s resync delivers unchanged Services, which it ignores.
	g.factory = informers.NewSharedInformerFactory(g.Client, 12*time.Hour)
	ctrl, err := servicecontroller.New(&Cloud{LB: g.LoadBalancer}, g.Client, g.factory.Core().V1().Services(),
		g.factory.Core().V1().Nodes(), opts.Release, featuregate.NewFeatureGate())
	if err != nil {
		return g, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	g.factory.Start(runCtx.Done())
	go func() {
		defer close(g.done)
		ctrl.Run(runCtx, opts.Workers, controllersmetrics.NewControllerManagerMetrics("tenantcluster"))
	}()
	opts.Logf("tenant cluster %s: guest apiserver %s, host Services in %s as %s, %d worker(s), poll every %s for %s",
		opts.Release, g.Config.Host, cfg.Namespace, g.HostTenantUser, opts.Workers,
		pollSetting(cfg.LoadBalancer.CreationPollInterval, DefaultCreationPollInterval),
		pollSetting(cfg.LoadBalancer.CreationPollTimeout, DefaultCreationPollTimeout))
	return g, nil
}

// NewLoadBalancer is another load balancer of the guest's kind and cloud config, on another host
// config (a load that stands for many tenant clusters needs a client of its own).
func (g *Guest) NewLoadBalancer(host *rest.Config) (cloudprovider.LoadBalancer, error) {
	return g.newLB(host, g.CloudConfig)
}

// NewStandIn is the stand-in load balancer for a host config and a cloud config.
func NewStandIn(host *rest.Config, cfg CloudConfig) (cloudprovider.LoadBalancer, error) {
	c, err := HostClient(host)
	if err != nil {
		return nil, err
	}
	return &LoadBalancer{Namespace: cfg.Namespace, Client: c, Config: cfg.LoadBalancer, InfraLabels: cfg.InfraLabels}, nil
}

// HostClient is a direct (uncached) controller-runtime client, as the provider makes one.
func HostClient(host *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(host, client.Options{Scheme: scheme})
}

// Stop stops the service controller (an EnsureLoadBalancer in flight returns), the guest control
// plane, and deletes the cluster-scoped RBAC objects Start made on the host.
func (g *Guest) Stop() error {
	g.once.Do(func() {
		var errs []error
		if g.cancel != nil {
			g.cancel()
			select {
			case <-g.done:
			case <-time.After(30 * time.Second):
				errs = append(errs, errors.New("the service controller did not stop within 30s"))
			}
		}
		if g.factory != nil {
			g.factory.Shutdown()
		}
		if g.ControlPlane != nil {
			if err := g.ControlPlane.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
		if host, err := kubernetes.NewForConfig(g.opts.Host); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			errs = append(errs, deleteClusterRBAC(ctx, host, g.opts.Namespace, g.opts.Release))
			cancel()
		}
		g.stopErr = errors.Join(errs...)
	})
	return g.stopErr
}

// kccmName is the ServiceAccount, Role and RoleBinding name of Cozystack's chart
// (packages/apps/kubernetes/templates/kccm/), and clusterRBACName its ClusterRole's and
// ClusterRoleBinding's (and the kube-system RoleBinding's).
func kccmName(release string) string            { return release + "-kccm" }
func clusterRBACName(ns, release string) string { return ns + "-" + release + "-kccm" }

// KCCMRBAC are the host objects Cozystack's kubernetes application makes for the tenant
// cluster's cloud controller manager, in the same shape and with the same rules
// (packages/apps/kubernetes/templates/kccm/kccm_*.yaml, service_account.yaml).
func KCCMRBAC(ns, release string) []client.Object {
	sa := kccmName(release)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	all := []string{"*"}
	read := []string{"get", "watch", "list"}
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: read},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: append(read, "update")},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: all},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects: subject},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: clusterRBACName(ns, release)}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRBACName(ns, release)},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRBACName(ns, release)},
			Subjects: subject},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRBACName(ns, release), Namespace: metav1.NamespaceSystem},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects: subject},
	}
}

// tenantServiceAccount creates the RBAC objects, requests a token for the ServiceAccount and
// returns a host config that authenticates with it alone, once it can list Services.
func tenantServiceAccount(ctx context.Context, host kubernetes.Interface, admin *rest.Config, ns, release string) (*rest.Config, string, error) {
	c, err := HostClient(admin)
	if err != nil {
		return nil, "", err
	}
	for _, obj := range KCCMRBAC(ns, release) {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, "", fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	sa := kccmName(release)
	tr, err := host.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(6 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("requesting a token for %s/%s: %w", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	// The provider's client keeps client-go's defaults (5 QPS, burst 10).
	cfg.QPS, cfg.Burst = 0, 0
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Services(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("the ServiceAccount %s/%s cannot list Services in its namespace: %w", ns, sa, err)
	}
	return cfg, "system:serviceaccount:" + ns + ":" + sa, nil
}

func deleteClusterRBAC(ctx context.Context, host kubernetes.Interface, ns, release string) error {
	name := clusterRBACName(ns, release)
	var errs []error
	for _, err := range []error{
		host.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}),
		host.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{}),
		host.RbacV1().RoleBindings(metav1.NamespaceSystem).Delete(ctx, name, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// createNode makes a Ready worker Node, as a guest VM's kubelet would register it.
func createNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{corev1.LabelHostname: name, "node-role.kubernetes.io/worker": ""}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %w", name, err)
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking Node %s Ready: %w", name, err)
	}
	return nil
}
