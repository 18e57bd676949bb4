"""The NVIDIA device plugin / GPU Operator with time-slicing or MPS and `renameByDefault`.

Sharing nodes advertise `<gpu>.shared` (one unit per client) and GPU Feature
Discovery labels them with `nvidia.com/gpu.replicas` and
`nvidia.com/gpu.sharing-strategy`; plain GPU nodes carry the strategy `none`.
"""

from __future__ import annotations

from fractions import Fraction

from castslice.backends.placer import Placement, SharingPoolPlacer

REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"
# GPU Feature Discovery: whether the node's devices are configured for MPS
# (k8s-device-plugin v0.20.0 README, "Catalog of Labels").
MPS_CAPABLE = "nvidia.com/mps.capable"
# The name the NVIDIA device plugin gives a shared GPU with `renameByDefault: true`.
SHARED_SUFFIX = ".shared"


class NvidiaPlacer(SharingPoolPlacer):
    name = "nvidia"
    placement_keys = (REPLICAS, STRATEGY)

    @classmethod
    def default_shared_resource(cls, gpu_resource: str) -> str:
        return gpu_resource + SHARED_SUFFIX

    def shared(self, degree: int) -> Placement:
        selector = {REPLICAS: str(degree), STRATEGY: self.config.sharing_strategy}
        # One replica per client: `failRequestsGreaterThanOne` refuses more.
        share = Fraction(1, degree)
        placement = Placement(
            self.shared_resource, 1, selector, share, instance=self.mps_client(degree)
        )
        return self.with_memory(placement, share)

    def whole(self, gpus: int) -> Placement:
        return Placement(self.config.gpu_resource, gpus, {STRATEGY: "none"}, Fraction(gpus))
