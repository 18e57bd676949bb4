{{/* The name of every object: the release name, or <release>-castslice. */}}
{{- define "castslice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "castslice.selectorLabels" -}}
app.kubernetes.io/name: castslice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "castslice.labels" -}}
{{ include "castslice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret the Pods serve TLS from. */}}
{{- define "castslice.tlsSecret" -}}
{{- if eq .Values.tls.source "secret" -}}
{{- required "tls.secretName: the kubernetes.io/tls Secret to serve with (tls.source is secret)" .Values.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "castslice.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The policy the Pods read (CASTSLICE_POLICY_FILE), as the ConfigMap holds it. */}}
{{- define "castslice.policyText" -}}
{{- .Values.policy | default "rules: []\n" -}}
{{- end -}}

{{/* The image: no default, so that no release rolls onto an image that does not exist. */}}
{{- define "castslice.imageRepository" -}}
{{- required "image.repository: the image to run, REGISTRY/castslice (--set image.repository=REGISTRY/castslice --set image.tag=TAG); the chart Cloud Build pushes sets it" .Values.image.repository -}}
{{- end -}}

{{/* The report exporter's objects: <fullname>-report. */}}
{{- define "castslice.reportName" -}}
{{- printf "%s-report" (include "castslice.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Not the webhook's selector labels: the webhook's Service must never reach these Pods. */}}
{{- define "castslice.reportSelectorLabels" -}}
app.kubernetes.io/name: castslice-report
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "castslice.reportLabels" -}}
{{ include "castslice.reportSelectorLabels" . }}
app.kubernetes.io/component: report-exporter
app.kubernetes.io/part-of: castslice
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
