"""`castslice`, the command line: one module per command, the same code as the function.

Each command module has `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`. Exit codes: 0 success, 1 a check or `--strict` found a
problem, 2 bad input or usage, as documented in the README.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import ConfigError

# Command name -> module in this package; imported only when run, so
# `castslice preview` never pays for the Kubernetes client `doctor` needs.
COMMANDS = {
    "preview": "preview",
    "webhook": "webhook",
    "policy": "policy",
    "doctor": "doctor",
}

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """Bad input a user can fix; the message names it. Exits with status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="castslice",
        description="Preview, register and check CastSlice, the GPU-sharing admission webhook. "
        "Configuration comes from the same CASTSLICE_* environment variables as the function.",
    )
    parser.add_argument("--version", action="version", version=f"castslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = {}
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{module_name}":
                raise
            continue
        modules[name] = module
        command = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except ConfigError as error:
        print(f"castslice: invalid configuration: {error}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as error:
        print(f"castslice {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # `castslice preview ... | head`: the reader left; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
