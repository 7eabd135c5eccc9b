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
