"""Backends: how a slice count becomes resources and placement on the cluster's nodes.

The slice resolution decides `s`; a backend's placer turns `s` into what each GPU
container asks for and which nodes the Pod must land on (placer.Placer): all the webhook
asks. The tools' questions that depend on the kind of GPU sharing are answered by each
backend's `tools` module (roles.py, tools.py), which this table never loads. A new backend
is one package here, owning all of itself, and one row in PLACERS and in tools.TOOLS.
"""

from __future__ import annotations

from castslice.backends.dra import DraPlacer
from castslice.backends.gke import GkePlacer
from castslice.backends.mig import SETTING_CHOICES as MIG_SETTING_CHOICES
from castslice.backends.mig import MigPlacer, foreign_profiles
from castslice.backends.nvidia import NvidiaPlacer
from castslice.backends.placer import LeftAlone, Placement, Placer, sharing_degree, whole_gpus
from castslice.backends.resource import ResourcePlacer
from castslice.settings.config import Config

PLACERS: dict[str, type[Placer]] = {
    "resource": ResourcePlacer,
    "nvidia": NvidiaPlacer,
    "gke": GkePlacer,
    "dra": DraPlacer,
    "mig": MigPlacer,
}

# The choices of settings whose values name what the backends define (the settings layer
# cannot import them): the backends' names and the MIG profile table's entries.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "CASTSLICE_BACKEND": tuple(PLACERS),
    **MIG_SETTING_CHOICES,
}

__all__ = [
    "PLACERS",
    "SETTING_CHOICES",
    "LeftAlone",
    "Placement",
    "Placer",
    "foreign_profiles",
    "placer_class",
    "placer_for",
    "sharing_degree",
    "whole_gpus",
]


def placer_class(name: str) -> type[Placer]:
    return PLACERS[name]


def placer_for(config: Config) -> Placer:
    return PLACERS[config.backend](config)
