"""GKE GPU time-sharing and MPS node pools.

GKE keeps `nvidia.com/gpu`, refuses counts above 1 on sharing nodes and
places a Pod on a sharing pool by two node labels; Autopilot requires both.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from castslice.backends.base import Placement, SharingPoolBackend, label_count

STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
# The MIG partition size of a GPU partition node pool: one nvidia.com/gpu is a partition.
PARTITION = "cloud.google.com/gke-gpu-partition-size"
MAX_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's spelling of the strategies.
_GKE_STRATEGY = {"time-slicing": "time-sharing", "mps": "mps"}
# Where the platform's network setup is written down.
_NETWORK_DOC = "docs/deploy.md#gke-network-prerequisites"


class GkeBackend(SharingPoolBackend):
    name = "gke"
    placement_keys = (STRATEGY, MAX_CLIENTS)
    whole_gpu_nodes_fix = (
        "add a GPU node pool without GPU sharing (gcloud container node-pools create "
        "with --accelerator=type=TYPE,count=N and no gpu-sharing-strategy), or set "
        "CASTSLICE_PRESETS and CASTSLICE_SHARING_DEGREES so that every preset fits a "
        "sharing pool"
    )

    def unreachable_endpoint_cause(self, client_config: Mapping[str, Any]) -> str:
        # Private clusters' firewall lets the control plane open only 443 and 10250 on
        # nodes; a URL webhook needs the control plane's egress (NONE blocks it).
        if client_config.get("service"):
            return (
                "on a private GKE cluster, allow TCP 8443 from the control plane's address "
                f"range to the nodes with a firewall rule ({_NETWORK_DOC})"
            )
        return (
            "on GKE, the control plane's egress must allow the URL (control plane egress "
            f"VIA_CONTROL_PLANE, not NONE) ({_NETWORK_DOC})"
        )

    def shared(self, degree: int) -> Placement:
        selector = {
            STRATEGY: _GKE_STRATEGY[self.config.sharing_strategy],
            MAX_CLIENTS: str(degree),
        }
        share = Fraction(1, degree)
        return Placement(
            self.config.gpu_resource, 1, selector, share, instance=self.mps_client(degree)
        )

    def whole(self, gpus: int) -> Placement:
        # Sharing nodes advertise nvidia.com/gpu too (one per client), and MIG partition
        # nodes one per partition; without this a whole-GPU Pod could land on either and
        # get a fraction.
        return Placement(self.config.gpu_resource, gpus, {}, Fraction(gpus), (STRATEGY, PARTITION))

    def setup_hint(self) -> str:
        degrees = ",".join(str(degree) for degree in self.config.sharing_degrees)
        strategy = _GKE_STRATEGY[self.config.sharing_strategy]
        return (
            f"create GPU node pools with gpu-sharing-strategy={strategy} and "
            f"max-shared-clients-per-gpu={degrees} plus one without sharing for whole GPUs, "
            "or set CASTSLICE_SHARING_DEGREES to what your pools offer"
        )

    def describe(self) -> str:
        return f"backend {self.name} ({self.isolation()})"

    def gpu_units(self, resource: str, labels: Mapping[str, str]) -> int | None:
        # A sharing node advertises one nvidia.com/gpu per client of each physical GPU.
        if resource != self.config.gpu_resource:
            return None
        return label_count(labels.get(MAX_CLIENTS)) or 1

    def quota_resource(self) -> str | None:
        # GKE keeps the GPU resource: quotas on it count opted-in Pods too.
        return None
