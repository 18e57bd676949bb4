"""The settings every configuration-dependent command takes: flags over the environment.

`castslice preview`, `webhook`, `policy` and `doctor` read the same CASTSLICE_*
variables as the function; each flag here sets one of them for the command, so
`--backend gke` is CASTSLICE_BACKEND=gke. Without a flag the environment decides, and
without either the function's default does, as it would in a deployment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import NamedTuple

from castslice.environment import KINDS, choices, load_config, unknown_settings
from castslice.settings import table
from castslice.settings.config import Config, ConfigError
from castslice.settings.table import Kind


class Setting(NamedTuple):
    """A setting of the table that has a flag."""

    variable: str
    flag: str
    metavar: str
    help: str
    choices: tuple[str, ...] | None


# Every setting of the table with a flag, its placeholder the kind's, its choices the table's.
SETTINGS = tuple(
    Setting(
        entry.variable,
        entry.flag,
        KINDS[entry.kind].metavar,
        entry.flag_help,
        choices(entry) if entry.kind is Kind.CHOICE else None,
    )
    for entry in table.SETTINGS
    if entry.flag is not None
)


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
    """The configuration of this command: its flags, then the environment.

    A CASTSLICE_* name that is no setting is named on stderr, as the server logs it: the
    command would otherwise check other settings than the ones meant.
    """
    try:
        config = load_config(effective_environment(args, environ))
    except ConfigError as error:
        message = str(error)
        for setting in SETTINGS:
            if getattr(args, _dest(setting)) is not None and message.startswith(setting.variable):
                message = setting.flag + message[len(setting.variable) :]
        raise ConfigError(message) from None
    for name in unknown_settings(environ):
        print(
            f"castslice: warning: {name.name} is not a setting and is ignored ({name.hint})",
            file=sys.stderr,
        )
    return config


def _dest(setting: Setting) -> str:
    return "setting_" + setting.flag.removeprefix("--").replace("-", "_")
