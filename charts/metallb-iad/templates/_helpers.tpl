{{- /* The chart's name in labels: nameOverride, else the chart's own. */ -}}
{{- define "metallb-iad.name" -}}
{{- default "metallb-iad" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The prefix of every object's name: fullnameOverride, else the release name (so a release
named metallb-iad keeps the names it always had). */ -}}
{{- define "metallb-iad.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The ServiceAccount the controller runs as: serviceAccount.name, else the fullname; with
serviceAccount.create false it must exist already (empty name: the namespace's default). */ -}}
{{- define "metallb-iad.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "metallb-iad.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The controller's image reference. image is a map in cert-manager's shape (registry,
repository, tag, digest); global.imageRegistry, when set, replaces its registry, so one value
redirects the image to a mirror that keeps the repository path. A plain string is taken as the
whole reference, unchanged (the form of earlier releases). */ -}}
{{- define "metallb-iad.image" -}}
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
{{- define "metallb-iad.scraperName" -}}
{{- printf "%s-metrics-scraper" (include "metallb-iad.fullname" .) -}}
{{- end -}}

{{- define "metallb-iad.labels" -}}
app.kubernetes.io/name: {{ include "metallb-iad.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "metallb-iad.selector" -}}
app.kubernetes.io/name: {{ include "metallb-iad.name" . }}
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

{{- /* A CEL expression: the LabelSelector the CEL expression (the argument) names matches the labels
of the namespace of the request (namespaceObject), as Kubernetes matches a selector. An operator it
does not know, or values an operator does not take, match nothing (Kubernetes refuses such a
selector, and the core takes a selector it cannot parse for one that matches nothing). */ -}}
{{- define "metallb-iad.selectorMatchesNamespace" -}}
((!has({{ . }}.matchLabels) || {{ . }}.matchLabels.all(k, has(namespaceObject.metadata.labels) && k in namespaceObject.metadata.labels && namespaceObject.metadata.labels[k] == {{ . }}.matchLabels[k])) &&
(!has({{ . }}.matchExpressions) || {{ . }}.matchExpressions.all(e,
e.operator == 'In' ? has(e.values) && size(e.values) > 0 && has(namespaceObject.metadata.labels) && e.key in namespaceObject.metadata.labels && namespaceObject.metadata.labels[e.key] in e.values :
e.operator == 'NotIn' ? has(e.values) && size(e.values) > 0 && (!has(namespaceObject.metadata.labels) || !(e.key in namespaceObject.metadata.labels) || !(namespaceObject.metadata.labels[e.key] in e.values)) :
e.operator == 'Exists' ? (!has(e.values) || size(e.values) == 0) && has(namespaceObject.metadata.labels) && e.key in namespaceObject.metadata.labels :
e.operator == 'DoesNotExist' ? (!has(e.values) || size(e.values) == 0) && (!has(namespaceObject.metadata.labels) || !(e.key in namespaceObject.metadata.labels)) :
false)))
{{- end -}}

{{- /* The Secret (kubernetes.io/tls, with ca.crt) the secure metrics endpoint serves: metrics.tls.secretName,
else the one the chart's cert-manager Certificate writes, else none (a self-signed certificate). */ -}}
{{- define "metallb-iad.metricsTLSSecret" -}}
{{- if .Values.metrics.secure -}}
{{- if .Values.metrics.tls.secretName -}}
{{- .Values.metrics.tls.secretName -}}
{{- else if .Values.metrics.tls.certManager.enabled -}}
{{- printf "%s-metrics-tls" (include "metallb-iad.fullname" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Whether to render a monitoring object of the given apiVersion/Kind: always, unless
metrics.onlyWhereServed asks to render it only where the cluster serves that kind. */ -}}
{{- define "metallb-iad.monitoringServed" -}}
{{- if or (not .root.Values.metrics.onlyWhereServed) (.root.Capabilities.APIVersions.Has .api) -}}true{{- end -}}
{{- end -}}

{{- /* How Services are parked at admission: "policy" (the MutatingAdmissionPolicies of
parking-policy.yaml) or "webhook" (the driver's parking webhook, parking-webhook.yaml), or
nothing when parking or the admission policies are off. admissionPolicy.parkingAdmission "auto"
takes the policies where the cluster serves admissionregistration.k8s.io/v1
MutatingAdmissionPolicy (Kubernetes 1.36 and later), else the webhook. */ -}}
{{- define "metallb-iad.parkingAdmission" -}}
{{- if and .Values.admissionPolicy.enabled .Values.admissionPolicy.parking -}}
{{- $mode := .Values.admissionPolicy.parkingAdmission | default "auto" -}}
{{- if eq $mode "auto" -}}
{{- ternary "policy" "webhook" (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Names of the parking webhook's objects: fixed, as the driver's RBAC names them. */ -}}
{{- define "metallb-iad.parkingWebhookService" -}}metallb-iad-parking-webhook{{- end -}}
{{- define "metallb-iad.parkingWebhookSecret" -}}metallb-iad-parking-webhook-tls{{- end -}}

{{- /* What both parking webhooks share (parking-webhook.yaml): called with (dict "pw"
admissionPolicy.parkingWebhook "root" the chart's context). */ -}}
{{- define "metallb-iad.parkingWebhookCommon" }}
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {{ .pw.failurePolicy }}
    timeoutSeconds: {{ .pw.timeoutSeconds }}
    matchPolicy: Equivalent
    reinvocationPolicy: Never
    clientConfig:
      {{- if .pw.url }}
      url: {{ .pw.url | quote }}
      {{- else }}
      service:
        name: {{ include "metallb-iad.parkingWebhookService" .root }}
        namespace: {{ .root.Release.Namespace }}
        path: /park
        port: 443
      {{- end }}
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["services"]
        scope: Namespaced
    namespaceSelector:
      matchExpressions:
        - key: {{ .root.Values.admissionPolicy.namespaceLabel | quote }}
          operator: Exists
{{- end }}

{{- /* The conditions under which auto-claim could serve a Service, as the park-auto-claimed policy
has them (parking-policy.yaml), for the park-auto-claimed webhook. */ -}}
{{- define "metallb-iad.autoClaimable" }}
      - name: not-being-deleted
        expression: "!has(object.metadata.deletionTimestamp)"
      - name: not-a-drivers-own
        expression: >-
          !has(object.metadata.labels) || !('local.sdn.cozystack.io/driver' in object.metadata.labels)
      - name: not-opted-out
        # Compared case-insensitively by the driver (Go's EqualFold).
        expression: >-
          !has(object.metadata.annotations) || !('local.sdn.cozystack.io/auto-claim' in object.metadata.annotations) ||
          object.metadata.annotations['local.sdn.cozystack.io/auto-claim'].lowerAscii().replace('ſ', 's') != 'false'
      - name: shows-no-address
        # The stored object too: a client may send an update without status.
        expression: >-
          request.operation == 'CREATE' ||
          ((!has(object.status) || !has(object.status.loadBalancer) || !has(object.status.loadBalancer.ingress) || size(object.status.loadBalancer.ingress) == 0) &&
          (oldObject == null || !has(oldObject.status) || !has(oldObject.status.loadBalancer) || !has(oldObject.status.loadBalancer.ingress) || size(oldObject.status.loadBalancer.ingress) == 0))
{{- end }}
