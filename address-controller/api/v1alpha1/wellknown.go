package v1alpha1

// Annotations, finalizers, condition types and reasons shared by the core and its drivers.
const (
	// AnnotationDefaultClass marks the class used by claims that name none.
	AnnotationDefaultClass = "ipaddressclass.local.sdn.cozystack.io/is-default-class"
	// AnnotationAutoClaimClass marks the class auto-claim uses for LoadBalancer Services.
	AnnotationAutoClaimClass = "ipaddressclass.local.sdn.cozystack.io/is-auto-claim-class"
	// AnnotationAutoClaimEnabledAt is written by the core on a class carrying the auto-claim
	// mark: when the mark took effect (RFC 3339). A Service with an address created no later
	// keeps its address; the core removes it with the mark.
	AnnotationAutoClaimEnabledAt = "ipaddressclass.local.sdn.cozystack.io/auto-claim-enabled-at"

	// AnnotationProvisioner is written by the core on a claim that no existing address can
	// satisfy: the named driver must provision addresses for it.
	AnnotationProvisioner = "local.sdn.cozystack.io/provisioner"
	// AnnotationResolvedClass is written by the core in the same patch as AnnotationProvisioner:
	// the class the claim resolved to when the core asked the driver. It keeps the resolution
	// sticky until the status records it (status.className), and it is the class the driver
	// provisions from.
	AnnotationResolvedClass = "local.sdn.cozystack.io/resolved-class"

	// AnnotationServiceClaim on a Service names the claim whose addresses it uses.
	AnnotationServiceClaim = "local.sdn.cozystack.io/ip-address-claim"
	// AnnotationServiceClass on a Service picks the class auto-claim uses for it.
	AnnotationServiceClass = "local.sdn.cozystack.io/ip-address-class"
	// LabelDriverService marks a Service that a driver made for its own bookkeeping (MetalLB's
	// placeholders, for example); the value names the driver (its provisioner name where that is
	// a valid label value), and only the key matters to the core. The core never
	// auto-claims such a Service and does not even cache it, so that a cluster with many
	// reserved addresses does not cost the core memory for each driver Service. Set on a tenant
	// Service it opts out of auto-claim, like AnnotationAutoClaim "false".
	LabelDriverService = "local.sdn.cozystack.io/driver"

	// AnnotationAutoClaim is "true" on claims auto-claim created, and "false" on a Service
	// opts it out.
	AnnotationAutoClaim = "local.sdn.cozystack.io/auto-claim"

	// FinalizerClass holds a class while addresses of it exist.
	FinalizerClass = "local.sdn.cozystack.io/class-protection"
	// FinalizerAddress holds an address while it is bound to a live claim.
	FinalizerAddress = "local.sdn.cozystack.io/address-protection"
	// FinalizerClaim lets the core release a claim's addresses before it goes.
	FinalizerClaim = "local.sdn.cozystack.io/claim-protection"
)

// Condition types.
const (
	// ConditionAccepted on a class: its driver accepts the parameters.
	ConditionAccepted = "Accepted"
	// ConditionBound on a claim: every requested family has an address.
	ConditionBound = "Bound"
	// ConditionReady on a claim: the same verdict as Bound, under the type generic tools wait
	// for (kubectl wait --for=condition=Ready, kstatus).
	ConditionReady = "Ready"
	// ConditionConflict on an address (driver): something else holds the IP.
	ConditionConflict = "Conflict"
	// ConditionLost on an address (driver): the IP can no longer be held.
	ConditionLost = "Lost"
	// ConditionHeld on an address (driver): the driver holds the IP.
	ConditionHeld = "Held"
)

// Reasons of the claim's Bound condition.
const (
	ReasonBound             = "Bound"
	ReasonWaitingForAddress = "WaitingForAddress"
	ReasonClassNotFound     = "ClassNotFound"
	ReasonNoDefaultClass    = "NoDefaultClass"
	ReasonClassNotAccepted  = "ClassNotAccepted"
	ReasonAddressNotFound   = "AddressNotFound"
	ReasonAddressUnusable   = "AddressUnusable"
	ReasonAddressLost       = "AddressLost"
	// ReasonAddressLimitReached: the claim's namespace holds as many addresses of the class as
	// its maxAddressesPerNamespace allows.
	ReasonAddressLimitReached = "AddressLimitReached"
	// ReasonNamespaceNotAllowed: the class's namespaceSelector, or the namespaces its driver's
	// backend serves (status.servedNamespaces), leave the claim's namespace out.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonFamilyNotServed: the claim asks for a family its class's driver does not serve
	// (status.families).
	ReasonFamilyNotServed = "FamilyNotServed"
)
