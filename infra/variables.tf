variable "project_id" {
  description = "Google Cloud project that hosts the Artifact Registry repository and the Cloud Run service."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the Cloud Run service and the Artifact Registry repository, e.g. europe-west1. Close to the cluster's control plane keeps the webhook fast."
  type        = string
  default     = "europe-west1"

  validation {
    condition     = can(regex("^[a-z]+(-[a-z]+)+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west1 or us-central1."
  }
}

variable "service_name" {
  description = "Name of the Cloud Run service; also the prefix of the runtime service account."
  type        = string
  default     = "castslice"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$", var.service_name))
    error_message = "service_name must be 1-20 lowercase letters, digits or hyphens, starting with a letter and not ending with a hyphen (the service account ID adds a suffix)."
  }
}

variable "repository_id" {
  description = "ID of the Artifact Registry Docker repository that holds the CastSlice image."
  type        = string
  default     = "castslice"

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", var.repository_id))
    error_message = "repository_id must be 1-63 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "image" {
  description = "Image in the Artifact Registry repository, as NAME:TAG or NAME@sha256:DIGEST (e.g. castslice:3f2a9c1, as pushed by cloudbuild.yaml). Push it before the first apply; a plan warns while it is not in the repository. Later releases are deployed by cloudbuild.yaml, and Terraform leaves the running image alone."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]+([._-][a-z0-9]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$", var.image))
    error_message = "image must be NAME:TAG or NAME@sha256:DIGEST, without registry host or repository (the repository is the one this module creates)."
  }
}

variable "min_instances" {
  description = "Instances kept warm. At least 1: the API server waits only 5 s (timeoutSeconds) and a cold start would spend it, leaving Pods unmutated."
  type        = number
  default     = 1

  validation {
    condition     = var.min_instances >= 1 && var.min_instances <= 10 && floor(var.min_instances) == var.min_instances
    error_message = "min_instances must be a whole number from 1 to 10."
  }
}

variable "max_instances" {
  description = "Upper bound on instances, which caps cost and the load a burst of Pod creations can cause."
  type        = number
  default     = 5

  validation {
    condition     = var.max_instances >= 1 && var.max_instances <= 100 && floor(var.max_instances) == var.max_instances
    error_message = "max_instances must be a whole number from 1 to 100."
  }

  validation {
    condition     = var.max_instances >= var.min_instances
    error_message = "max_instances must be at least min_instances."
  }
}

variable "concurrency" {
  description = "Requests one instance serves at once (Cloud Run max_instance_request_concurrency)."
  type        = number
  default     = 40

  validation {
    condition     = var.concurrency >= 1 && var.concurrency <= 1000 && floor(var.concurrency) == var.concurrency
    error_message = "concurrency must be a whole number from 1 to 1000."
  }
}

variable "request_timeout_seconds" {
  description = "Cloud Run request timeout. The API server gives up after the webhook's timeoutSeconds (5 s) anyway; this only bounds stuck requests."
  type        = number
  default     = 10

  validation {
    condition     = var.request_timeout_seconds >= 5 && var.request_timeout_seconds <= 60 && floor(var.request_timeout_seconds) == var.request_timeout_seconds
    error_message = "request_timeout_seconds must be a whole number from 5 to 60."
  }
}

variable "cpu" {
  description = "CPU limit of one instance, as Cloud Run accepts it (e.g. \"1\", \"2\")."
  type        = string
  default     = "1"

  validation {
    condition     = contains(["1", "2", "4", "6", "8"], var.cpu)
    error_message = "cpu must be one of 1, 2, 4, 6 or 8."
  }
}

variable "memory" {
  description = "Memory limit of one instance (e.g. \"512Mi\", \"1Gi\"), within what Cloud Run allows for the cpu value: 128Mi-4Gi with 1 vCPU, 128Mi-8Gi with 2, 2Gi-16Gi with 4, 4Gi-24Gi with 6, 4Gi-32Gi with 8. The second generation execution environment needs at least 512Mi."
  type        = string
  default     = "512Mi"

  validation {
    condition     = can(regex("^[1-9][0-9]*(Mi|Gi)$", var.memory))
    error_message = "memory must be a quantity in Mi or Gi, such as 512Mi or 1Gi."
  }

  # Cloud Run's own table, so that a pair it refuses fails at plan rather than at apply.
  # A malformed memory or cpu is reported by its own validation only.
  validation {
    condition = !can(regex("^[1-9][0-9]*(Mi|Gi)$", var.memory)) || !contains(["1", "2", "4", "6", "8"], var.cpu) || (
      tonumber(regex("^[0-9]+", var.memory)) * (endswith(var.memory, "Gi") ? 1024 : 1) >= { "1" = 128, "2" = 128, "4" = 2048, "6" = 4096, "8" = 4096 }[var.cpu] &&
      tonumber(regex("^[0-9]+", var.memory)) * (endswith(var.memory, "Gi") ? 1024 : 1) <= { "1" = 4096, "2" = 8192, "4" = 16384, "6" = 24576, "8" = 32768 }[var.cpu]
    )
    error_message = "memory ${var.memory} does not go with cpu ${var.cpu}: Cloud Run allows 128Mi to 4Gi with 1 vCPU, 128Mi to 8Gi with 2, 2Gi to 16Gi with 4, 4Gi to 24Gi with 6 and 4Gi to 32Gi with 8."
  }
}

variable "cpu_idle" {
  description = "true (the default): request-based billing, CPU only while a request is served and an idle instance billed at the idle rate; CastSlice writes every log line before it answers, so it needs nothing more. false: instance-based billing, CPU always allocated. For the default single 1 vCPU / 512Mi instance, about $10 against $50 a month at Cloud Run's 2026 Tier 1 list prices ($5 against $45 after the monthly free tier)."
  type        = bool
  default     = true
}

variable "path_token_length" {
  description = "Length of the random path token appended to the webhook URL. Changing it replaces the token (new revision, new webhook URL)."
  type        = number
  default     = 32

  validation {
    condition     = var.path_token_length >= 16 && var.path_token_length <= 128 && floor(var.path_token_length) == var.path_token_length
    error_message = "path_token_length must be a whole number from 16 (CastSlice's minimum) to 128."
  }
}

variable "castslice_env" {
  description = "Further CastSlice settings for the service, e.g. { CASTSLICE_SHARED_RESOURCE = \"nvidia.com/gpu.shared\" }. The path token, the backend and sharing settings and the policy have variables of their own."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.castslice_env) : can(regex("^CASTSLICE_[A-Z0-9_]+$", name))])
    error_message = "castslice_env keys must be CASTSLICE_* variables."
  }

  validation {
    condition = length(setintersection(keys(var.castslice_env), [
      "CASTSLICE_PATH_TOKEN", "CASTSLICE_BACKEND", "CASTSLICE_SLICES_PER_GPU", "CASTSLICE_SHARING_DEGREES",
      "CASTSLICE_SHARING_STRATEGY", "CASTSLICE_POLICY", "CASTSLICE_POLICY_FILE",
    ])) == 0
    error_message = "castslice_env must not set CASTSLICE_PATH_TOKEN (managed by this module), CASTSLICE_BACKEND, CASTSLICE_SLICES_PER_GPU, CASTSLICE_SHARING_DEGREES, CASTSLICE_SHARING_STRATEGY or CASTSLICE_POLICY (use the variables backend, slices_per_gpu, sharing_degrees, sharing_strategy and policy), nor CASTSLICE_POLICY_FILE (the service has no file to read: use policy)."
  }
}

variable "backend" {
  description = "How opted-in Pods are made to share GPUs (CASTSLICE_BACKEND): \"resource\" rewrites nvidia.com/gpu into the shared resource; \"nvidia\" targets nodes shared by the NVIDIA device plugin or GPU Operator (GPU Feature Discovery labels); \"gke\" targets GKE GPU sharing node pools (see gke_gpu_node_pools)."
  type        = string
  default     = "resource"

  validation {
    condition     = contains(["resource", "nvidia", "gke", "dra", "mig"], var.backend)
    error_message = "backend must be one of: resource, nvidia, gke, dra, mig."
  }
}

variable "slices_per_gpu" {
  description = "Slices that make one whole GPU (CASTSLICE_SLICES_PER_GPU). With the default 4, a training Pod (4 slices) gets a whole GPU, inference half, dev a quarter."
  type        = number
  default     = 4

  validation {
    condition     = var.slices_per_gpu >= 1 && floor(var.slices_per_gpu) == var.slices_per_gpu && var.slices_per_gpu <= try(tonumber(lookup(var.castslice_env, "CASTSLICE_MAX_SLICE_RATIO", "1000")), 1000)
    error_message = "slices_per_gpu must be a whole number from 1 to CASTSLICE_MAX_SLICE_RATIO (1000 unless castslice_env sets it)."
  }
}

variable "sharing_degrees" {
  description = "Clients per GPU that the cluster's sharing node pools offer (CASTSLICE_SHARING_DEGREES): GKE max_shared_clients_per_gpu, NVIDIA replicas. A fractional share goes to the largest degree that still gives the Pod at least its share. With gke_gpu_node_pools, one pool is created per degree."
  type        = list(number)
  default     = [4]

  validation {
    condition     = length(var.sharing_degrees) > 0 && alltrue([for degree in var.sharing_degrees : degree >= 2 && degree <= 1000 && floor(degree) == degree])
    error_message = "sharing_degrees must list whole numbers from 2 to 1000, as in [4] or [2, 4, 8]."
  }

  validation {
    condition     = length(distinct(var.sharing_degrees)) == length(var.sharing_degrees)
    error_message = "sharing_degrees must not list a degree twice."
  }
}

variable "sharing_strategy" {
  description = "How the nodes share a GPU (CASTSLICE_SHARING_STRATEGY): \"time-slicing\" or \"mps\". GKE calls them TIME_SHARING and MPS."
  type        = string
  default     = "time-slicing"

  validation {
    condition     = contains(["time-slicing", "mps"], var.sharing_strategy)
    error_message = "sharing_strategy must be time-slicing or mps."
  }
}

variable "webhook_configuration_file" {
  description = "The MutatingWebhookConfiguration to register, as `castslice webhook` prints it; null: the shipped webhook/mutatingwebhookconfiguration.yaml. Only metadata.name and each clientConfig are replaced. With a policy, generate it from the same policy (castslice webhook --url https://castslice.invalid/ --policy FILE): a plan stops when the two differ."
  type        = string
  default     = null

  validation {
    condition     = var.webhook_configuration_file == null || try(yamldecode(file(var.webhook_configuration_file)).kind == "MutatingWebhookConfiguration", false)
    error_message = "webhook_configuration_file must name a readable YAML file holding a MutatingWebhookConfiguration, as `castslice webhook` prints it."
  }
}

variable "policy" {
  description = "Enrolment policy, inline YAML or JSON (CASTSLICE_POLICY): rules that opt whole namespaces or labelled workloads in or out. null: annotations only. The registration (webhook_configuration_file) must be generated from the same policy: castslice webhook --url https://castslice.invalid/ --policy FILE; a plan stops when they differ."
  type        = string
  default     = null

  validation {
    condition     = var.policy == null || try(length(trimspace(var.policy)) > 0 && can(concat(yamldecode(var.policy).rules, [])), false)
    error_message = "policy must be YAML or JSON with a top-level list of rules, as in \"rules: [{name: research, namespaces: [research], optimize: true}]\"."
  }
}

variable "deployer_service_account" {
  description = "Email of the service account that runs cloudbuild.yaml (optional). It is allowed to push to the repository, deploy this service and run it as the runtime service account, and nothing else."
  type        = string
  default     = null

  validation {
    condition     = var.deployer_service_account == null || can(regex("^[a-z0-9-]+@[a-z0-9.-]+\\.gserviceaccount\\.com$", var.deployer_service_account))
    error_message = "deployer_service_account must be a service account email, such as NAME@PROJECT.iam.gserviceaccount.com."
  }
}

variable "webhook_name" {
  description = "Name of the MutatingWebhookConfiguration. Each installation in a cluster needs its own: applying another variant with the same name replaces this one's registration."
  type        = string
  default     = "castslice"

  validation {
    condition     = length(var.webhook_name) <= 253 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", var.webhook_name))
    error_message = "webhook_name must be a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters."
  }
}

variable "deletion_protection" {
  description = "Refuse to destroy the Cloud Run service while true. Set to false (and apply) before terraform destroy."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels for the Artifact Registry repository and the Cloud Run service."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key, value in var.labels : can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))])
    error_message = "labels keys must be 1-63 lowercase letters, digits, '_' or '-' starting with a letter; values up to 63 of the same."
  }
}

variable "kubeconfig_path" {
  description = "Kubeconfig for the cluster that gets the MutatingWebhookConfiguration."
  type        = string
  default     = "~/.kube/config"

  validation {
    condition     = length(trimspace(var.kubeconfig_path)) > 0
    error_message = "kubeconfig_path must not be empty."
  }
}

variable "kube_context" {
  description = "Context in the kubeconfig to use; null uses the current context."
  type        = string
  default     = null

  validation {
    condition     = var.kube_context == null || try(length(trimspace(var.kube_context)) > 0, false)
    error_message = "kube_context must be null or a non-empty context name."
  }
}

variable "monitoring_enabled" {
  description = "Create the log-based metrics, the Cloud Monitoring dashboard and the alert policies of monitoring.tf."
  type        = bool
  default     = true
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels the alert policies notify, as projects/PROJECT/notificationChannels/ID. Empty: incidents open in the console only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for channel in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", channel))])
    error_message = "notification_channels entries must be notification channel names, as in projects/my-project/notificationChannels/1234567890."
  }
}

variable "alert_thresholds" {
  description = "Counts in 5 minutes above which the alerts fire. failed_open: error lines (reviews that failed inside CastSlice, any other failure) and refused requests other than 404 (what unauthenticated callers of the public URL get). server_errors: requests the service answered with a 5xx status (Cloud Run's request_count). Either way the API server admitted Pods unmutated."
  type = object({
    failed_open   = optional(number, 0)
    server_errors = optional(number, 0)
  })
  default  = {}
  nullable = false

  validation {
    condition     = alltrue([for count in values(var.alert_thresholds) : count >= 0 && floor(count) == count])
    error_message = "alert_thresholds must be whole numbers, 0 or more."
  }
}

variable "gke_gpu_node_pools" {
  description = "GPU node pools to add to an existing GKE cluster for backend = \"gke\": one sharing pool per entry of sharing_degrees (sharing_strategy, max_shared_clients_per_gpu = the degree), plus a pool of whole GPUs unless whole_gpu_pool is false. For backend = \"mig\": one pool per entry of mig_partition_sizes instead of the sharing pools, and with mig_time_shared_clients one more of the smallest size, time-shared by that many clients per partition. min_nodes and max_nodes are per zone. null (the default): no node pool."
  type = object({
    cluster            = string
    location           = string
    project            = optional(string)
    node_locations     = optional(list(string))
    machine_type       = string
    accelerator_type   = string
    accelerator_count  = optional(number, 1)
    gpu_driver_version = optional(string, "DEFAULT")
    min_nodes          = optional(number, 0)
    max_nodes          = optional(number, 2)
    spot               = optional(bool, false)
    service_account    = optional(string)
    whole_gpu_pool     = optional(bool, true)
    name_prefix        = optional(string, "castslice")
    # backend = "mig": one MIG partition pool per size (gpu_partition_size), no sharing pools.
    mig_partition_sizes = optional(list(string), [])
    # backend = "mig": the pools' GPU model (CASTSLICE_MIG_GPU_MODELS), whose profiles the
    # sizes are: A100-40GB, A100-80GB, H100-80GB, H100-NVL, H100-96GB, H200, B200 or A30.
    mig_gpu_model = optional(string, "A100-80GB")
    # backend = "mig": also a pool of the smallest partition size time-shared by this many
    # clients per partition (2 to 48); Pods smaller than that partition share one.
    mig_time_shared_clients = optional(number)
  })
  default = null

  validation {
    condition     = var.gke_gpu_node_pools == null || var.backend == "gke" || var.backend == "mig"
    error_message = "gke_gpu_node_pools is for backend = \"gke\" (or \"mig\" with mig_partition_sizes): the other backends place Pods by labels these pools do not carry."
  }

  validation {
    condition     = var.gke_gpu_node_pools == null || (var.backend == "mig") == (try(length(var.gke_gpu_node_pools.mig_partition_sizes), 0) > 0)
    error_message = "gke_gpu_node_pools.mig_partition_sizes lists the MIG partition pools of backend = \"mig\", and only of it: set both or neither."
  }

  validation {
    condition     = var.gke_gpu_node_pools == null || contains(keys(local.mig_profiles), try(var.gke_gpu_node_pools.mig_gpu_model, "A100-80GB"))
    error_message = "gke_gpu_node_pools.mig_gpu_model must be one of: A100-40GB, A100-80GB, H100-80GB, H100-NVL, H100-96GB, H200, B200, A30."
  }

  validation {
    # As CASTSLICE_MIG_PROFILES must be of CASTSLICE_MIG_GPU_MODELS: else every Pod gets a whole GPU.
    condition     = var.gke_gpu_node_pools == null || alltrue([for size in try(var.gke_gpu_node_pools.mig_partition_sizes, []) : contains(try(local.mig_profiles[var.gke_gpu_node_pools.mig_gpu_model], []), size)])
    error_message = "gke_gpu_node_pools.mig_partition_sizes must be MIG profiles of mig_gpu_model (A100-80GB unless set), e.g. 1g.10gb or 3g.40gb on an A100-80GB, 1g.18gb or 3g.71gb on an H200."
  }

  validation {
    condition = var.gke_gpu_node_pools == null || try(var.gke_gpu_node_pools.mig_time_shared_clients == null, true) || try(
      length(var.gke_gpu_node_pools.mig_partition_sizes) > 0 &&
      var.gke_gpu_node_pools.mig_time_shared_clients >= 2 &&
      var.gke_gpu_node_pools.mig_time_shared_clients <= 48 &&
      floor(var.gke_gpu_node_pools.mig_time_shared_clients) == var.gke_gpu_node_pools.mig_time_shared_clients,
      false
    )
    error_message = "gke_gpu_node_pools.mig_time_shared_clients time-shares the smallest of mig_partition_sizes: set those too, and a whole number from 2 to 48 (GKE's max_shared_clients_per_gpu)."
  }

  validation {
    # GKE accepts 2 to 48 clients per GPU.
    condition     = var.gke_gpu_node_pools == null || alltrue([for degree in var.sharing_degrees : degree <= 48])
    error_message = "With gke_gpu_node_pools, every sharing degree must be at most 48, GKE's limit for max_shared_clients_per_gpu."
  }

  validation {
    condition = try(
      var.gke_gpu_node_pools.min_nodes >= 0 && var.gke_gpu_node_pools.max_nodes >= 1 &&
      var.gke_gpu_node_pools.min_nodes <= var.gke_gpu_node_pools.max_nodes &&
      floor(var.gke_gpu_node_pools.min_nodes) == var.gke_gpu_node_pools.min_nodes &&
      floor(var.gke_gpu_node_pools.max_nodes) == var.gke_gpu_node_pools.max_nodes,
      var.gke_gpu_node_pools == null
    )
    error_message = "gke_gpu_node_pools: min_nodes and max_nodes must be whole numbers with 0 <= min_nodes <= max_nodes and max_nodes >= 1."
  }

  validation {
    condition = try(
      var.gke_gpu_node_pools.accelerator_count >= 1 &&
      floor(var.gke_gpu_node_pools.accelerator_count) == var.gke_gpu_node_pools.accelerator_count &&
      contains(["DEFAULT", "LATEST", "INSTALLATION_DISABLED"], var.gke_gpu_node_pools.gpu_driver_version) &&
      length(trimspace(var.gke_gpu_node_pools.cluster)) > 0 &&
      length(trimspace(var.gke_gpu_node_pools.location)) > 0 &&
      length(trimspace(var.gke_gpu_node_pools.machine_type)) > 0 &&
      length(trimspace(var.gke_gpu_node_pools.accelerator_type)) > 0,
      var.gke_gpu_node_pools == null
    )
    error_message = "gke_gpu_node_pools: cluster, location, machine_type and accelerator_type must be set, accelerator_count a whole number from 1, gpu_driver_version DEFAULT, LATEST or INSTALLATION_DISABLED."
  }

  validation {
    # Node pool names: at most 40 characters; the longest suffix added is "-whole" or "-mps-48".
    condition     = try(length(regex("^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$", var.gke_gpu_node_pools.name_prefix)) > 0, var.gke_gpu_node_pools == null)
    error_message = "gke_gpu_node_pools.name_prefix must be 1-32 lowercase letters, digits or hyphens, starting with a letter and not ending with a hyphen."
  }
}
