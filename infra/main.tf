# CastSlice on Cloud Run, registered as a URL webhook in a Kubernetes cluster.
#
# The webhook settings are not written here: they come from
# webhook/mutatingwebhookconfiguration.yaml, shared with the Knative and
# in-cluster variants; only the configuration's name and each clientConfig are replaced.

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kube_context
}

locals {
  webhook_settings = yamldecode(file(coalesce(
    var.webhook_configuration_file, "${path.module}/webhook/mutatingwebhookconfiguration.yaml"
  )))

  # `castslice webhook --policy FILE` records the policy its matchConditions were
  # generated from; the service must run the same one, or enrolled Pods never reach it.
  registration_policy = try(
    jsonencode(jsondecode(local.webhook_settings.metadata.annotations["castslice.castops.io/policy"]).rules),
    jsonencode([]),
  )
  service_policy = var.policy == null ? jsonencode([]) : jsonencode(yamldecode(var.policy).rules)

  # The service URL plus the token as the last path segment: CastSlice answers a
  # review only on that path (CASTSLICE_PATH_TOKEN). https, no query, no fragment.
  webhook_url = "${google_cloud_run_v2_service.castslice.uri}/${random_password.path_token.result}"

  webhook_manifest = merge(local.webhook_settings, {
    # Two installations in one cluster (Terraform, Knative, in-cluster, a test
    # suite) must not overwrite each other's registration.
    metadata = merge(local.webhook_settings.metadata, { name = var.webhook_name })
    webhooks = [
      for webhook in local.webhook_settings.webhooks :
      merge(webhook, { clientConfig = { url = local.webhook_url } })
    ]
  })

  # The image in this module's repository. Cloud Run resolves a tag to its digest
  # when it creates a revision, so a revision never changes under a moved tag.
  image = "${var.region}-docker.pkg.dev/${var.project_id}/${var.repository_id}/${var.image}"

  # Plain settings only: a dynamic block cannot iterate over the sensitive token.
  container_env = merge(
    var.castslice_env,
    {
      CASTSLICE_BACKEND          = var.backend
      CASTSLICE_SLICES_PER_GPU   = tostring(var.slices_per_gpu)
      CASTSLICE_SHARING_DEGREES  = join(",", [for degree in var.sharing_degrees : tostring(degree)])
      CASTSLICE_SHARING_STRATEGY = var.sharing_strategy
    },
    var.policy == null ? {} : { CASTSLICE_POLICY = var.policy },
    # The mig backend on the partition pools this module makes: their sizes are the profiles.
    var.backend == "mig" && try(length(var.gke_gpu_node_pools.mig_partition_sizes), 0) > 0 ? {
      CASTSLICE_MIG_STACK      = "gke"
      CASTSLICE_MIG_GPU_MODELS = var.gke_gpu_node_pools.mig_gpu_model
      CASTSLICE_MIG_PROFILES   = join(",", var.gke_gpu_node_pools.mig_partition_sizes)
    } : {},
    var.backend == "mig" && try(var.gke_gpu_node_pools.mig_time_shared_clients, null) != null ? {
      CASTSLICE_MIG_TIME_SHARED_CLIENTS = tostring(var.gke_gpu_node_pools.mig_time_shared_clients)
    } : {},
  )

  apis = toset(concat(
    ["artifactregistry.googleapis.com", "iam.googleapis.com", "run.googleapis.com"],
    var.monitoring_enabled ? ["logging.googleapis.com", "monitoring.googleapis.com"] : [],
  ))
}

resource "google_project_service" "apis" {
  for_each = local.apis

  service = each.value
  # Other workloads in the project may use these APIs.
  disable_on_destroy = false
}

resource "google_artifact_registry_repository" "castslice" {
  repository_id = var.repository_id
  location      = var.region
  format        = "DOCKER"
  description   = "CastSlice admission webhook images"
  labels        = var.labels

  depends_on = [google_project_service.apis]
}

# Whether var.image is in the repository, on every plan. A check, not a data source the
# service reads: cloudbuild.yaml deploys later images itself, and once a cleanup policy
# deletes the first tag a failing lookup would stop every later plan. Here it only warns,
# and on the first plan that warning says to push the image before applying.
check "image_is_pushed" {
  data "google_artifact_registry_docker_image" "castslice" {
    location      = var.region
    repository_id = var.repository_id
    image_name    = var.image
  }

  assert {
    condition     = data.google_artifact_registry_docker_image.castslice.self_link != ""
    error_message = "Image ${var.image} is not in the ${var.repository_id} repository: push it before the first apply (later releases are deployed by cloudbuild.yaml, so after that this only means an old tag was cleaned up)."
  }
}

# The identity the service runs as. It holds no role: CastSlice calls no Google
# API, Cloud Run writes its logs from stdout, and the Cloud Run service agent
# (not this account) pulls the image from the repository.
resource "google_service_account" "runtime" {
  account_id   = "${var.service_name}-runtime"
  display_name = "CastSlice admission webhook (Cloud Run runtime)"

  # In a fresh project the IAM API is enabled by this module first.
  depends_on = [google_project_service.apis]
}

resource "random_password" "path_token" {
  length = var.path_token_length
  # Letters and digits only: the token is a URL path segment.
  special = false
}

resource "google_cloud_run_v2_service" "castslice" {
  name     = var.service_name
  location = var.region
  labels   = var.labels

  # The API server calls the webhook from outside Google's network (and on
  # GKE from the Google-managed control plane), so the service takes traffic
  # from the internet...
  ingress = "INGRESS_TRAFFIC_ALL"
  # ...without a Google identity: the API server can present none to Cloud Run,
  # so the Cloud Run Invoker IAM check is disabled (the supported way to make a
  # service public, which also works where domain-restricted sharing forbids
  # allUsers). What keeps callers out is the path token (CASTSLICE_PATH_TOKEN).
  invoker_iam_disabled = true
  deletion_protection  = var.deletion_protection

  template {
    service_account                  = google_service_account.runtime.email
    max_instance_request_concurrency = var.concurrency
    timeout                          = "${var.request_timeout_seconds}s"

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      image = local.image

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        startup_cpu_boost = true
        # true: request-based billing. CastSlice writes every log line before it
        # answers, so nothing is left to do once the response is sent.
        cpu_idle = var.cpu_idle
      }

      env {
        name  = "CASTSLICE_PATH_TOKEN"
        value = random_password.path_token.result
      }

      dynamic "env" {
        for_each = local.container_env
        content {
          name  = env.key
          value = env.value
        }
      }

      # Any path answers GET with the health document; /health avoids the
      # z-suffixed paths that Cloud Run reserves on its URLs.
      startup_probe {
        period_seconds    = 2
        failure_threshold = 15
        http_get {
          path = "/health"
        }
      }

      liveness_probe {
        period_seconds = 30
        http_get {
          path = "/health"
        }
      }
    }
  }

  lifecycle {
    # After the first apply, cloudbuild.yaml deploys new images with `gcloud run
    # deploy`, which also records itself on the service and the template; removing
    # those records would roll a new revision on every plan. Terraform keeps every
    # other setting.
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
      annotations["client.knative.dev/user-image"],
      annotations["run.googleapis.com/client-name"],
      annotations["run.googleapis.com/client-version"],
      template[0].annotations["client.knative.dev/user-image"],
      template[0].annotations["run.googleapis.com/client-name"],
      template[0].annotations["run.googleapis.com/client-version"],
    ]
  }

  depends_on = [google_project_service.apis]
}

# kubernetes_manifest rather than kubernetes_mutating_webhook_configuration_v1:
# the typed resource has no match_conditions (hashicorp/terraform-provider-kubernetes
# issue 2750), and the shared file is applied as it is, by server-side apply.
# The object holds the token-bearing URL, so plans, `terraform show` and the state
# show it: no output of this module refers to it.
resource "kubernetes_manifest" "webhook" {
  manifest = local.webhook_manifest

  lifecycle {
    precondition {
      condition     = local.registration_policy == local.service_policy
      error_message = "The webhook registration was generated from another enrolment policy than var.policy; regenerate it from the same policy: castslice webhook --url https://castslice.invalid/ --policy POLICY_FILE > webhook/mutatingwebhookconfiguration.yaml (or set webhook_configuration_file to its output)."
    }
  }
}

# Optional: what the Cloud Build service account needs to run cloudbuild.yaml,
# each grant on the one resource it concerns.
resource "google_artifact_registry_repository_iam_member" "deployer_push" {
  count = var.deployer_service_account == null ? 0 : 1

  location   = google_artifact_registry_repository.castslice.location
  repository = google_artifact_registry_repository.castslice.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${var.deployer_service_account}"
}

resource "google_cloud_run_v2_service_iam_member" "deployer_deploy" {
  count = var.deployer_service_account == null ? 0 : 1

  location = google_cloud_run_v2_service.castslice.location
  name     = google_cloud_run_v2_service.castslice.name
  role     = "roles/run.developer"
  member   = "serviceAccount:${var.deployer_service_account}"
}

resource "google_service_account_iam_member" "deployer_act_as_runtime" {
  count = var.deployer_service_account == null ? 0 : 1

  service_account_id = google_service_account.runtime.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${var.deployer_service_account}"
}

resource "google_project_iam_member" "deployer_logs" {
  count = var.deployer_service_account == null ? 0 : 1

  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${var.deployer_service_account}"
}
