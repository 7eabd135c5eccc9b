package driver

// The driver's permissions, from which `make generate` writes config/rbac/role.yaml: one
// ClusterRole and two namespaced Roles. The namespaces in the namespaced markers are the
// Cozystack defaults; the chart renders those Roles into the release namespace and into
// .Values.metallbNamespace.
//
// Cluster-wide: it reads claims but never writes them; it creates addresses (pre-bound) and
// writes only their driver status and its own finalizer; it watches every Service and patches
// tenant Services (pin, unpin, releasing the IP through services/status) — never creates or
// deletes one outside its namespace; it records events on the objects it reports about.
//
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclasses/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses,verbs=get;list;watch;create;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=services/status,verbs=get;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// Core events, watched (the cache holds MetalLB's AllocationFailed reports only): those on an
// attached Service that has waited unserved for half a minute name a deleted Service MetalLB
// still keeps the address for.
//
// +kubebuilder:rbac:groups="",resources=events,verbs=list;watch
//
// Namespaces' metadata, read only: a pool whose spec.serviceAllocation selects namespaces by label
// serves only the Services of those namespaces, and the driver attaches only a Service MetalLB
// will serve.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
//
// The cluster's Service CIDRs, watched (the cache) and read when a class is judged: a family no
// Service of the cluster can have is one the class cannot serve (status.families). Without
// list and watch, every family is taken as served.
//
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
//
// In its own namespace: placeholder Services, and the short-lived release Services that make
// MetalLB drop an allocation it kept for a deleted placeholder, are created and deleted there
// only; leader election's Lease and its events (core group); MetalLB's AllocationFailed events on
// the placeholders are watched (the cache) and read before a placeholder is nudged or a kept name
// released.
//
// +kubebuilder:rbac:groups="",namespace=cozy-metallb-iad,resources=services,verbs=create;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=cozy-metallb-iad,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=cozy-metallb-iad,resources=events,verbs=create;patch;list;watch
//
// The parking webhook, where the apiserver has no MutatingAdmissionPolicy: its certificate and
// authority in a Secret of its own namespace (created, then read and renewed by name only), and
// the caBundle of its own MutatingWebhookConfiguration (by name).
//
// +kubebuilder:rbac:groups="",namespace=cozy-metallb-iad,resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",namespace=cozy-metallb-iad,resources=secrets,resourceNames=metallb-iad-parking-webhook-tls,verbs=get;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=metallb-iad-parking,verbs=get;patch
//
// In MetalLB's namespace: its pools, read only.
//
// +kubebuilder:rbac:groups=metallb.io,namespace=cozy-metallb,resources=ipaddresspools,verbs=get;list;watch

// Namespaces the namespaced markers above name; the chart substitutes the real ones.
const (
	RBACDriverNamespace  = "cozy-metallb-iad"
	RBACMetalLBNamespace = "cozy-metallb"
)
