# Generated from castslice/backends/mig/profiles.py by `make generate`; do not edit.
# The MIG profiles of each GPU model: gke_gpu_node_pools.mig_partition_sizes must be
# profiles of its mig_gpu_model, as CASTSLICE_MIG_PROFILES must be of
# CASTSLICE_MIG_GPU_MODELS.
locals {
  mig_profiles = {
    "A100-40GB" = ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    "A100-80GB" = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    "H100-80GB" = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    "H100-NVL"  = ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]
    "H100-96GB" = ["1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"]
    "H200"      = ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    "B200"      = ["1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"]
    "A30"       = ["1g.6gb", "2g.12gb", "4g.24gb"]
  }
}
