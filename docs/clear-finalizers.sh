#!/usr/bin/env bash
# Removes the feature's leftovers by hand when address-controller and metallb-iad are gone (for
# example after their Packages were deleted before the objects): finalizers that no controller
# will remove any more, the driver's placeholder Services, and the pins it wrote on Services.
#
#   KUBECTL=kubectl ./docs/clear-finalizers.sh            # then delete the objects as usual
#
# Kinds are spelled out in full: "ipaddresses" alone means networking.k8s.io's IPAddress.
set -euo pipefail
KUBECTL=${KUBECTL:-kubectl}
DRIVER_NAMESPACE=${DRIVER_NAMESPACE:-cozy-metallb-iad}
PARKING_WEBHOOK=${PARKING_WEBHOOK:-metallb-iad-parking}
unfinalize='{"metadata":{"finalizers":null}}'

"$KUBECTL" get ipaddressclaims.local.sdn.cozystack.io -A \
  -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
while read -r ns name; do
  [ -n "$name" ] && "$KUBECTL" -n "$ns" patch ipaddressclaims.local.sdn.cozystack.io "$name" --type=merge -p "$unfinalize"
done

for kind in ipaddresses.local.sdn.cozystack.io ipaddressclasses.local.sdn.cozystack.io; do
  for obj in $("$KUBECTL" get "$kind" -o name); do
    "$KUBECTL" patch "$obj" --type=merge -p "$unfinalize"
  done
done

# The driver's placeholders hold addresses in MetalLB; deleting them returns the addresses.
"$KUBECTL" -n "$DRIVER_NAMESPACE" delete service -l metallb.drivers.local.sdn.cozystack.io/role --ignore-not-found

# Below Kubernetes 1.36 the driver parks Services through a webhook whose registration refuses,
# while no driver answers, every write to a Service that names a claim (the unpinning below
# included). With the driver gone the registration has nothing left to protect: it goes too.
# Installing the driver's chart again brings it back.
if "$KUBECTL" get mutatingwebhookconfiguration "$PARKING_WEBHOOK" >/dev/null 2>&1; then
  "$KUBECTL" delete mutatingwebhookconfiguration "$PARKING_WEBHOOK" --ignore-not-found
fi

# Services the driver pinned keep the pin until it is removed.
"$KUBECTL" get services -A \
  -o jsonpath='{range .items[?(@.metadata.annotations.metallb\.drivers\.local\.sdn\.cozystack\.io/pinned=="true")]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
while read -r ns name; do
  [ -n "$name" ] && "$KUBECTL" -n "$ns" annotate service "$name" \
    metallb.io/loadBalancerIPs- metallb.drivers.local.sdn.cozystack.io/pinned-
done
