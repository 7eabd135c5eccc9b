{{- /*
Stand-in for the platform chart's package helpers, written for this harness. The same
names and arguments as the platform's: (list NAME VARIANT ROOT) and (list NAME ROOT). A package
is emitted when bundles.enabledPackages lists it and bundles.disabledPackages does not; the
Package is kept when the platform stops emitting it.
*/ -}}
{{- define "cozystack.platform.package" -}}
{{- $name := index . 0 -}}
{{- $variant := index . 1 | default "default" -}}
{{- $root := index . 2 -}}
{{- $disabled := $root.Values.bundles.disabledPackages | default list -}}
{{- if not (has $name $disabled) }}
---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: {{ $name }}
  annotations:
    helm.sh/resource-policy: keep
spec:
  variant: {{ $variant }}
{{- end }}
{{ end -}}

{{- define "cozystack.platform.package.default" -}}
{{- include "cozystack.platform.package" (list (index . 0) "default" (index . 1)) }}
{{ end -}}

{{- define "cozystack.platform.package.optional" -}}
{{- $name := index . 0 -}}
{{- $variant := index . 1 | default "default" -}}
{{- $root := index . 2 -}}
{{- $enabled := $root.Values.bundles.enabledPackages | default list -}}
{{- $disabled := $root.Values.bundles.disabledPackages | default list -}}
{{- if and (has $name $enabled) (not (has $name $disabled)) }}
---
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: {{ $name }}
  annotations:
    helm.sh/resource-policy: keep
spec:
  variant: {{ $variant }}
{{- end }}
{{ end -}}

{{- define "cozystack.platform.package.optional.default" -}}
{{- include "cozystack.platform.package.optional" (list (index . 0) "default" (index . 1)) }}
{{ end -}}
