{{- define "metallb-iad.labels" -}}
app.kubernetes.io/name: metallb-iad
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "metallb-iad.selector" -}}
app.kubernetes.io/name: metallb-iad
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The metrics port's name says how it is served, as kubebuilder's scaffold does. */ -}}
{{- define "metallb-iad.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}-metrics
{{- end -}}

{{- /* Labels of the monitoring objects: the chart's, then the user's. */ -}}
{{- define "metallb-iad.monitoringLabels" -}}
{{ include "metallb-iad.labels" .root }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* The matchConditions both parking policies share: a LoadBalancer Service that asked for no
address its own way (no load-balancer class, no spec.loadBalancerIP, none of MetalLB's six
annotations, so neither parked nor pinned yet). */ -}}
{{- define "metallb-iad.parkable" }}
    - name: load-balancer
      expression: "has(object.spec.type) && object.spec.type == 'LoadBalancer'"
    - name: no-load-balancer-class
      expression: "!has(object.spec.loadBalancerClass) || object.spec.loadBalancerClass == ''"
    - name: no-load-balancer-ip
      expression: "!has(object.spec.loadBalancerIP) || object.spec.loadBalancerIP == ''"
    - name: no-metallb-annotation
      expression: >-
        !has(object.metadata.annotations) || !['metallb.io/loadBalancerIPs', 'metallb.io/address-pool', 'metallb.io/allow-shared-ip',
        'metallb.universe.tf/loadBalancerIPs', 'metallb.universe.tf/address-pool', 'metallb.universe.tf/allow-shared-ip'].exists(k, k in object.metadata.annotations)
{{- end -}}
