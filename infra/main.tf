# CastSlice on Cloud Run, registered as a URL webhook in a Kubernetes cluster.
#
# The webhook settings are not written here: they come from
# webhook/mutatingwebhookconfiguration.yaml, shared with the Knative and
# in-cluster variants, and only clientConfig is replaced.

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kube_context
}

locals {
  webhook_settings = yamldecode(file("${path.module}/webhook/mutatingwebhookconfiguration.yaml"))

  # The service URL plus the token as the last path segment: CastSlice answers a
  # review only on that path (CASTSLICE_PATH_TOKEN). https, no query, no fragment.
  webhook_url = "${google_cloud_run_v2_service.castslice.uri}/${random_password.path_token.result}"

  webhook_manifest = merge(local.webhook_settings, {
    webhooks = [
      for webhook in local.webhook_settings.webhooks :
      merge(webhook, { clientConfig = { url = local.webhook_url } })
    ]
  })

  # Plain settings only: a dynamic block cannot iterate over the sensitive token.
  container_env = merge(var.castslice_env, {
    # functions-framework's gunicorn threads, matched to the requests Cloud Run sends at once.
    THREADS = tostring(var.concurrency)
  })
}

resource "google_project_service" "apis" {
  for_each = toset(["artifactregistry.googleapis.com", "run.googleapis.com"])

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

# Resolves var.image to its digest. Reading it fails while the image is not
# pushed yet, so the service is never created pointing at a missing image.
data "google_artifact_registry_docker_image" "castslice" {
  location      = google_artifact_registry_repository.castslice.location
  repository_id = google_artifact_registry_repository.castslice.repository_id
  image_name    = var.image
}

# The identity the service runs as. It holds no role: CastSlice calls no Google
# API, Cloud Run writes its logs from stdout, and the Cloud Run service agent
# (not this account) pulls the image from the repository.
resource "google_service_account" "runtime" {
  account_id   = "${var.service_name}-runtime"
  display_name = "CastSlice admission webhook (Cloud Run runtime)"
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
      image = data.google_artifact_registry_docker_image.castslice.self_link

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        startup_cpu_boost = true
        # CPU stays allocated between requests: CastSlice writes its log lines from a
        # background thread shortly after each answer, and a throttled instance would
        # hold them until the next request. It also spares the first review after an
        # idle spell the throttled CPU's slow start.
        cpu_idle = false
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
    # After the first apply, cloudbuild.yaml deploys new images with
    # `gcloud run deploy`; Terraform keeps every other setting.
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  depends_on = [google_project_service.apis]
}

# kubernetes_manifest rather than kubernetes_mutating_webhook_configuration_v1:
# the typed resource has no match_conditions (hashicorp/terraform-provider-kubernetes
# issue 2750), and the shared file is applied as it is, by server-side apply.
resource "kubernetes_manifest" "webhook" {
  manifest = local.webhook_manifest
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
