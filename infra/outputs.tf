locals {
  kubectl = var.kube_context == null ? "kubectl" : "kubectl --context ${var.kube_context}"
}

output "service_url" {
  description = "URL of the Cloud Run service. The webhook calls it with the path token appended; that full URL is only in the cluster's MutatingWebhookConfiguration."
  value       = google_cloud_run_v2_service.castslice.uri
}

output "webhook_configuration_name" {
  description = "Name of the MutatingWebhookConfiguration in the cluster."
  value       = local.webhook_settings.metadata.name
}

output "webhook_name" {
  description = "Name of the webhook inside that configuration."
  value       = local.webhook_settings.webhooks[0].name
}

output "check_command" {
  description = "Shows the registered webhook and its settings (without the URL, which holds the token)."
  value       = "${local.kubectl} get mutatingwebhookconfiguration ${local.webhook_settings.metadata.name} -o custom-columns=WEBHOOK:.webhooks[*].name,FAILURE_POLICY:.webhooks[*].failurePolicy,TIMEOUT:.webhooks[*].timeoutSeconds,CONDITIONS:.webhooks[*].matchConditions[*].name"
}

output "smoke_test_command" {
  description = "Creates an opted-in GPU Pod in server-side dry run (nothing is stored): it prints {\"nvidia.com/gpu-shared\":\"1\"} when the API server reaches CastSlice."
  value       = "${local.kubectl} run castslice-smoke-test --dry-run=server --restart=Never --image=registry.k8s.io/pause:3.10 --annotations=castops.io/optimize=true --overrides='{\"apiVersion\":\"v1\",\"spec\":{\"containers\":[{\"name\":\"castslice-smoke-test\",\"image\":\"registry.k8s.io/pause:3.10\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}}' -o jsonpath='{.spec.containers[0].resources.limits}'"
}
