"""GKE GPU time-sharing and MPS node pools.

GKE keeps `nvidia.com/gpu`, refuses counts above 1 on sharing nodes and
places a Pod on a sharing pool by two node labels; Autopilot requires both.
"""

from __future__ import annotations

from fractions import Fraction

from .base import Placement, SharingPoolBackend

STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
MAX_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's spelling of the strategies.
_GKE_STRATEGY = {"time-slicing": "time-sharing", "mps": "mps"}


class GkeBackend(SharingPoolBackend):
    name = "gke"
    placement_keys = (STRATEGY, MAX_CLIENTS)

    def shared(self, degree: int) -> Placement:
        selector = {
            STRATEGY: _GKE_STRATEGY[self.config.sharing_strategy],
            MAX_CLIENTS: str(degree),
        }
        return Placement(self.config.gpu_resource, 1, selector, Fraction(1, degree))

    def whole(self, gpus: int) -> Placement:
        # Sharing nodes advertise nvidia.com/gpu too (one per client); without
        # this a whole-GPU Pod could land on one and get a fraction.
        return Placement(self.config.gpu_resource, gpus, {}, Fraction(gpus), (STRATEGY,))

    def setup_hint(self) -> str:
        degrees = ",".join(str(degree) for degree in self.config.sharing_degrees)
        strategy = _GKE_STRATEGY[self.config.sharing_strategy]
        return (
            f"create GPU node pools with gpu-sharing-strategy={strategy} and "
            f"max-shared-clients-per-gpu={degrees} plus one without sharing for whole GPUs, "
            "or set CASTSLICE_SHARING_DEGREES to what your pools offer"
        )

    def describe(self) -> str:
        return f"backend {self.name}"

    def quota_resource(self) -> str | None:
        # GKE keeps the GPU resource: quotas on it count opted-in Pods too.
        return None
