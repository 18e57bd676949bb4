"""The NVIDIA device plugin / GPU Operator with time-slicing or MPS and `renameByDefault`.

Sharing nodes advertise `<gpu>.shared` (one unit per client) and GPU Feature
Discovery labels them with `nvidia.com/gpu.replicas` and
`nvidia.com/gpu.sharing-strategy`; plain GPU nodes carry the strategy `none`.
"""

from __future__ import annotations

from fractions import Fraction

from .base import Placement, SharingPoolBackend

REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"


class NvidiaBackend(SharingPoolBackend):
    name = "nvidia"
    placement_keys = (REPLICAS, STRATEGY)

    def shared(self, degree: int) -> Placement:
        selector = {REPLICAS: str(degree), STRATEGY: self.config.sharing_strategy}
        # One replica per client: `failRequestsGreaterThanOne` refuses more.
        return Placement(self.config.shared_resource, 1, selector, Fraction(1, degree))

    def whole(self, gpus: int) -> Placement:
        return Placement(self.config.gpu_resource, gpus, {STRATEGY: "none"}, Fraction(gpus))
