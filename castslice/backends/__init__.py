"""Backends: how a slice count becomes resources and placement on the cluster's nodes.

The slice resolution decides `s`; a backend turns `s` into what each GPU
container asks for and which nodes the Pod must land on, and answers every other
question that depends on the kind of GPU sharing (see base.Backend). A new
backend is one package here, owning all of itself, and one row in BACKENDS.
"""

from __future__ import annotations

from castslice.backends.base import (
    Backend,
    ClaimTemplates,
    GpuHold,
    GpuLayout,
    GpuPlace,
    GpuView,
    LaidOut,
    LeftAlone,
    NodeCheck,
    Placement,
    TemplateCounts,
    sharing_degree,
    whole_gpus,
)
from castslice.backends.dra import DraBackend
from castslice.backends.gke import GkeBackend
from castslice.backends.mig import SETTING_CHOICES as MIG_SETTING_CHOICES
from castslice.backends.mig import MigBackend
from castslice.backends.nvidia import NvidiaBackend
from castslice.backends.resource import ResourceBackend
from castslice.settings.config import Config

BACKENDS: dict[str, type[Backend]] = {
    "resource": ResourceBackend,
    "nvidia": NvidiaBackend,
    "gke": GkeBackend,
    "dra": DraBackend,
    "mig": MigBackend,
}

# The choices of settings whose values name what the backends define (the settings layer
# cannot import them): the backends' names and the MIG profile table's entries.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "CASTSLICE_BACKEND": tuple(BACKENDS),
    **MIG_SETTING_CHOICES,
}

__all__ = [
    "BACKENDS",
    "SETTING_CHOICES",
    "Backend",
    "ClaimTemplates",
    "GpuHold",
    "GpuLayout",
    "GpuPlace",
    "GpuView",
    "LaidOut",
    "LeftAlone",
    "NodeCheck",
    "Placement",
    "TemplateCounts",
    "backend_class",
    "backend_for",
    "extender_backends",
    "sharing_degree",
    "whole_gpus",
]


def backend_class(name: str) -> type[Backend]:
    return BACKENDS[name]


def backend_for(config: Config) -> Backend:
    return BACKENDS[config.backend](config)


def extender_backends() -> list[str]:
    """The backends whose GPUs the scheduler extender can score (`Backend.extender_gpus`)."""
    return sorted(name for name, backend in BACKENDS.items() if backend.extender_gpus is not None)
