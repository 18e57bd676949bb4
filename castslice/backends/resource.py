"""The seed's backend: the slice count itself, as a device plugin's shared resource."""

from __future__ import annotations

from fractions import Fraction

from ..config import Config
from .base import BackendDefaults, Placement


class ResourceBackend(BackendDefaults):
    """`CASTSLICE_SHARED_RESOURCE: s`; the device plugin must accept counts above 1."""

    name = "resource"
    placement_keys: tuple[str, ...] = ()

    def __init__(self, config: Config) -> None:
        self.config = config

    def place(self, slices: int) -> Placement:
        share = Fraction(slices, self.config.slices_per_gpu)
        return Placement(self.config.shared_resource, slices, {}, share)
