"""The NVIDIA device plugin / GPU Operator with time-slicing or MPS and `renameByDefault`.

Sharing nodes advertise `<gpu>.shared` (one unit per client) and GPU Feature
Discovery labels them with `nvidia.com/gpu.replicas` and
`nvidia.com/gpu.sharing-strategy`; plain GPU nodes carry the strategy `none`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .base import Placement, SharingPoolBackend

REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"


class NvidiaBackend(SharingPoolBackend):
    name = "nvidia"
    placement_keys = (REPLICAS, STRATEGY)
    whole_gpu_nodes_fix = (
        "keep GPU nodes without sharing (the whole-gpu entry of "
        "infra/gpu-sharing/nvidia/device-plugin-config.yaml; GPU Feature Discovery labels "
        f"them {STRATEGY}=none), or set CASTSLICE_PRESETS and CASTSLICE_SHARING_DEGREES so "
        "that every preset fits a sharing node"
    )
    node_setup_fix = (
        "set renameByDefault: true in those nodes' device plugin config, keeping their "
        "entries (docs/backends.md#a-gpu-operator-that-already-time-slices)"
    )

    def node_setup_problem(self, node: Mapping[str, Any]) -> str:
        """Replicas labelled but no renamed resource: time-slicing with `renameByDefault: false`.

        Such a node advertises its replicas as the GPU resource itself, so a Pod
        asking for the shared resource never fits and a whole-GPU Pod gets a replica.
        """
        labels = (node.get("metadata") or {}).get("labels") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        replicas = labels.get(REPLICAS, "")
        if not replicas.isdigit() or int(replicas) < 2:
            return ""
        if self.config.shared_resource in allocatable:
            return ""
        return (
            f"{REPLICAS}={replicas} and no {self.config.shared_resource}: time-slicing "
            f"with renameByDefault: false, so {self.config.gpu_resource} counts replicas"
        )

    def shared(self, degree: int) -> Placement:
        selector = {REPLICAS: str(degree), STRATEGY: self.config.sharing_strategy}
        # One replica per client: `failRequestsGreaterThanOne` refuses more.
        return Placement(self.config.shared_resource, 1, selector, Fraction(1, degree))

    def whole(self, gpus: int) -> Placement:
        return Placement(self.config.gpu_resource, gpus, {STRATEGY: "none"}, Fraction(gpus))
