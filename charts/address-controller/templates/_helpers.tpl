{{- /* The chart's name in labels: nameOverride, else the chart's own. */ -}}
{{- define "address-controller.name" -}}
{{- default "address-controller" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The prefix of every object's name: fullnameOverride, else the release name (so a release
named address-controller keeps the names it always had). */ -}}
{{- define "address-controller.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The ServiceAccount the controller runs as: serviceAccount.name, else the fullname; with
serviceAccount.create false it must exist already (empty name: the namespace's default). */ -}}
{{- define "address-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "address-controller.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The controller's image reference. image is a map in cert-manager's shape (registry,
repository, tag, digest); global.imageRegistry, when set, replaces its registry, so one value
redirects the image to a mirror that keeps the repository path. A plain string is taken as the
whole reference, unchanged (the form of earlier releases). */ -}}
{{- define "address-controller.image" -}}
{{- $img := .Values.image -}}
{{- if kindIs "string" $img -}}
{{- $img -}}
{{- else -}}
{{- $registry := default $img.registry (dig "imageRegistry" "" (.Values.global | default dict)) -}}
{{- $ref := $img.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" (trimSuffix "/" $registry) $ref }}{{ end -}}
{{- if $img.tag }}{{ $ref = printf "%s:%s" $ref $img.tag }}{{ end -}}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end -}}
{{- $ref -}}
{{- end -}}
{{- end -}}

{{- /* The ServiceAccount whose token the chart's ServiceMonitor and VMServiceScrape present
(prometheus-operator's and VictoriaMetrics' authorization field reads it from a Secret). */ -}}
{{- define "address-controller.scraperName" -}}
{{- printf "%s-metrics-scraper" (include "address-controller.fullname" .) -}}
{{- end -}}

{{- define "address-controller.labels" -}}
app.kubernetes.io/name: {{ include "address-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "address-controller.selector" -}}
app.kubernetes.io/name: {{ include "address-controller.name" . }}
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

{{- /* The Secret (kubernetes.io/tls, with ca.crt) the secure metrics endpoint serves: metrics.tls.secretName,
else the one the chart's cert-manager Certificate writes, else none (a self-signed certificate). */ -}}
{{- define "address-controller.metricsTLSSecret" -}}
{{- if .Values.metrics.secure -}}
{{- if .Values.metrics.tls.secretName -}}
{{- .Values.metrics.tls.secretName -}}
{{- else if .Values.metrics.tls.certManager.enabled -}}
{{- printf "%s-metrics-tls" (include "address-controller.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Whether to render a monitoring object of the given apiVersion/Kind: always, unless
metrics.onlyWhereServed asks to render it only where the cluster serves that kind. */ -}}
{{- define "address-controller.monitoringServed" -}}
{{- if or (not .root.Values.metrics.onlyWhereServed) (.root.Capabilities.APIVersions.Has .api) -}}true{{- end -}}
{{- end -}}
