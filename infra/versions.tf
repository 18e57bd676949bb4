terraform {
  # 1.9: variable validations may refer to other variables (max_instances >= min_instances,
  # memory against cpu, node pools against the sharing degrees).
  required_version = ">= 1.9.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.8 added invoker_iam_disabled to google_cloud_run_v2_service.
      version = ">= 6.8.0, < 8.0.0"
    }
    kubernetes = {
      source = "hashicorp/kubernetes"
      # kubernetes_manifest (server-side apply of any object, matchConditions included). 3.x:
      # in 2.x, KUBE_CTX / KUBE_CONFIG_PATH / KUBE_HOST in the environment override the
      # provider block for kubernetes_manifest, so a CI runner could register the webhook in
      # another cluster than kube_context. 4.x changed only workload resources.
      version = ">= 3.0.0, < 5.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
    time = {
      source = "hashicorp/time"
      # time_sleep: a new log-based metric takes a while to become visible to Cloud Monitoring.
      version = ">= 0.9.0, < 1.0.0"
    }
  }
}
