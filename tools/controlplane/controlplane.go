// Package controlplane runs a real Kubernetes control plane as local processes: etcd,
// kube-apiserver, kube-controller-manager and MetalLB's controller, all built from pinned Go
// modules (see package binaries). Tests, benchmarks, the e2e suite and the sandbox share it.
//
// Every listener is on loopback and on a port picked at start, so several control planes can run
// side by side. Stop shuts the components down in reverse order (controllers, controller-manager,
// apiserver, etcd); children are also tied to the supervising process, so a killed test binary
// leaves nothing behind.
//
// Every component runs under a supervisor that restarts it when it exits, with backoff, as the
// kubelet restarts a crashed container; a component that keeps crashing is given up on and
// reported on Failed. Tests that want a component dead or stalled go through its Process
// (Signal, Restart) or StopProcess, so the supervisor knows.
package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cozystack/reserved-ips/tools/binaries"
)

const (
	// DefaultMetalLBNamespace is where MetalLB runs on Cozystack.
	DefaultMetalLBNamespace = "cozy-metallb"
	// ServiceAccountIssuer is the issuer (and audience) of ServiceAccount tokens.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// ServiceCIDRs are the dual-stack ClusterIP ranges. They are never routed anywhere: nothing
	// here sends traffic to a ClusterIP.
	ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"
	// AdminUser is the identity of the admin kubeconfig (group system:masters).
	AdminUser = "local-admin"
)

// Options configures Start. The zero value starts everything.
type Options struct {
	// Dir is the state directory (data, keys, logs, kubeconfigs, audit log). When empty a
	// temporary directory is created and removed by Stop.
	Dir string
	// WithoutControllerManager skips kube-controller-manager (and therefore MetalLB).
	WithoutControllerManager bool
	// WithoutMetalLB skips MetalLB's CRDs and controller.
	WithoutMetalLB bool
	// MetalLBNamespace defaults to DefaultMetalLBNamespace.
	MetalLBNamespace string
	// MetalLBVersion is the MetalLB whose controller runs (a pinned version, or one with
	// binaries.PatchedSuffix); binaries.MetalLBVersion ($METALLB_VERSION) when empty.
	MetalLBVersion string
	// StartTimeout bounds each component's readiness wait; 90s when zero.
	StartTimeout time.Duration
	// Logf receives progress lines; silent when nil.
	Logf func(format string, args ...any)
	// ExtraAPIServerArgs are appended to kube-apiserver's flags.
	ExtraAPIServerArgs []string
	// Restart is how every process is restarted after it exits (see RestartPolicy).
	Restart RestartPolicy
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	// Dir is the state directory.
	Dir string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is the admin's REST config.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// AuditLog is the path of the apiserver's audit log of write requests.
	AuditLog string
	// MetalLBNamespace is where MetalLB's controller watches its configuration.
	MetalLBNamespace string
	// MetalLBVersion is the version of MetalLB's controller (see Options.MetalLBVersion).
	MetalLBVersion string
	// MetalLBMetrics is where MetalLB's controller serves its metrics (nil without MetalLB).
	MetalLBMetrics *MetricsEndpoint

	opts    Options
	ownsDir bool
	pki     *pki
	server  string

	mu      sync.Mutex
	procs   []*Process
	stopped bool
	failed  chan error
}

// Start brings up the control plane and returns once every component is ready. On error,
// whatever had started is stopped again.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	if opts.MetalLBNamespace == "" {
		opts.MetalLBNamespace = DefaultMetalLBNamespace
	}
	if opts.MetalLBVersion == "" {
		opts.MetalLBVersion = binaries.MetalLBVersion
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	cp = &ControlPlane{Dir: opts.Dir, opts: opts, MetalLBNamespace: opts.MetalLBNamespace, MetalLBVersion: opts.MetalLBVersion, failed: make(chan error, 1)}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "reserved-ips-cp-"); err != nil {
			return nil, err
		}
		cp.ownsDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, err
	}
	if cp.Dir, err = filepath.Abs(cp.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()

	if err := cp.startEtcd(ctx); err != nil {
		return cp, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return cp, err
	}
	if !opts.WithoutControllerManager {
		if err := cp.startControllerManager(ctx); err != nil {
			return cp, err
		}
		if !opts.WithoutMetalLB {
			if err := cp.startMetalLB(ctx); err != nil {
				return cp, err
			}
		}
	}
	cp.logf("control plane ready: kubeconfig %s", cp.Kubeconfig)
	return cp, nil
}

func (cp *ControlPlane) logf(format string, args ...any) {
	if cp.opts.Logf != nil {
		cp.opts.Logf(format, args...)
	}
}

// StartProcess runs spec under the control plane's supervision and waits until it is ready.
// Processes started this way are stopped before the control plane's own components. Once ready,
// the process is restarted whenever it exits (Options.Restart); one that exits before it is ready
// is an error of StartProcess and is not retried.
func (cp *ControlPlane) StartProcess(ctx context.Context, spec ProcessSpec) (*Process, error) {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil, errStopped
	}
	p, err := newProcess(cp.Dir, spec, cp.opts.Restart, cp.logf)
	if err != nil {
		cp.mu.Unlock()
		return nil, err
	}
	p.onFail = cp.processFailed
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	cp.logf("started %s (pid %d), log %s", spec.Name, p.Pid(), p.LogPath)
	if err := p.waitReady(ctx, cp.opts.StartTimeout); err != nil {
		return p, err
	}
	go p.supervise()
	return p, nil
}

// processFailed passes the first give-up to Failed.
func (cp *ControlPlane) processFailed(_ *Process, err error) {
	select {
	case cp.failed <- err:
	default:
	}
}

// Failed receives an error when the supervisor gives up on a process (it kept crashing): the
// control plane is no longer whole. The sandbox stops on it.
func (cp *ControlPlane) Failed() <-chan error { return cp.failed }

// Process returns the supervised process of that name, or nil.
func (cp *ControlPlane) Process(name string) *Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.procs {
		if p.Spec.Name == name {
			return p
		}
	}
	return nil
}

// Status reports every supervised process, probing readiness now.
func (cp *ControlPlane) Status(ctx context.Context) []ProcessStatus {
	var out []ProcessStatus
	for _, p := range cp.Processes() {
		check, cancel := context.WithTimeout(ctx, 2*time.Second)
		out = append(out, p.Status(check, true))
		cancel()
	}
	return out
}

// KeepDir makes Stop leave a temporary state directory in place (a failed test keeps the
// evidence) and returns its path.
func (cp *ControlPlane) KeepDir() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.ownsDir = false
	return cp.Dir
}

// StopProcess stops one supervised process for good (it is not restarted) and forgets it.
// To simulate a crash that the supervisor recovers from, use Process.Signal or Process.Restart.
func (cp *ControlPlane) StopProcess(p *Process, grace time.Duration) error {
	err := p.Stop(grace)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i, q := range cp.procs {
		if q == p {
			cp.procs = append(cp.procs[:i], cp.procs[i+1:]...)
			break
		}
	}
	return err
}

// Processes returns the supervised processes in start order.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*Process(nil), cp.procs...)
}

// Stop stops every process in reverse start order (controllers, controller-manager, apiserver,
// etcd) and removes a temporary state directory. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil
	}
	cp.stopped = true
	procs := cp.procs
	cp.procs = nil
	ownsDir := cp.ownsDir
	cp.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].Stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if ownsDir {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping the control plane: %v", errs)
	}
	return nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	etcd, err := binaries.Etcd.Path("etcd")
	if err != nil {
		return err
	}
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cp.server = client // temporarily: the etcd URL, read by startAPIServer
	_, err = cp.StartProcess(ctx, ProcessSpec{
		Name: "etcd",
		Path: etcd,
		Args: []string{
			"--name=default",
			"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=default=" + peer,
			// A throwaway cluster: durability on power loss does not matter, speed does.
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=4294967296",
		},
		Ready: HTTPCheck(client+"/health", http.DefaultClient),
	})
	return err
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	apiserver, err := binaries.Kubernetes.Path("kube-apiserver")
	if err != nil {
		return err
	}
	etcdURL := cp.server
	if cp.pki, err = newPKI(filepath.Join(cp.Dir, "pki")); err != nil {
		return fmt.Errorf("creating keys: %w", err)
	}
	hosts := []string{"127.0.0.1", "::1", "localhost", "10.96.0.1", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := cp.pki.issue("apiserver", "kube-apiserver", nil, hosts); err != nil {
		return err
	}
	for name, id := range map[string][2]string{
		"admin": {AdminUser, "system:masters"},
		// Its own name (so the audit log tells it apart) but admin rights: with one shared
		// identity for every controller, the bootstrap role system:kube-controller-manager
		// is too narrow (the aggregation controller could not patch ClusterRoles).
		"kube-controller-manager": {"system:kube-controller-manager", "system:masters"},
	} {
		var groups []string
		if id[1] != "" {
			groups = []string{id[1]}
		}
		if err := cp.pki.issue(name, id[0], groups, nil); err != nil {
			return err
		}
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	cp.server = fmt.Sprintf("https://127.0.0.1:%d", port)
	cp.AuditLog = filepath.Join(cp.Dir, "audit.log")
	policy := filepath.Join(cp.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	p := cp.pki.path
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--api-audiences=" + ServiceAccountIssuer,
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDRs,
		// The "kubernetes" Service's endpoints would point at loopback, which is invalid there.
		"--endpoint-reconciler-type=none",
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + cp.AuditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		// Readers (tests, the benchmark) take byte offsets in this one file: the apiserver
		// otherwise rotates it at 100 MB, which a 10,000-object benchmark passes in minutes.
		"--audit-log-maxsize=" + strconv.Itoa(AuditLogMaxSizeMB),
		"--max-requests-inflight=1000",
		"--max-mutating-requests-inflight=500",
		"--profiling=false",
		"--cert-dir=" + filepath.Join(cp.Dir, "apiserver"),
	}
	args = append(args, cp.opts.ExtraAPIServerArgs...)
	if cp.Config, err = cp.certConfig("admin"); err != nil {
		return err
	}
	restClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		return err
	}
	if _, err := cp.StartProcess(ctx, ProcessSpec{
		Name:  "kube-apiserver",
		Path:  apiserver,
		Args:  args,
		Ready: HTTPCheck(cp.server+"/readyz", restClient),
	}); err != nil {
		return err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := cp.writeCertKubeconfig(cp.Kubeconfig, "admin"); err != nil {
		return err
	}
	cp.Client, err = kubernetes.NewForConfig(cp.Config)
	return err
}

// auditPolicy records every write (metadata only) and nothing else, so the log stays small
// and can count each identity's writes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: None
  nonResourceURLs: ["/*"]
- level: Metadata
`

func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	kcm, err := binaries.Kubernetes.Path("kube-controller-manager")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.Dir, "kube-controller-manager.kubeconfig")
	if err := cp.writeCertKubeconfig(kubeconfig, "kube-controller-manager"); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	if _, err := cp.StartProcess(ctx, ProcessSpec{
		Name: "kube-controller-manager",
		Path: kcm,
		Args: []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller," +
				"serviceaccount-token-controller,clusterrole-aggregation-controller,resourcequota-controller",
			// The quota controller recounts every quota this often (5m by default); a quota made
			// before it discovered a new CRD shows that resource's usage only then.
			"--resource-quota-sync-period=30s",
			"--service-account-private-key-file=" + cp.pki.path("sa.key"),
			"--root-ca-file=" + cp.pki.path("ca.crt"),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(cp.Dir, "kube-controller-manager"),
		},
		Ready: HTTPCheck(fmt.Sprintf("https://127.0.0.1:%d/healthz", port), nil),
	}); err != nil {
		return err
	}
	// The ServiceAccount controller creating "default" proves the controllers really run.
	return cp.waitFor(ctx, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func (cp *ControlPlane) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cp.opts.StartTimeout, true, cond)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// EnsureNamespace creates a namespace with the given labels unless it exists.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, name string, labels map[string]string) error {
	_, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (cp *ControlPlane) certConfig(name string) (*rest.Config, error) {
	return &rest.Config{
		Host: cp.server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   cp.pki.path("ca.crt"),
			CertFile: cp.pki.path(name + ".crt"),
			KeyFile:  cp.pki.path(name + ".key"),
		},
		QPS:   200,
		Burst: 400,
	}, nil
}

func (cp *ControlPlane) writeCertKubeconfig(path, name string) error {
	return writeKubeconfig(path, cp.server, cp.pki.path("ca.crt"), &clientcmdapi.AuthInfo{
		ClientCertificate: cp.pki.path(name + ".crt"),
		ClientKey:         cp.pki.path(name + ".key"),
	})
}

func writeKubeconfig(path, server, caFile string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["user"] = auth
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// ServesMutatingAdmissionPolicy says whether the apiserver serves admissionregistration.k8s.io/v1
// MutatingAdmissionPolicy (Kubernetes 1.36 and later), which the driver chart's parking policies
// need; below that the chart parks through the driver's webhook.
func (cp *ControlPlane) ServesMutatingAdmissionPolicy(ctx context.Context) (bool, error) {
	return ServesMutatingAdmissionPolicy(cp.Client.Discovery())
}

// ServesMutatingAdmissionPolicy says whether the cluster behind d serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy.
func ServesMutatingAdmissionPolicy(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		return false, fmt.Errorf("discovering admissionregistration.k8s.io/v1: %w", err)
	}
	for _, r := range list.APIResources {
		if r.Kind == "MutatingAdmissionPolicy" {
			return true, nil
		}
	}
	return false, nil
}
