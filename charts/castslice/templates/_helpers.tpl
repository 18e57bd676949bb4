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

{{/*
The CASTSLICE_* environment, one KEY=value per line, from the values named
after each variable. Metrics come from metrics.*, so the port the container
declares and the one the application listens on cannot drift apart.
*/}}
{{- define "castslice.settings" -}}
CASTSLICE_BACKEND: {{ .Values.backend | quote }}
CASTSLICE_SLICES_PER_GPU: {{ .Values.slicesPerGpu | int | toString | quote }}
{{- $degrees := list }}
{{- range .Values.sharingDegrees }}
{{- $degrees = append $degrees (int . | toString) }}
{{- end }}
CASTSLICE_SHARING_DEGREES: {{ join "," $degrees | quote }}
CASTSLICE_SHARING_STRATEGY: {{ .Values.sharingStrategy | quote }}
{{- with .Values.sharedResource }}
CASTSLICE_SHARED_RESOURCE: {{ . | quote }}
{{- end }}
CASTSLICE_GPU_RESOURCE: {{ .Values.gpuResource | quote }}
{{- $presets := list }}
{{- range $name, $slices := .Values.presets }}
{{- if not (kindIs "invalid" $slices) }}
{{- $presets = append $presets (printf "%s=%d" $name (int $slices)) }}
{{- end }}
{{- end }}
CASTSLICE_PRESETS: {{ join "," $presets | quote }}
CASTSLICE_DEFAULT_SLICES: {{ .Values.defaultSlices | int | toString | quote }}
CASTSLICE_MAX_SLICE_RATIO: {{ .Values.maxSliceRatio | int | toString | quote }}
CASTSLICE_DRA_DEVICE_CLASS: {{ .Values.draDeviceClass | quote }}
CASTSLICE_DRA_CAPACITY: {{ .Values.draCapacity | quote }}
{{- with .Values.draGpuMemory }}
CASTSLICE_DRA_GPU_MEMORY: {{ . | quote }}
{{- end }}
CASTSLICE_MIG_GPU_MODELS: {{ join "," .Values.mig.gpuModels | quote }}
{{- with .Values.mig.profiles }}
CASTSLICE_MIG_PROFILES: {{ join "," . | quote }}
{{- end }}
CASTSLICE_MIG_STACK: {{ .Values.mig.stack | quote }}
CASTSLICE_MIG_FIT: {{ .Values.mig.fit | quote }}
CASTSLICE_MIG_WHOLE_GPU: {{ .Values.mig.wholeGpu | quote }}
CASTSLICE_METRICS: {{ .Values.metrics.enabled | quote }}
{{- if .Values.metrics.enabled }}
CASTSLICE_METRICS_PORT: {{ .Values.metrics.port | int | toString | quote }}
{{- end }}
{{- end -}}

{{/* The policy the Pods read (CASTSLICE_POLICY_FILE), as the ConfigMap holds it. */}}
{{- define "castslice.policyText" -}}
{{- .Values.policy | default "rules: []\n" -}}
{{- end -}}
