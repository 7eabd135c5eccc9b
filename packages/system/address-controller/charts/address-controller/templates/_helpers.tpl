{{- define "address-controller.labels" -}}
app.kubernetes.io/name: address-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "address-controller.selector" -}}
app.kubernetes.io/name: address-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The metrics port's name says how it is served, as kubebuilder's scaffold does. */ -}}
{{- define "address-controller.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end }}-metrics
{{- end -}}

{{- /* Labels of the monitoring objects: the chart's, then the user's. */ -}}
{{- define "address-controller.monitoringLabels" -}}
{{ include "address-controller.labels" .root }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
