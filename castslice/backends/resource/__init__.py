"""The seed's backend: the slice count itself, as a device plugin's shared resource."""

from __future__ import annotations

from fractions import Fraction

from castslice.backends.base import Backend, Placement


class ResourceBackend(Backend):
    """`CASTSLICE_SHARED_RESOURCE: s`; the device plugin must accept counts above 1."""

    name = "resource"

    def place(self, slices: int) -> Placement:
        share = Fraction(slices, self.config.slices_per_gpu)
        return Placement(self.shared_resource, slices, {}, share)

    def setup_hint(self) -> str:
        return (
            f"make the device plugin advertise {self.shared_resource} in slices, or set "
            "CASTSLICE_SHARED_RESOURCE to the resource your nodes offer"
        )
