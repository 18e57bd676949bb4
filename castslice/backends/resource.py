"""The seed's backend: the slice count itself, as a device plugin's shared resource."""

from __future__ import annotations

from fractions import Fraction

from .base import DevicePluginBackend, Placement


class ResourceBackend(DevicePluginBackend):
    """`CASTSLICE_SHARED_RESOURCE: s`; the device plugin must accept counts above 1."""

    name = "resource"

    def place(self, slices: int) -> Placement:
        share = Fraction(slices, self.config.slices_per_gpu)
        return Placement(self.config.shared_resource, slices, {}, share)
