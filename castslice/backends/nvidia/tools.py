"""What the tools ask of the nvidia backend (castslice/backends/roles.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from castslice.backends.answers import SharingPoolTools
from castslice.backends.nvidia import MPS_CAPABLE, REPLICAS, STRATEGY, NvidiaPlacer
from castslice.backends.placer import label_count


class NvidiaTools(NvidiaPlacer, SharingPoolTools):
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
        if self.shared_resource in allocatable:
            return ""
        return (
            f"{REPLICAS}={replicas} and no {self.shared_resource}: time-slicing "
            f"with renameByDefault: false, so {self.config.gpu_resource} counts replicas"
        )

    def node_problems(self, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
        """Nodes labelled as MPS-sharing whose devices GFD does not find configured for MPS:
        their clients get no memory limit, whatever the strategy label says."""
        problems = []
        for node in nodes:
            metadata = node.get("metadata") or {}
            labels = metadata.get("labels") or {}
            if labels.get(STRATEGY) == "mps" and labels.get(MPS_CAPABLE) != "true":
                problems.append(
                    f"node {metadata.get('name')}: {STRATEGY}=mps but "
                    f"{MPS_CAPABLE}={labels.get(MPS_CAPABLE, '(none)')}: the MPS control "
                    "daemon does not run there, so no client's memory is limited"
                )
        return problems

    def describe(self) -> str:
        return f"{super().describe()} ({self.isolation()})"

    def setup_hint(self) -> str:
        degrees = ",".join(str(degree) for degree in self.config.sharing_degrees)
        return (
            f"configure the NVIDIA device plugin for {self.config.sharing_strategy} with "
            f"renameByDefault: true and replicas {degrees}, keep GPU nodes without sharing for "
            "whole GPUs, or set CASTSLICE_SHARING_DEGREES to the replicas your nodes have"
        )

    def gpu_units(self, resource: str, labels: Mapping[str, str]) -> int | None:
        # GPU Feature Discovery labels the replicas each GPU was split into.
        if resource == self.shared_resource:
            return label_count(labels.get(REPLICAS))
        return 1 if resource == self.config.gpu_resource else None

    def quota_units_per_gpu(self) -> int:
        # One unit per client; the most clients a sharing pool gives one GPU.
        return max(self.config.sharing_degrees)
