"""`castslice`, the command line: one module per command, the same code as the function.

Each command module has `add_arguments(parser)` and `run(args) -> int`; its
one-line help stands in COMMANDS. Exit codes: 0 success, 1 a check or `--strict` found a
problem, 2 bad input or usage, as documented in the README.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from castslice import __version__
from castslice.cli.flags import add_settings
from castslice.settings.config import ConfigError

# Command (and module in this package) -> its help. Only the module of the command
# being run is imported, so `castslice preview` never loads the Kubernetes client.
COMMANDS = {
    "preview": "show manifests as CastSlice would leave the Pods they create (offline)",
    "webhook": "print the MutatingWebhookConfiguration (YAML) that registers CastSlice for a "
    "URL or a Service, with matchConditions generated from the enrolment policy",
    "policy": "print a MutatingAdmissionPolicy and ValidatingAdmissionPolicies (with bindings) "
    "that do what the webhook does, for clusters on Kubernetes 1.36+",
    "claim-templates": "print the ResourceClaimTemplates the dra backend's Pods claim from, "
    "for the namespaces given",
    "plan": "recommend the backend settings that run a workload (manifests, a live cluster's "
    "Pods or a trace) on the fewest GPUs, against today's and no sharing",
    "doctor": "check a live installation: registration, endpoint, a dry-run Pod, nodes, "
    "Pending Pods, quotas and fail-open calls (read-only)",
    "report": "show who shares which GPU and how many GPUs sharing saved, by namespace and "
    "workload, with the Pending Pods and why (read-only; --serve: the same as metrics)",
    "extender": "serve the fragmentation-aware kube-scheduler extender (prioritize only; "
    "dra backend), a process of its own beside the webhook",
}

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """Bad input a user can fix; the message names it. Exits with status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="castslice",
        description="Preview, register and check CastSlice, the GPU-sharing admission webhook. "
        "Configuration comes from the same CASTSLICE_* environment variables as the function, "
        "or from each command's flags (--backend, ...).",
    )
    parser.add_argument("--version", action="version", version=f"castslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    arguments = list(sys.argv[1:] if argv is None else argv)
    chosen = next((word for word in arguments if not word.startswith("-")), None)
    module = None
    for name, help_text in COMMANDS.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
            module.add_arguments(command)
            # Every command depends on the configuration: one set of flags for all.
            add_settings(command)
    args = parser.parse_args(arguments)
    if module is None:
        # argparse accepted a command that is not the first word without a dash.
        parser.error(f"put the command ({args.command}) before its arguments")
    try:
        return module.run(args)
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
