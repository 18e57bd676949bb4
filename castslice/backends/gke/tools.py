"""What the tools ask of the gke backend (castslice/backends/roles.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from castslice.backends.answers import SharingPoolTools
from castslice.backends.gke import GKE_STRATEGY, MAX_CLIENTS, GkePlacer
from castslice.backends.placer import label_count

# Where the platform's network setup is written down.
_NETWORK_DOC = "docs/deploy.md#gke-network-prerequisites"


class GkeTools(GkePlacer, SharingPoolTools):
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

    def setup_hint(self) -> str:
        degrees = ",".join(str(degree) for degree in self.config.sharing_degrees)
        strategy = GKE_STRATEGY[self.config.sharing_strategy]
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
