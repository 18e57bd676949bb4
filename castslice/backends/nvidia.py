"""The NVIDIA device plugin / GPU Operator with time-slicing or MPS and `renameByDefault`.

Sharing nodes advertise `<gpu>.shared` (one unit per client) and GPU Feature
Discovery labels them with `nvidia.com/gpu.replicas` and
`nvidia.com/gpu.sharing-strategy`; plain GPU nodes carry the strategy `none`.
"""

from __future__ import annotations

from fractions import Fraction

from ..config import Config
from .base import Placement, sharing_degree, whole_gpus

REPLICAS = "nvidia.com/gpu.replicas"
STRATEGY = "nvidia.com/gpu.sharing-strategy"


class NvidiaBackend:
    name = "nvidia"
    placement_keys = (REPLICAS, STRATEGY)

    def __init__(self, config: Config) -> None:
        self._config = config

    def place(self, slices: int) -> Placement:
        config = self._config
        degree = sharing_degree(config, slices)
        if degree is None:
            gpus = whole_gpus(config, slices)
            return Placement(config.gpu_resource, gpus, {STRATEGY: "none"}, Fraction(gpus))
        selector = {REPLICAS: str(degree), STRATEGY: config.sharing_strategy}
        # One replica per client: `failRequestsGreaterThanOne` refuses more.
        return Placement(config.shared_resource, 1, selector, Fraction(1, degree))
