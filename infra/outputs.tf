locals {
  kubectl = var.kube_context == null ? "kubectl" : "kubectl --context ${var.kube_context}"
}

# None of these refers to the webhook URL with its path token: an output that is not
# sensitive is printed by every apply.

output "service_url" {
  description = "URL of the Cloud Run service. The webhook calls it with the path token appended; that full URL is only in the cluster's MutatingWebhookConfiguration."
  value       = google_cloud_run_v2_service.castslice.uri
}

output "webhook_configuration_name" {
  description = "Name of the MutatingWebhookConfiguration in the cluster (var.webhook_name)."
  value       = local.webhook_manifest.metadata.name
}

output "webhook_names" {
  description = "Names of the webhooks inside that configuration."
  value       = [for webhook in local.webhook_settings.webhooks : webhook.name]
}

output "check_command" {
  description = "Shows the registered webhook and its settings (without the URL, which holds the token)."
  value       = "${local.kubectl} get mutatingwebhookconfiguration ${local.webhook_manifest.metadata.name} -o custom-columns=WEBHOOK:.webhooks[*].name,FAILURE_POLICY:.webhooks[*].failurePolicy,TIMEOUT:.webhooks[*].timeoutSeconds,CONDITIONS:.webhooks[*].matchConditions[*].name"
}

output "smoke_test_command" {
  description = "Creates an opted-in GPU Pod in server-side dry run (nothing is stored) and prints the record CastSlice leaves on the Pods it changes, e.g. {\"slices\":1,\"source\":\"default\",\"backend\":\"resource\",\"original\":{...}}; nothing printed means the API server did not reach CastSlice."
  value       = "${local.kubectl} run castslice-smoke-test --dry-run=server --restart=Never --image=registry.k8s.io/pause:3.10 --annotations=castops.io/optimize=true --overrides='{\"apiVersion\":\"v1\",\"spec\":{\"containers\":[{\"name\":\"castslice-smoke-test\",\"image\":\"registry.k8s.io/pause:3.10\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}' -o jsonpath='{.metadata.annotations.castslice\\.castops\\.io/applied}'"
}

output "dashboard_url" {
  description = "The CastSlice dashboard in the Cloud console (null when monitoring_enabled is false)."
  value       = var.monitoring_enabled ? "https://console.cloud.google.com/monitoring/dashboards/custom/${element(split("/", google_monitoring_dashboard.castslice[0].id), 3)}?project=${var.project_id}" : null
}

output "gke_gpu_node_pools" {
  description = "GPU node pools created for the gke backend, each with its clients per GPU (null for the whole-GPU pool)."
  value       = { for name, pool in local.gke_gpu_node_pools : name => pool.max_shared_clients_per_gpu }
}
