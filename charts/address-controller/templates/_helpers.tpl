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
