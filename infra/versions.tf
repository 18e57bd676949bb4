terraform {
  # 1.9: variable validations may refer to other variables (max_instances >= min_instances).
  required_version = ">= 1.9.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.8 added invoker_iam_disabled to google_cloud_run_v2_service.
      version = ">= 6.8.0, < 8.0.0"
    }
    kubernetes = {
      source = "hashicorp/kubernetes"
      # kubernetes_manifest (server-side apply of any object, matchConditions included).
      version = ">= 2.31.0, < 4.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
  }
}
