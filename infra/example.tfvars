# Copy to terraform.tfvars and adapt. Only project_id and image are required.
project_id = "my-project"
region     = "europe-west1"

# Pushed by cloudbuild.yaml (tagged with the commit) or by
# `gcloud builds submit --tag` (see the README); the module runs it by digest.
image = "castslice:3f2a9c1"

# The cluster that gets the MutatingWebhookConfiguration.
kubeconfig_path = "~/.kube/config"
kube_context    = "gke_my-project_europe-west1_gpu-cluster"

min_instances           = 1
max_instances           = 5
concurrency             = 40
request_timeout_seconds = 10

castslice_env = {
  CASTSLICE_SHARED_RESOURCE = "nvidia.com/gpu-shared"
}

# The account Cloud Build runs cloudbuild.yaml as; it gets exactly the rights to
# push, deploy and act as the runtime service account.
# deployer_service_account = "castslice-deployer@my-project.iam.gserviceaccount.com"

labels = {
  app = "castslice"
}
