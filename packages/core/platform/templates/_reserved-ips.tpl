{{- /*
reserved-ips.metallbEmitted: "true" when the platform emits cozystack.metallb — on the isp-full
variants, or where a variant enables it explicitly — and it is not disabled.
*/ -}}
{{- define "reserved-ips.metallbEmitted" -}}
{{- $b := .Values.bundles | default dict -}}
{{- $enabled := $b.enabledPackages | default list -}}
{{- $disabled := $b.disabledPackages | default list -}}
{{- $byVariant := hasPrefix "isp-full" (.Values.variant | default "") -}}
{{- if and (or $byVariant (has "cozystack.metallb" $enabled)) (not (has "cozystack.metallb" $disabled)) -}}true{{- end -}}
{{- end -}}

{{- /*
reserved-ips.packages: the Packages of the feature. The core when enabled; the driver when
enabled and MetalLB is emitted too. Emitted Packages are kept when the platform stops emitting
them: the admin deletes them, after the objects (see the operating guide).
*/ -}}
{{- define "reserved-ips.packages" -}}
{{- $b := .Values.bundles | default dict -}}
{{- $enabled := $b.enabledPackages | default list -}}
{{- $disabled := $b.disabledPackages | default list -}}
{{- if and (has "cozystack.address-controller" $enabled) (not (has "cozystack.address-controller" $disabled)) }}
---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: cozystack.address-controller
  annotations:
    helm.sh/resource-policy: keep
spec:
  variant: default
{{- end }}
{{- if and (has "cozystack.metallb-iad" $enabled) (not (has "cozystack.metallb-iad" $disabled)) (eq (include "reserved-ips.metallbEmitted" .) "true") }}
---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: cozystack.metallb-iad
  annotations:
    helm.sh/resource-policy: keep
spec:
  variant: default
{{- end }}
{{- end -}}
