"""GKE GPU time-sharing and MPS node pools.

GKE keeps `nvidia.com/gpu`, refuses counts above 1 on sharing nodes and
places a Pod on a sharing pool by two node labels; Autopilot requires both.
"""

from __future__ import annotations

from fractions import Fraction

from ..config import Config
from .base import Placement, sharing_degree, whole_gpus

STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
MAX_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's spelling of the strategies.
_GKE_STRATEGY = {"time-slicing": "time-sharing", "mps": "mps"}


class GkeBackend:
    name = "gke"
    placement_keys = (STRATEGY, MAX_CLIENTS)

    def __init__(self, config: Config) -> None:
        self._config = config

    def place(self, slices: int) -> Placement:
        config = self._config
        degree = sharing_degree(config, slices)
        if degree is None:
            gpus = whole_gpus(config, slices)
            # Sharing nodes advertise nvidia.com/gpu too (one per client); without
            # this a whole-GPU Pod could land on one and get a fraction.
            return Placement(config.gpu_resource, gpus, {}, Fraction(gpus), (STRATEGY,))
        selector = {
            STRATEGY: _GKE_STRATEGY[config.sharing_strategy],
            MAX_CLIENTS: str(degree),
        }
        return Placement(config.gpu_resource, 1, selector, Fraction(1, degree))
