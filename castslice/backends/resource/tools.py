"""What the tools ask of the resource backend (castslice/backends/roles.py)."""

from __future__ import annotations

from castslice.backends.answers import Tools
from castslice.backends.resource import ResourcePlacer


class ResourceTools(ResourcePlacer, Tools):
    def setup_hint(self) -> str:
        return (
            f"make the device plugin advertise {self.shared_resource} in slices, or set "
            "CASTSLICE_SHARED_RESOURCE to the resource your nodes offer"
        )
