"""The seed's backend: the slice count itself, as a device plugin's shared resource."""

from __future__ import annotations

from fractions import Fraction

from castslice.backends.placer import Placement, Placer


class ResourcePlacer(Placer):
    """`CASTSLICE_SHARED_RESOURCE: s`; the device plugin must accept counts above 1."""

    name = "resource"

    def place(self, slices: int) -> Placement:
        share = Fraction(slices, self.config.slices_per_gpu)
        placement = Placement(self.shared_resource, slices, {}, share)
        if slices == 1:
            return self.with_memory(placement, share)
        if self.config.gpu_memory is None:
            return placement
        # The device plugin's default allocation policy (distributed) spreads a container's
        # units over the node's GPUs, as many on each as it happens to find free: no limit
        # per GPU is both within what the container holds there and not below it.
        caveat = (
            f"resource: GPU memory not limited: the Pod's {slices} units may lie on several "
            "GPUs, in parts CastSlice cannot know"
        )
        return placement._replace(caveats=(caveat,))
