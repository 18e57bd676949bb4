{{- /* Generated from castslice/settings/table.py by `make generate`; do not edit.

The rules between settings that values.schema.json cannot state, each refused with
the value's name as the application would refuse its variable. */}}
{{- define "castslice.checkSettings" -}}
{{- if gt (int $.Values.slicesPerGpu) (int $.Values.maxSliceRatio) }}
{{- fail (printf "slicesPerGpu: %d is above maxSliceRatio (%d); the application refuses CASTSLICE_SLICES_PER_GPU above CASTSLICE_MAX_SLICE_RATIO" (int $.Values.slicesPerGpu) (int $.Values.maxSliceRatio)) }}
{{- end }}
{{- if and $.Values.sharedResource (gt (len (first (splitList "/" (toString $.Values.sharedResource)))) 253) }}
{{- fail (printf "sharedResource: the domain of %q is longer than 253 characters (CASTSLICE_SHARED_RESOURCE)" $.Values.sharedResource) }}
{{- end }}
{{- $default := get (dict "resource" (print "nvidia.com/gpu-shared") "nvidia" (print "" $.Values.gpuResource ".shared") "gke" (print "nvidia.com/gpu-shared") "dra" (print "nvidia.com/gpu-shared") "mig" (print "nvidia.com/gpu-shared")) (toString $.Values.backend) }}
{{- if eq ($.Values.sharedResource | default $default) $.Values.gpuResource }}
{{- if $.Values.sharedResource }}
{{- fail (printf "sharedResource: %q is also gpuResource; the shared resource must differ from the one it replaces (CASTSLICE_SHARED_RESOURCE)" $.Values.sharedResource) }}
{{- else }}
{{- fail (printf "sharedResource: null is the %s backend's default %q, which is also gpuResource; set sharedResource to another resource (CASTSLICE_SHARED_RESOURCE)" $.Values.backend $default) }}
{{- end }}
{{- end }}
{{- if and $.Values.gpuResource (gt (len (first (splitList "/" (toString $.Values.gpuResource)))) 253) }}
{{- fail (printf "gpuResource: the domain of %q is longer than 253 characters (CASTSLICE_GPU_RESOURCE)" $.Values.gpuResource) }}
{{- end }}
{{- range $type, $count := $.Values.presets }}
{{- if and (not (kindIs "invalid" $count)) (gt (int $count) (int $.Values.maxSliceRatio)) }}
{{- fail (printf "presets.%s: %d is above maxSliceRatio (%d); the application refuses CASTSLICE_PRESETS above CASTSLICE_MAX_SLICE_RATIO" $type (int $count) (int $.Values.maxSliceRatio)) }}
{{- end }}
{{- end }}
{{- $kept := list }}
{{- range $type, $count := $.Values.presets }}
{{- if not (kindIs "invalid" $count) }}{{ $kept = append $kept $type }}{{ end }}
{{- end }}
{{- if not $kept }}
{{- fail "presets: every entry is null; keep at least one (CASTSLICE_PRESETS cannot be empty)" }}
{{- end }}
{{- if gt (int $.Values.defaultSlices) (int $.Values.maxSliceRatio) }}
{{- fail (printf "defaultSlices: %d is above maxSliceRatio (%d); the application refuses CASTSLICE_DEFAULT_SLICES above CASTSLICE_MAX_SLICE_RATIO" (int $.Values.defaultSlices) (int $.Values.maxSliceRatio)) }}
{{- end }}
{{- if and $.Values.schedulerName (eq (toString $.Values.backend) "resource") }}
{{- fail "schedulerName is set, but with backend resource it cannot: only dra keeps the shared GPUs to the Pods CastSlice rewrote (its DeviceTaintRule), and two schedulers placing Pods on the same GPUs can give one out twice (docs/backends.md#a-second-scheduler) (CASTSLICE_SCHEDULER_NAME)" }}
{{- end }}
{{- if and $.Values.schedulerName (eq (toString $.Values.backend) "nvidia") }}
{{- fail "schedulerName is set, but with backend nvidia it cannot: only dra keeps the shared GPUs to the Pods CastSlice rewrote (its DeviceTaintRule), and two schedulers placing Pods on the same GPUs can give one out twice (docs/backends.md#a-second-scheduler) (CASTSLICE_SCHEDULER_NAME)" }}
{{- end }}
{{- if and $.Values.schedulerName (eq (toString $.Values.backend) "gke") }}
{{- fail "schedulerName is set, but with backend gke it cannot: only dra keeps the shared GPUs to the Pods CastSlice rewrote (its DeviceTaintRule), and two schedulers placing Pods on the same GPUs can give one out twice (docs/backends.md#a-second-scheduler) (CASTSLICE_SCHEDULER_NAME)" }}
{{- end }}
{{- if and $.Values.schedulerName (eq (toString $.Values.backend) "mig") }}
{{- fail "schedulerName is set, but with backend mig it cannot: only dra keeps the shared GPUs to the Pods CastSlice rewrote (its DeviceTaintRule), and two schedulers placing Pods on the same GPUs can give one out twice (docs/backends.md#a-second-scheduler) (CASTSLICE_SCHEDULER_NAME)" }}
{{- end }}
{{- $owner := dict }}
{{- range $model, $names := $.Values.mig.productNames }}{{ range $names }}
{{- if hasKey $owner (trim .) }}
{{- fail (printf "mig.productNames: %q is given to %s already (CASTSLICE_MIG_PRODUCT_NAMES)" (trim .) (get $owner (trim .))) }}
{{- end }}
{{- $_ := set $owner (trim .) $model }}
{{- end }}{{ end }}
{{- if and $.Values.extender $.Values.extender.enabled }}
{{- if not (has (toString $.Values.backend) (list "dra" "gke" "nvidia")) }}
{{- fail (printf "extender.enabled: the scheduler extender scores GPUs shared as DRA devices or by sharing node pools; set backend to dra, gke, nvidia (backend is %s)" (toString $.Values.backend)) }}
{{- end }}
{{- end }}
{{- $migProfiles := dict "A100-40GB" (list "1g.5gb" "1g.10gb" "2g.10gb" "3g.20gb" "4g.20gb" "7g.40gb") "A100-80GB" (list "1g.10gb" "1g.20gb" "2g.20gb" "3g.40gb" "4g.40gb" "7g.80gb") "H100-80GB" (list "1g.10gb" "1g.20gb" "2g.20gb" "3g.40gb" "4g.40gb" "7g.80gb") "H100-NVL" (list "1g.12gb" "1g.24gb" "2g.24gb" "3g.47gb" "4g.47gb" "7g.94gb") "H100-96GB" (list "1g.12gb" "1g.24gb" "2g.24gb" "3g.48gb" "4g.48gb" "7g.96gb") "H200" (list "1g.18gb" "1g.35gb" "2g.35gb" "3g.71gb" "4g.71gb" "7g.141gb") "B200" (list "1g.23gb" "1g.45gb" "2g.45gb" "3g.90gb" "4g.90gb" "7g.180gb") "A30" (list "1g.6gb" "2g.12gb" "4g.24gb") }}
{{- $offered := list }}
{{- range $.Values.mig.gpuModels }}{{ $offered = concat $offered (get $migProfiles .) }}{{ end }}
{{- range $.Values.mig.profiles }}{{ if not (has . $offered) }}
{{- fail (printf "mig.profiles: %s is a profile of no model in mig.gpuModels (%s) (CASTSLICE_MIG_PROFILES)" . (join ", " $.Values.mig.gpuModels)) }}
{{- end }}{{ end }}
{{- end -}}

{{- /* The CASTSLICE_* environment, one `VARIABLE: "value"` line each, from the
values named after each variable. Metrics come from metrics.*, so the port the
container declares and the one the application listens on cannot drift apart. */}}
{{- define "castslice.settings" -}}
{{- $lines := list }}
{{- $value := "" }}
{{- $value = "" }}
{{- with $.Values.backend }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_BACKEND: %s" (quote $value)) }}
{{- $value = int $.Values.slicesPerGpu | toString }}
{{- $lines = append $lines (printf "CASTSLICE_SLICES_PER_GPU: %s" (quote $value)) }}
{{- $items := list }}
{{- range $.Values.sharingDegrees }}{{ $items = append $items (int . | toString) }}{{ end }}
{{- $value = join "," $items }}
{{- $lines = append $lines (printf "CASTSLICE_SHARING_DEGREES: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.sharingStrategy }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_SHARING_STRATEGY: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.sharedResource }}{{ $value = toString . }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_SHARED_RESOURCE: %s" (quote $value)) }}
{{- end }}
{{- $value = "" }}
{{- with $.Values.gpuResource }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_GPU_RESOURCE: %s" (quote $value)) }}
{{- $items := list }}
{{- range $type, $count := $.Values.presets }}{{ if not (kindIs "invalid" $count) }}{{ $items = append $items (printf "%s=%d" $type (int $count)) }}{{ end }}{{ end }}
{{- $value = join "," $items }}
{{- $lines = append $lines (printf "CASTSLICE_PRESETS: %s" (quote $value)) }}
{{- $value = int $.Values.defaultSlices | toString }}
{{- $lines = append $lines (printf "CASTSLICE_DEFAULT_SLICES: %s" (quote $value)) }}
{{- $value = int $.Values.maxSliceRatio | toString }}
{{- $lines = append $lines (printf "CASTSLICE_MAX_SLICE_RATIO: %s" (quote $value)) }}
{{- $value = toString $.Values.metrics.enabled }}
{{- $lines = append $lines (printf "CASTSLICE_METRICS: %s" (quote $value)) }}
{{- $value = int $.Values.metrics.port | toString }}
{{- if $.Values.metrics.enabled }}
{{- $lines = append $lines (printf "CASTSLICE_METRICS_PORT: %s" (quote $value)) }}
{{- end }}
{{- $value = "" }}
{{- with $.Values.draDeviceClass }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_DRA_DEVICE_CLASS: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.draCapacity }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_DRA_CAPACITY: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.draGpuMemory }}{{ $value = toString . }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_DRA_GPU_MEMORY: %s" (quote $value)) }}
{{- end }}
{{- $value = "" }}
{{- with $.Values.gpuMemory }}{{ $value = toString . }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_GPU_MEMORY: %s" (quote $value)) }}
{{- end }}
{{- $value = toString $.Values.gpuMemoryEnforcedOnly }}
{{- $lines = append $lines (printf "CASTSLICE_GPU_MEMORY_ENFORCED_ONLY: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.schedulerName }}{{ $value = toString . }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_SCHEDULER_NAME: %s" (quote $value)) }}
{{- end }}
{{- $value = toString $.Values.strictSettings }}
{{- $lines = append $lines (printf "CASTSLICE_STRICT_SETTINGS: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.mig.gpuModels }}{{ $value = join "," . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_GPU_MODELS: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.mig.profiles }}{{ $value = join "," . }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_PROFILES: %s" (quote $value)) }}
{{- end }}
{{- $value = "" }}
{{- with $.Values.mig.stack }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_STACK: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.mig.fit }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_FIT: %s" (quote $value)) }}
{{- $value = "" }}
{{- with $.Values.mig.wholeGpu }}{{ $value = toString . }}{{ end }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_WHOLE_GPU: %s" (quote $value)) }}
{{- $items := list }}
{{- range $model, $names := $.Values.mig.productNames }}{{ range $names }}{{ $items = append $items (printf "%s=%s" $model .) }}{{ end }}{{ end }}
{{- $value = join "," $items }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_PRODUCT_NAMES: %s" (quote $value)) }}
{{- end }}
{{- $value = "" }}
{{- with $.Values.mig.timeSharedClients }}{{ $value = int . | toString }}{{ end }}
{{- if $value }}
{{- $lines = append $lines (printf "CASTSLICE_MIG_TIME_SHARED_CLIENTS: %s" (quote $value)) }}
{{- end }}
{{- join "\n" $lines }}
{{- end -}}

{{- /* The release's settings as `castslice` flags, the defaults left out. */}}
{{- define "castslice.commandFlags" -}}
{{- $flags := list }}
{{- $value := "" }}
{{- $value = "" }}
{{- with $.Values.backend }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "resource") }}{{ $flags = append $flags (printf "--backend %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = int $.Values.slicesPerGpu | toString }}
{{- if and $value (ne $value "4") }}{{ $flags = append $flags (printf "--slices-per-gpu %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $items := list }}
{{- range $.Values.sharingDegrees }}{{ $items = append $items (int . | toString) }}{{ end }}
{{- $value = join "," $items }}
{{- if and $value (ne $value "4") }}{{ $flags = append $flags (printf "--sharing-degrees %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.sharingStrategy }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "time-slicing") }}{{ $flags = append $flags (printf "--sharing-strategy %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.sharedResource }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--shared-resource %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.gpuResource }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "nvidia.com/gpu") }}{{ $flags = append $flags (printf "--gpu-resource %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $items := list }}
{{- range $type, $count := $.Values.presets }}{{ if not (kindIs "invalid" $count) }}{{ $items = append $items (printf "%s=%d" $type (int $count)) }}{{ end }}{{ end }}
{{- $value = join "," $items }}
{{- if and $value (ne $value "batch=2,dev=1,inference=2,training=4") }}{{ $flags = append $flags (printf "--presets %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = int $.Values.defaultSlices | toString }}
{{- if and $value (ne $value "1") }}{{ $flags = append $flags (printf "--default-slices %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = int $.Values.maxSliceRatio | toString }}
{{- if and $value (ne $value "1000") }}{{ $flags = append $flags (printf "--max-slice-ratio %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.draDeviceClass }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "gpu.nvidia.com") }}{{ $flags = append $flags (printf "--dra-device-class %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.draCapacity }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "shares") }}{{ $flags = append $flags (printf "--dra-capacity %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.draGpuMemory }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--dra-gpu-memory %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.gpuMemory }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--gpu-memory %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = toString $.Values.gpuMemoryEnforcedOnly }}
{{- if and $value (ne $value "true") }}{{ $flags = append $flags (printf "--gpu-memory-enforced-only %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.schedulerName }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--scheduler-name %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.gpuModels }}{{ $value = join "," . }}{{ end }}
{{- if and $value (ne $value "A100-80GB") }}{{ $flags = append $flags (printf "--mig-gpu-models %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.profiles }}{{ $value = join "," . }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--mig-profiles %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.stack }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "mixed") }}{{ $flags = append $flags (printf "--mig-stack %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.fit }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "memory") }}{{ $flags = append $flags (printf "--mig-fit %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.wholeGpu }}{{ $value = toString . }}{{ end }}
{{- if and $value (ne $value "gpu") }}{{ $flags = append $flags (printf "--mig-whole-gpu %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $items := list }}
{{- range $model, $names := $.Values.mig.productNames }}{{ range $names }}{{ $items = append $items (printf "%s=%s" $model .) }}{{ end }}{{ end }}
{{- $value = join "," $items }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--mig-product-names %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- $value = "" }}
{{- with $.Values.mig.timeSharedClients }}{{ $value = int . | toString }}{{ end }}
{{- if and $value (ne $value "") }}{{ $flags = append $flags (printf "--mig-time-shared-clients %s" (include "castslice.shellWord" $value)) }}{{ end }}
{{- join " " $flags }}
{{- end -}}

{{- /* A word the shell reads as it is: quoted unless plainly safe. */}}
{{- define "castslice.shellWord" -}}
{{- if regexMatch "^[-A-Za-z0-9._/=,:@]+$" . }}{{ . }}{{- else }}'{{ replace "'" "'\\''" . }}'{{ end }}
{{- end -}}
