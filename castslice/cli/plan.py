"""`castslice plan`: which backend settings run a workload mix on the fewest GPUs.

The workload comes from manifests (`-f`, read and rewritten as `castslice preview`
does), from the Pods of a live cluster (`--kubeconfig`, read-only, as doctor reads
it) or from a task list shaped as the openb trace (`--trace`). The arithmetic is
castslice.inspect.plan's, which asks the backends how each Pod is placed; the count of
GPUs the scheduler reaches (with the extender, or on its own scores) is
castslice.extender.placing's.

Exit status: 0 done, 2 bad input (the message names the file, row or cluster) or
configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from castslice.cli import EXIT_OK, CommandError
from castslice.cli.flags import config_from, effective_environment
from castslice.cli.manifests import ManifestError, objects, read_documents
from castslice.cli.preview import POD_KIND, manifest_kind, preview
from castslice.contract.cluster import ApiError, Cluster, Unreachable
from castslice.decision.admission import Admission
from castslice.decision.workloads import kind_of, read_templates
from castslice.extender.fragmentation import WHOLE
from castslice.extender.placing import Scheduled, Scoring
from castslice.inspect.plan import (
    GPUS_PER_NODE,
    MOST_ALLOCATED_PROFILE,
    Estimate,
    Nodes,
    Plan,
    Task,
    WorkloadError,
    environment_of,
    instance_pool,
    nodes_from_list,
    plan,
    pool_label,
    tasks_from_pod,
    tasks_from_trace,
    uniform_nodes,
)
from castslice.render.yaml_text import dump_yaml
from castslice.settings.config import Config

# Pods that are done hold no GPU.
_FINISHED = ("Succeeded", "Failed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "GPUs are counted as if each group of alike Pods packed perfectly onto GPUs of its "
        "own: a floor, without node boundaries, CPU or memory. Beside it, the GPUs the "
        "recommendation needs once kube-scheduler with CastSlice's extender places each "
        "task in turn on nodes (--nodes, or --gpus-per-node): with departures where the "
        "task list gives deletion times. Exit status: 0 done, 2 bad input or configuration "
        "(the message names it)."
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE|DIR|-",
        help="manifests, as castslice preview reads them; a workload counts its replicas",
    )
    source.add_argument(
        "--trace",
        metavar="CSV",
        help="a task list with num_gpu and gpu_milli columns (Alibaba's openb trace shape)",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="plan for the Pods of this cluster (read-only; '' for $KUBECONFIG, "
        "~/.kube/config or in-cluster)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument(
        "-n",
        "--namespace",
        help="manifests: the namespace of those that name none (default: default); "
        "a cluster: only its Pods in this namespace (default: every namespace)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml", "markdown"),
        default="table",
        help="output format (markdown: the trade-offs table docs/backends.md shows)",
    )
    parser.add_argument(
        "--plot", metavar="FILE.svg", help="also draw the GPUs each candidate needs as an SVG"
    )
    parser.add_argument(
        "--nodes",
        metavar="CSV",
        help="the nodes the scheduler places the workload on: a node list with sn, cpu_milli, "
        "memory_mib, gpu and model columns (openb's node list shape); the count takes as "
        "many as it needs, in their mix",
    )
    parser.add_argument(
        "--gpus-per-node",
        type=_positive,
        default=GPUS_PER_NODE,
        metavar="N",
        help=f"without --nodes: nodes of N GPUs, with room for any task's CPU and memory "
        f"(default {GPUS_PER_NODE})",
    )
    parser.add_argument(
        "--no-departures",
        action="store_true",
        help="place every task as if none left (a task list's deletion_time ignored), as the "
        "FGD paper's evaluation does",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want a whole number of 1 or more")
    return value


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    try:
        tasks = _tasks(args, config)
    except (ManifestError, WorkloadError) as error:
        raise CommandError(str(error)) from None
    if not any(task.gpus for task in tasks):
        raise CommandError("the workload asks for no GPUs: nothing to plan")
    # A backend the user named (flag or variable) is the nodes': the plan keeps to it.
    named = effective_environment(args, os.environ).get("CASTSLICE_BACKEND") is not None
    try:
        # The trade-offs table shows no placement: it is not counted for it.
        result = plan(config, tasks, named, None if args.output == "markdown" else _nodes(args))
    except WorkloadError as error:
        raise CommandError(str(error)) from None
    if args.output == "json":
        print(json.dumps(result.as_dict(), indent=2))
    elif args.output == "yaml":
        sys.stdout.write(dump_yaml(result.as_dict()))
    elif args.output == "markdown":
        sys.stdout.write(tradeoffs(result))
    else:
        sys.stdout.write(table(result))
    if args.plot:
        try:
            Path(args.plot).write_text(chart(result))
        except OSError as error:
            raise CommandError(f"cannot write --plot {args.plot}: {error.strerror}") from None
    return EXIT_OK


def _csv_text(flag: str, path: str) -> str:
    """The text of the CSV file a flag names, or an error naming the flag and the file."""
    try:
        return Path(path).read_text()
    except OSError as error:
        raise CommandError(f"cannot read {flag} {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise CommandError(f"{flag} {path} is not a text CSV file") from None


def _nodes(args: argparse.Namespace) -> Nodes:
    """The nodes the scheduler places the workload on: the node list, or nodes of
    --gpus-per-node GPUs."""
    departures = not args.no_departures
    if args.nodes is None:
        described = f"of {args.gpus_per_node} GPUs with room for any task's CPU and memory"
        return Nodes(uniform_nodes(args.gpus_per_node), described, departures)
    text = _csv_text("--nodes", args.nodes)
    try:
        kinds = nodes_from_list(text, args.nodes)
    except WorkloadError as error:
        raise CommandError(str(error)) from None
    return Nodes(kinds, f"from the node list {args.nodes}, in its mix", departures)


def _tasks(args: argparse.Namespace, config: Config) -> list[Task]:
    if args.trace is not None:
        return tasks_from_trace(_csv_text("--trace", args.trace), args.trace)
    if args.filename is not None:
        return _manifest_tasks(args.filename, args.namespace, config)
    return _cluster_tasks(args.kubeconfig or None, args.context, args.namespace, config)


def _manifest_tasks(paths: Sequence[str], namespace: str | None, config: Config) -> list[Task]:
    """Each Pod as CastSlice leaves it, and each workload's Pods times their replicas; each
    named as preview names it."""
    admission = Admission(config)
    tasks: list[Task] = []
    for document in read_documents(paths, sys.stdin.buffer):
        for where, manifest in objects(document):
            shown = preview(admission, where, manifest, namespace)
            after = shown.after
            kind = manifest_kind(after)
            if kind == POD_KIND:
                tasks += tasks_from_pod(after, config, shown.reference)
                continue
            workload = kind_of(kind)
            if workload is None:
                continue
            for template in read_templates(workload, after):
                if template.pod is not None:
                    site = template.site
                    name = f"{shown.reference}: {site.label}" if site.label else shown.reference
                    copies = _replicas(after, site.steps[:-1])
                    tasks += tasks_from_pod(template.pod, config, name) * copies
    return tasks


def _replicas(workload: dict[str, Any], around: Sequence[str | int]) -> int:
    """How many Pods a template makes at once: the `replicas` beside it (an operator's
    replica spec: PyTorchJob's Worker), else the workload's `replicas`, or a Job's
    `parallelism`."""
    holder: Any = workload
    for step in around:
        holder = holder[step]
    value = holder.get("replicas") if isinstance(holder, dict) and around else None
    if isinstance(value, int) and value >= 0:
        return value
    spec = workload.get("spec") or {}
    for key in ("replicas", "parallelism"):
        value = spec.get(key)
        if isinstance(value, int) and value >= 0:
            return value
    return 1


def _cluster_tasks(
    kubeconfig: str | None, context: str | None, namespace: str | None, config: Config
) -> list[Task]:
    # Imported here: only this source needs the Kubernetes client.
    from castslice.cli.doctor import connect

    api = connect(kubeconfig, context)
    try:
        cluster = Cluster(api)
        pods = [
            pod
            for pod in cluster.list(
                f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
            )
            if (pod.get("status") or {}).get("phase") not in _FINISHED
        ]
    except Unreachable as error:
        raise CommandError(f"cannot use the API server at {error}") from None
    except ApiError as error:
        raise CommandError(f"cannot list Pods: {error}") from None
    finally:
        api.close()
    return [task for pod in pods for task in tasks_from_pod(pod, config)]


def _row(estimate: Estimate, result: Plan) -> list[str]:
    pools = ", ".join(
        f"{pool.label}: {pool.gpus}"
        + (f" ({pool.gpus / estimate.gpus:.0%})" if estimate.gpus else "")
        for pool in estimate.pools
    )
    return [
        ("* " if estimate.recommended else "  ") + estimate.name,
        str(estimate.gpus),
        f"{estimate.gpus - result.today.gpus:+d}",
        f"{result.no_sharing.gpus - estimate.gpus:d}",
        f"{estimate.rounded_up} by {float(estimate.rounded_by):.1f}",
        pools,
        gets(estimate),
    ]


def gets(estimate: Estimate) -> str:
    """What the opted-in Pods are guaranteed, with how many get each."""
    return "; ".join(f"{what} ({pods})" for what, pods in estimate.gets)


def table(result: Plan) -> str:
    header = [
        "configuration",
        "GPUs",
        "vs today",
        "saved",
        "rounded up (GPUs)",
        "GPUs per pool",
        "each opted-in Pod gets (Pods)",
    ]
    rows = [_row(result.no_sharing, result), _row(result.today, result)]
    rows += [_row(item, result) for item in result.candidates]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines += ["", *summary(result)]
    return "\n".join(lines) + "\n"


def summary(result: Plan) -> list[str]:
    """The recommendation, complete: every variable to set over today's, what else must
    change with them; the other backends only as what their nodes would need; the warnings
    of today's settings and of the recommended ones."""
    best, today, without = result.best, result.today, result.no_sharing
    lines = [
        f"{result.tasks} tasks, {result.opted_in} opted in; GPU demand {float(result.demand):.1f}, "
        f"{_gpus(result.ideal)} if every share packed perfectly."
    ]
    if result.keep:
        lines.append(
            f"Recommended: keep the current settings ({_settings(today.settings)}): "
            f"{_gpus(today.gpus)}, {_fewer(without.gpus - today.gpus)} than without sharing; "
            f"{result.keep}."
        )
        # What today's count assumes of the nodes (how a backend that cuts GPUs cuts them).
        lines += [f"  with {note}" for note in today.notes]
    else:
        lines.append(
            f"Recommended: {best.name}: {_gpus(best.gpus)}, {_fewer(today.gpus - best.gpus)} "
            f"than today, {_fewer(without.gpus - best.gpus)} than without sharing. Set, over "
            "today's settings:"
        )
        lines += [f"  {key}={value}" for key, value in best.environment.items()]
        lines += [f"  and {note}" for note in best.notes]
    for other in result.elsewhere:
        settings = " ".join(f"{key}={value}" for key, value in other.environment.items())
        lines.append(
            f"If your nodes offered {other.settings['backend']}: {other.name} ({settings}): "
            f"{_gpus(other.gpus)}" + (f"; and {'; and '.join(other.notes)}" if other.notes else "")
        )
    lines += scheduled_lines(result)
    lines += memory_lines(best)
    lines += cut_lines(result)
    advised, why = result.extender_advice
    lines.append(f"Scheduler extender: {'worth' if advised else 'not worth'} deploying: {why}.")
    seen: set[str] = set()
    for item in [today] if best is today else [today, best]:
        for warning in item.warnings:
            if warning not in seen:
                seen.add(warning)
                lines.append(f"Warning: {item.name}: {warning}")
    return lines


def scheduled_lines(result: Plan) -> list[str]:
    """What the recommended configuration needs once kube-scheduler places the workload
    (with the extender, or on its own scores), then with its MostAllocated strategy, each
    beside what perfect packing needs."""
    placed = result.scheduled
    if placed is None:
        return (
            [f"Placed by kube-scheduler: not counted: {result.unscheduled}."]
            if result.unscheduled
            else []
        )
    lines = [_count_line(result, placed)]
    if result.packed is not None:
        lines.append(_count_line(result, result.packed))
    return lines


# How each count's line names what ranked the nodes.
_SCHEDULERS: dict[Scoring, str] = {
    "extender": "kube-scheduler with the extender",
    "kube-scheduler": "kube-scheduler on its own scores (the extender scores no such GPUs)",
    "most-allocated": (
        f"kube-scheduler with NodeResourcesFit's MostAllocated strategy and no extender "
        f"({MOST_ALLOCATED_PROFILE})"
    ),
}


def _count_line(result: Plan, placed: Scheduled) -> str:
    how = "with its departures" if placed.departures else "every task staying"
    fewer = f"; one node fewer leaves {placed.short} Pending" if placed.short else ""
    if placed.pools:
        cut = any(instance_pool(part.pool) for part in placed.pools)
        fewer = (
            "; "
            + ("each instance pool's nodes with all their GPUs cut into its instances; " * cut)
            + "; ".join(
                f"pool '{pool_label(part.pool)}': {_gpus(part.gpus)} on {_node_count(part.nodes)}"
                + (f" (one fewer leaves {part.short} Pending)" if part.short else "")
                for part in sorted(placed.pools, key=lambda part: part.pool == WHOLE)
            )
        )
    packed = (
        f"{_gpus(placed.floor)} if every share packed perfectly at the busiest moment"
        if placed.departures
        else f"{placed.floor / placed.gpus:.0%} of them if every share packed perfectly"
    )
    return (
        f"Placed by {_SCHEDULERS[placed.scored_by]} ({result.best.name}, in process, in the "
        f"input's order, {how}): {_gpus(placed.gpus)} on {_node_count(placed.nodes)} {result.nodes}"
        f"{fewer}; {packed}."
    )


def memory_lines(best: Estimate) -> list[str]:
    """The GPU memory the recommended configuration's Pods request, and who may burst."""
    memory = best.memory
    if memory is None or not memory.requested:
        return []
    bursts = (
        f"; {memory.bursting} Pod{'s' if memory.bursting != 1 else ''} may burst "
        f"{memory.burst} MiB beyond their requests in all, which no GPU reserves"
        if memory.bursting
        else "; no Pod bursts"
    )
    return [
        f"GPU memory: {memory.requested} MiB requested in all, counted so that no GPU's "
        f"requests pass its {memory.gpu} MiB{bursts}."
    ]


def cut_lines(result: Plan) -> list[str]:
    """For a backend that cuts GPUs into instances: its best way and S, with the GPUs that
    way needs at each S tried (why that S)."""
    lines = []
    for backend, best in result.per_backend.items():
        layout = best.settings.get("layout")
        if layout is None:
            continue
        same = [
            item
            for item in result.candidates
            if item.settings["backend"] == backend and item.settings.get("layout") == layout
        ]
        counts = ", ".join(f"S={item.settings['slicesPerGpu']}: {item.gpus}" for item in same)
        settings = " ".join(f"{key}={value}" for key, value in best.environment.items())
        settings = settings or "today's settings"
        lines.append(
            f"Cutting GPUs ({backend}): {best.name} ({settings}): "
            f"{_gpus(best.gpus)}, the fewest of its ways and S; {layout} needs {counts} GPUs."
        )
    return lines


def tradeoffs(result: Plan) -> str:
    """The trade-offs as a Markdown table: each backend's best configuration, the sharing
    pools' under either strategy, and each way of cutting GPUs the table shows; the GPUs
    each needs and what each opted-in Pod is guaranteed of a GPU's compute and memory."""
    best = {item.name for item in [*result.per_backend.values(), *result.twins]}
    shown = [item for item in result.candidates if item.name in best or "layout" in item.settings]
    rows = [
        "| configuration | GPUs | saved vs no sharing | each opted-in Pod gets (Pods) |",
        "|---|---:|---:|---|",
    ]
    for item in [result.no_sharing, *shown]:
        name = item.name + (" (recommended)" if item.recommended else "")
        saved = result.no_sharing.gpus - item.gpus
        got = gets(item).replace("|", "\\|") or "whole GPUs"
        rows.append(f"| {name} | {item.gpus} | {saved} | {got} |")
    return "\n".join(rows) + "\n"


def _settings(settings: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in environment_of(settings).items())


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def _node_count(count: int) -> str:
    return f"{count} node" + ("" if count == 1 else "s")


def _fewer(count: int) -> str:
    return f"{count} fewer" if count >= 0 else f"{-count} more"


def chart(result: Plan) -> str:
    """A horizontal bar per configuration: the GPUs it needs, perfect packing as a line."""
    rows = [result.no_sharing, result.today, *result.candidates]
    bar_height, left, width = 22, 190, 460
    top = max(item.gpus for item in rows) or 1
    scale = width / top
    height = 40 + bar_height * len(rows) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 80}" '
        f'height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="14">GPUs needed ({result.tasks} tasks)</text>',
    ]
    for index, item in enumerate(rows):
        y = 35 + index * bar_height
        colour = "#2b8a3e" if item.recommended else "#5c7cfa"
        parts += [
            f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{_escape(item.name)}</text>',
            f'<rect x="{left}" y="{y + 3}" width="{item.gpus * scale:.1f}" '
            f'height="{bar_height - 6}" fill="{colour}"/>',
            f'<text x="{left + item.gpus * scale + 4:.1f}" y="{y + 15}">{item.gpus}</text>',
        ]
    ideal = left + result.ideal * scale
    bottom = 35 + bar_height * len(rows)
    parts += [
        f'<line x1="{ideal:.1f}" y1="30" x2="{ideal:.1f}" y2="{bottom}" stroke="#e03131" '
        'stroke-dasharray="4 3"/>',
        f'<text x="{ideal:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#e03131">'
        f"perfect packing {result.ideal}</text>",
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
