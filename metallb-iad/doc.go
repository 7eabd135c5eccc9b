// Package metallbiad is the MetalLB driver for the local.sdn.cozystack.io API: it allocates
// reserved addresses from an admin's MetalLB pool, holds each with a silent placeholder Service,
// and pins it to the tenant Service that names the claim.
package metallbiad

// Provisioner is the driver's name, as IPAddressClass.spec.provisioner spells it.
const Provisioner = "metallb.drivers.local.sdn.cozystack.io"
