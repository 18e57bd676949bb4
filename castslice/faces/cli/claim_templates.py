"""`castslice claim-templates`: the ResourceClaimTemplates the `dra` backend's Pods claim from.

Apply the output in every namespace with opted-in Pods; a Pod whose template
is missing stays Pending (`castslice doctor` names it).
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from castslice.backends import backend_for
from castslice.faces.cli import EXIT_OK, CommandError
from castslice.faces.cli.settings import config_from
from castslice.settings.names import is_dns_label, parse_bounded_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="a namespace to render the templates in; repeat for more (default: none set, "
        "so `kubectl apply -n NAMESPACE -f -` chooses)",
    )
    parser.add_argument(
        "--slices",
        metavar="COUNTS",
        help="slice counts to render, comma-separated, as in 1,2,4 (default: every count the "
        "presets, the enrolment policy, the default and CASTSLICE_MAX_SLICE_RATIO can give)",
    )
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    for namespace in args.namespace:
        if not is_dns_label(namespace):
            raise CommandError(f"--namespace {namespace!r} is not a namespace name")
    templates = backend_for(config).claim_templates()
    if templates is None:
        raise CommandError(
            f"CASTSLICE_BACKEND is {config.backend}, whose Pods claim no devices; "
            "claim templates are for a backend that does (--backend dra)"
        )
    if args.slices is None:
        counts, note = templates.default_counts()
    else:
        counts = templates.chosen_counts(_slice_counts(args.slices, config.max_slice_ratio))
        note = None
    if note:
        print(f"castslice claim-templates: {note}", file=sys.stderr)
    manifests = templates.manifests(args.namespace or [None], counts)
    if args.output == "json":
        document = {"apiVersion": "v1", "kind": "List", "items": manifests}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump_all(manifests, sort_keys=False))
    return EXIT_OK


def _slice_counts(text: str, most: int) -> list[int]:
    counts = []
    for entry in text.split(","):
        count = parse_bounded_int(entry.strip(), most)
        if count is None:
            raise CommandError(
                f"--slices: {entry.strip()!r} is not a slice count; want whole numbers from 1 "
                f"to {most} (CASTSLICE_MAX_SLICE_RATIO) separated by commas, as in 1,2,4"
            )
        counts.append(count)
    return counts
