"""The settings every configuration-dependent command takes: flags over the environment.

`castslice preview`, `webhook`, `policy` and `doctor` read the same CASTSLICE_*
variables as the function; each flag here sets one of them for the command, so
`--backend gke` is CASTSLICE_BACKEND=gke. Without a flag the environment decides, and
without either the function's default does, as it would in a deployment.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import NamedTuple

from castslice.backends import BACKENDS, SETTING_CHOICES
from castslice.environment import load_config
from castslice.settings import table
from castslice.settings.config import (
    MIG_FITS,
    MIG_STACKS,
    MIG_WHOLE_GPU,
    SHARING_STRATEGIES,
    Config,
    ConfigError,
)


class Setting(NamedTuple):
    variable: str
    metavar: str
    help: str
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        flag = table.setting(self.variable).flag
        assert flag is not None, self.variable
        return flag


SETTINGS = (
    Setting("CASTSLICE_BACKEND", "NAME", "how Pods are placed", tuple(BACKENDS)),
    Setting("CASTSLICE_SLICES_PER_GPU", "N", "slices that make one GPU"),
    Setting(
        "CASTSLICE_SHARING_DEGREES", "M,...", "clients per GPU the sharing nodes offer, e.g. 2,4"
    ),
    Setting("CASTSLICE_SHARING_STRATEGY", "NAME", "time-slicing or mps", SHARING_STRATEGIES),
    Setting("CASTSLICE_SHARED_RESOURCE", "NAME", "the resource written"),
    Setting("CASTSLICE_GPU_RESOURCE", "NAME", "the resource rewritten"),
    Setting("CASTSLICE_PRESETS", "T=N,...", "workload types and their slices"),
    Setting(
        "CASTSLICE_DEFAULT_SLICES", "N", "slices when no annotation or policy rule gives a count"
    ),
    Setting("CASTSLICE_MAX_SLICE_RATIO", "N", "the most slices a Pod may ask for"),
    Setting(
        "CASTSLICE_DRA_DEVICE_CLASS", "NAME", "the DeviceClass the dra backend's claims name"
    ),
    Setting(
        "CASTSLICE_DRA_CAPACITY", "NAME",
        "the device capacity the dra backend's claims request shares of",
    ),
    Setting(
        "CASTSLICE_DRA_GPU_MEMORY", "QUANTITY",
        "one GPU's memory, e.g. 80Gi: dra claims then request their share of it",
    ),
    Setting(
        "CASTSLICE_MIG_GPU_MODELS", "MODEL,...",
        "the MIG nodes' GPU models: " + ", ".join(SETTING_CHOICES["CASTSLICE_MIG_GPU_MODELS"]),
    ),
    Setting("CASTSLICE_MIG_PROFILES", "PROFILE,...", "the MIG profiles the nodes offer"),
    Setting("CASTSLICE_MIG_STACK", "NAME", "how nodes offer MIG instances", MIG_STACKS),
    Setting(
        "CASTSLICE_MIG_FIT", "RULE",
        "when a MIG instance holds a share: memory, or memory and compute (strict)", MIG_FITS,
    ),
    Setting(
        "CASTSLICE_MIG_WHOLE_GPU", "WHERE", "where one-GPU Pods go: gpu or 7g", MIG_WHOLE_GPU
    ),
)  # fmt: skip


def add_settings(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "configuration",
        "Each flag overrides its CASTSLICE_* variable; without either, the function's "
        "default applies (backend: resource). The effective backend is printed with the output.",
    )
    for setting in SETTINGS:
        group.add_argument(
            setting.flag,
            dest=_dest(setting),
            metavar=setting.metavar,
            choices=setting.choices,
            help=f"{setting.help} (default: ${setting.variable}, else the function's default)",
        )


def effective_environment(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the variables the flags set."""
    chosen = {s.variable: getattr(args, _dest(s)) for s in SETTINGS}
    return {**environ, **{name: value for name, value in chosen.items() if value is not None}}


def config_from(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Config:
    """The configuration of this command: its flags, then the environment."""
    try:
        return load_config(effective_environment(args, environ))
    except ConfigError as error:
        message = str(error)
        for setting in SETTINGS:
            if getattr(args, _dest(setting)) is not None and message.startswith(setting.variable):
                message = setting.flag + message[len(setting.variable) :]
        raise ConfigError(message) from None


def _dest(setting: Setting) -> str:
    return "setting_" + setting.flag.removeprefix("--").replace("-", "_")
