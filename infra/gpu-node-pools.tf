# Optional GPU node pools for backend = "gke", added to an existing GKE cluster.
#
# CastSlice places a fractional share on a pool whose clients per GPU give the Pod
# at least its share, so there is one sharing pool per entry of sharing_degrees, the
# same list the service reads as CASTSLICE_SHARING_DEGREES: the pools and the
# service cannot disagree. GKE labels the nodes of each pool with
# cloud.google.com/gke-gpu-sharing-strategy and
# cloud.google.com/gke-max-shared-clients-per-gpu, the selector CastSlice writes.
# Whole-GPU shares go to the pool without sharing.
#
# For backend = "mig" (CASTSLICE_MIG_STACK=gke), one pool per MIG partition size
# instead of the sharing pools: GKE labels its nodes
# cloud.google.com/gke-gpu-partition-size, the selector CastSlice writes, and the service
# is told the sizes (CASTSLICE_MIG_PROFILES), so the two cannot disagree either. With
# mig_time_shared_clients, one more pool of the smallest size, time-shared on top (GKE labels
# its nodes with the partition size, gke-gpu-sharing-strategy=time-sharing and
# gke-max-shared-clients-per-gpu); the service is told the clients
# (CASTSLICE_MIG_TIME_SHARED_CLIENTS) and sends there the Pods smaller than that partition.

locals {
  gke_sharing_strategy = { "time-slicing" = "TIME_SHARING", "mps" = "MPS" }[var.sharing_strategy]
  # Short enough that every pool name stays within GKE's 40 characters.
  gke_strategy_suffix = { "time-slicing" = "ts", "mps" = "mps" }[var.sharing_strategy]

  mig_partition_sizes = try(var.gke_gpu_node_pools.mig_partition_sizes, [])
  # A size's order: its memory, then its compute slices ("3g.40gb" -> 403), as CastSlice
  # orders a model's profiles.
  mig_size_order = {
    for size in local.mig_partition_sizes :
    size => tonumber(regex("\\.([0-9]+)gb$", size)[0]) * 10 + tonumber(regex("^([1-7])g", size)[0])
  }
  mig_smallest_partition = length(local.mig_partition_sizes) == 0 ? null : [
    for size in local.mig_partition_sizes : size
    if local.mig_size_order[size] == min(values(local.mig_size_order)...)
  ][0]
  mig_time_shared_clients = try(var.gke_gpu_node_pools.mig_time_shared_clients, null)

  gke_gpu_node_pools = var.gke_gpu_node_pools == null ? {} : merge(
    var.backend == "mig" ? {} : {
      for degree in var.sharing_degrees :
      "${var.gke_gpu_node_pools.name_prefix}-${local.gke_strategy_suffix}-${degree}" => {
        sharing_strategy           = local.gke_sharing_strategy
        max_shared_clients_per_gpu = degree
        gpu_partition_size         = null
      }
    },
    {
      # 3g.40gb -> <prefix>-3g40gb: within GKE's 40 characters after a 32-character prefix.
      for size in var.gke_gpu_node_pools.mig_partition_sizes :
      "${var.gke_gpu_node_pools.name_prefix}-${replace(size, ".", "")}" => {
        sharing_strategy           = null
        max_shared_clients_per_gpu = null
        gpu_partition_size         = size
      }
    },
    local.mig_time_shared_clients == null || local.mig_smallest_partition == null ? {} : {
      # 1g.10gb -> <prefix>-ts1g10: within GKE's 40 characters after a 32-character prefix.
      "${var.gke_gpu_node_pools.name_prefix}-ts${replace(trimsuffix(local.mig_smallest_partition, "gb"), ".", "")}" = {
        sharing_strategy           = "TIME_SHARING"
        max_shared_clients_per_gpu = local.mig_time_shared_clients
        gpu_partition_size         = local.mig_smallest_partition
      }
    },
    var.gke_gpu_node_pools.whole_gpu_pool ? {
      "${var.gke_gpu_node_pools.name_prefix}-whole" = {
        sharing_strategy           = null
        max_shared_clients_per_gpu = null
        gpu_partition_size         = null
      }
    } : {},
  )
}

resource "google_container_node_pool" "gpu" {
  for_each = local.gke_gpu_node_pools

  name           = each.key
  project        = coalesce(var.gke_gpu_node_pools.project, var.project_id)
  cluster        = var.gke_gpu_node_pools.cluster
  location       = var.gke_gpu_node_pools.location
  node_locations = var.gke_gpu_node_pools.node_locations

  # GPU nodes are expensive: the autoscaler adds them when Pods wait for them.
  autoscaling {
    min_node_count = var.gke_gpu_node_pools.min_nodes
    max_node_count = var.gke_gpu_node_pools.max_nodes
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = var.gke_gpu_node_pools.machine_type
    spot            = var.gke_gpu_node_pools.spot
    service_account = var.gke_gpu_node_pools.service_account
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    resource_labels = var.labels

    guest_accelerator {
      type               = var.gke_gpu_node_pools.accelerator_type
      count              = var.gke_gpu_node_pools.accelerator_count
      gpu_partition_size = each.value.gpu_partition_size

      gpu_driver_installation_config {
        gpu_driver_version = var.gke_gpu_node_pools.gpu_driver_version
      }

      dynamic "gpu_sharing_config" {
        for_each = each.value.max_shared_clients_per_gpu == null ? [] : [each.value]
        content {
          gpu_sharing_strategy       = gpu_sharing_config.value.sharing_strategy
          max_shared_clients_per_gpu = gpu_sharing_config.value.max_shared_clients_per_gpu
        }
      }
    }
  }
}
