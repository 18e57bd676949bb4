# Copy to terraform.tfvars and adapt. Only project_id and image are required.
project_id = "my-project"
# Where the service runs; the same region as the cluster keeps the API server's calls short.
region = "europe-west4"

# Pushed by cloudbuild.yaml (tagged with the commit) or by
# `gcloud builds submit --tag` (docs/deploy.md#first-install).
image = "castslice:3f2a9c1"

# The cluster that gets the MutatingWebhookConfiguration, and its name there.
kubeconfig_path = "~/.kube/config"
kube_context    = "gke_my-project_europe-west4_gpu-cluster"
webhook_name    = "castslice"

min_instances           = 1
max_instances           = 5
concurrency             = 40
request_timeout_seconds = 10
cpu                     = "1"
memory                  = "512Mi"
# Request-based billing: CastSlice does no work between requests.
cpu_idle = true

# How Pods share GPUs. gke: GKE GPU sharing node pools, one per sharing degree
# (created below); nvidia: the NVIDIA device plugin / GPU Operator; resource: a
# device plugin that offers the shared resource.
backend          = "gke"
slices_per_gpu   = 4
sharing_degrees  = [2, 4]
sharing_strategy = "time-slicing"

# Off unless uncommented: namespaces and labelled workloads enrolled without
# annotating each Pod. The registration must come from the same policy, or the
# plan stops (docs/configuration.md, "Worked example: Terraform"):
#   castslice webhook --url https://castslice.invalid/ --policy policy.yaml > policy-webhook.yaml
# policy = <<-EOT
#   rules:
#     - name: research namespaces share by default
#       namespaces: [research, "team-*"]
#       optimize: true
#       workloadType: dev
# EOT
# webhook_configuration_file = "policy-webhook.yaml"

castslice_env = {
  CASTSLICE_PRESETS = "training=4,inference=2,batch=2,dev=1"
}

# Optional, off when null: GPU node pools added to the existing cluster for the
# gke backend, one per sharing degree plus one of whole GPUs (which whole-GPU Pods
# need; keep whole_gpu_pool at its default, true). For pools that exist already,
# leave this out (infra/gpu-sharing/README.md).
gke_gpu_node_pools = {
  cluster          = "gpu-cluster"
  location         = "europe-west4"
  node_locations   = ["europe-west4-a"]
  machine_type     = "g2-standard-8"
  accelerator_type = "nvidia-l4"
  min_nodes        = 0
  max_nodes        = 2
}

# Log-based metrics, a dashboard and alert policies; alerts go to these channels.
monitoring_enabled = true
notification_channels = [
  # "projects/my-project/notificationChannels/1234567890",
]

# The account Cloud Build runs cloudbuild.yaml as; it gets exactly the rights to
# push, deploy and act as the runtime service account.
# deployer_service_account = "castslice-deployer@my-project.iam.gserviceaccount.com"

labels = {
  app = "castslice"
}
