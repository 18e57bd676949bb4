"""GKE GPU time-sharing and MPS node pools.

GKE keeps `nvidia.com/gpu`, refuses counts above 1 on sharing nodes and
places a Pod on a sharing pool by two node labels; Autopilot requires both.
"""

from __future__ import annotations

from fractions import Fraction

from castslice.backends.placer import Placement, SharingPoolPlacer

STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
# The MIG partition size of a GPU partition node pool: one nvidia.com/gpu is a partition.
PARTITION = "cloud.google.com/gke-gpu-partition-size"
MAX_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's spelling of the strategies.
GKE_STRATEGY = {"time-slicing": "time-sharing", "mps": "mps"}


class GkePlacer(SharingPoolPlacer):
    name = "gke"
    placement_keys = (STRATEGY, MAX_CLIENTS)
    # GKE installs the driver, configures containerd and runs its own device plugin, which
    # mounts the driver into containers: no nvidia-container-toolkit hook reads the
    # variables, and no GPU Feature Discovery label says what a node's driver enforces.
    memory_limits_unenforced = "GKE runs no nvidia-container-toolkit hook"

    def shared(self, degree: int) -> Placement:
        selector = {
            STRATEGY: GKE_STRATEGY[self.config.sharing_strategy],
            MAX_CLIENTS: str(degree),
        }
        share = Fraction(1, degree)
        placement = Placement(
            self.config.gpu_resource, 1, selector, share, instance=self.mps_client(degree)
        )
        return self.with_memory(placement, share)

    def whole(self, gpus: int) -> Placement:
        # Sharing nodes advertise nvidia.com/gpu too (one per client), and MIG partition
        # nodes one per partition; without this a whole-GPU Pod could land on either and
        # get a fraction.
        return Placement(self.config.gpu_resource, gpus, {}, Fraction(gpus), (STRATEGY, PARTITION))
