"""`castslice report`: who shares which GPU, and what sharing saved (read-only).

Exit status: 0 the report was printed (or the exporter stopped), 2 the cluster or the
configuration could not be used (the message says why).
"""

from __future__ import annotations

import argparse
import json

import yaml

from castslice.backends.tools import gpu_accounts_for
from castslice.cli import EXIT_OK, CommandError
from castslice.cli.doctor import add_cluster_arguments, cluster_from
from castslice.cli.flags import config_from
from castslice.contract.cluster import ApiError, Unreachable
from castslice.inspect.report import Report, read_report, to_document
from castslice.inspect.report.table import render

# What the report reads; named when the API server refuses one of them.
_RIGHTS = "list nodes and pods, get replicasets and jobs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument(
        "-n", "--namespace", metavar="NAME", help="only the Pods of this namespace (default: all)"
    )
    parser.add_argument(
        "-l", "--selector", metavar="SELECTOR", help="only the Pods this label selector selects"
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), default="text", help="output format"
    )
    parser.add_argument(
        "--serve",
        type=int,
        metavar="PORT",
        help="instead of printing, serve the saving as Prometheus metrics on PORT, "
        "read from the cluster on each scrape",
    )
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address --serve listens on (default: 127.0.0.1; 0.0.0.0 in a Pod)",
    )


def run(args: argparse.Namespace) -> int:
    if args.serve is not None and not 1 <= args.serve <= 65535:
        raise CommandError(f"--serve must be a port from 1 to 65535, not {args.serve}")
    backend = gpu_accounts_for(config_from(args))
    cluster = cluster_from(args, "report")
    api = cluster.api

    def read() -> Report:
        return read_report(cluster, backend, args.namespace, args.selector)

    try:
        if args.serve is not None:
            from castslice.inspect.report.exporter import serve

            try:
                serve(args.serve, args.address, read)
            except OSError as error:
                raise CommandError(
                    f"cannot serve on {args.address}:{args.serve}: {error.strerror}"
                ) from None
            return EXIT_OK
        try:
            report = read()
        except Unreachable as error:
            raise CommandError(f"cannot use the API server at {error}") from None
        except ApiError as error:
            raise CommandError(_refusal(error, args.selector, backend.report_rights())) from None
    finally:
        api.close()
    context = {"server": cluster.server, "backend": backend.name}
    if args.output == "json":
        print(json.dumps(to_document(report, context), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(to_document(report, context), sort_keys=False), end="")
    else:
        print(render(report, _header(cluster.server, backend.describe(), args)), end="")
    return EXIT_OK


def _header(server: str, backend: str, args: argparse.Namespace) -> str:
    scope = [f"namespace {args.namespace}" if args.namespace else "all namespaces"]
    if args.selector:
        scope.append(f"Pods matching {args.selector}")
    return f"castslice report: {server}, {backend}; {', '.join(scope)}"


def _refusal(error: ApiError, selector: str | None, extra_rights: str) -> str:
    if error.status == 400 and selector:
        return f"the API server refused --selector {selector!r}: {error.message}"
    rights = f"{_RIGHTS}, {extra_rights}" if extra_rights else _RIGHTS
    return f"the API server refused a read ({error.status} {error.message}); it needs: {rights}"
