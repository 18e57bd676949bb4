"""`castslice policy`: CastSlice as admission policies the API server runs (Kubernetes 1.36+)."""

from __future__ import annotations

import argparse
import sys

from castslice.backends import placer_for
from castslice.cli import CommandError
from castslice.cli.flags import config_from
from castslice.render.admission_policies import render_json, render_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="yaml (default): the four policies and their four bindings as a multi-document "
        "stream with comments; "
        "json: a List",
    )


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    refusal = placer_for(config).policy_mode_refusal
    if refusal:
        raise CommandError(refusal)
    if config.scheduler_name:
        # The policies write no spec.schedulerName: they would send Pods to devices that
        # another scheduler may also be allocating.
        raise CommandError(
            "CASTSLICE_SCHEDULER_NAME is set, and policy mode does not send Pods to another "
            "scheduler; use the webhook (castslice webhook)"
        )
    if config.gpu_memory is not None:
        # Each container's env would need its user-set values found and replaced one by
        # one, which the policies' JSON Patch does not do.
        raise CommandError(
            "CASTSLICE_GPU_MEMORY is set, and policy mode does not write GPU memory limits "
            "(NVIDIA_GPU_MEMORY_REQUEST, NVIDIA_GPU_MEMORY_LIMIT); use the webhook "
            "(castslice webhook)"
        )
    render = render_json if args.output == "json" else render_yaml
    sys.stdout.write(render(config))
    return 0
