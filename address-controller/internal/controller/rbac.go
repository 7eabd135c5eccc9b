package controller

// The core's permissions, from which `make generate` writes config/rbac/role.yaml (and the chart
// its ClusterRole). Least privilege: the core never creates addresses (drivers do), and only
// reads classes besides patching their finalizer and auto-claim stamp (patch, never update: it
// never sends a whole class back); for auto-claim it reads Services and creates claims, nothing
// more. It reads namespaces' labels, which a class's namespaceSelector matches.
//
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclaims,verbs=get;list;watch;create;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclaims/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses,verbs=get;list;watch;patch;update;delete
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddresses/finalizers,verbs=update
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclasses,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=local.sdn.cozystack.io,resources=ipaddressclasses/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// Leader election needs leases in the controller's own namespace only: the chart grants that
// with a Role.
