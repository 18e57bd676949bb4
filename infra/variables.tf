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
  description = "Image in the Artifact Registry repository, as NAME:TAG or NAME@sha256:DIGEST (e.g. castslice:3f2a9c1, as pushed by cloudbuild.yaml). It must be pushed before apply: the service runs it by digest."
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
  description = "Requests one instance serves at once (Cloud Run max_instance_request_concurrency and the functions-framework thread count)."
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
  description = "Memory limit of one instance (e.g. \"512Mi\", \"1Gi\")."
  type        = string
  default     = "512Mi"

  validation {
    condition     = can(regex("^[1-9][0-9]*(Mi|Gi)$", var.memory))
    error_message = "memory must be a quantity in Mi or Gi, such as 512Mi or 1Gi."
  }
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
  description = "Further CastSlice settings for the service, e.g. { CASTSLICE_SHARED_RESOURCE = \"nvidia.com/gpu.shared\" }. CASTSLICE_PATH_TOKEN is managed by this module."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.castslice_env) : can(regex("^CASTSLICE_[A-Z0-9_]+$", name)) && name != "CASTSLICE_PATH_TOKEN"])
    error_message = "castslice_env keys must be CASTSLICE_* variables, and CASTSLICE_PATH_TOKEN is set by this module."
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
