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
