"""`python -m bench.packing`: replay the openb trace under each configuration and profile.

    python -m bench.packing run --every 5 --seeds 42,43,44      # a sampled cluster
    python -m bench.packing run --every 1 --seeds 42 --only dra-100
    python -m bench.packing run --every 1 --seeds 42 --only dra-100 --profiles fgd-extender \
        --orders artefact --one-at-a-time                        # as the FGD simulator schedules
    python -m bench.packing run --every 20 --seeds 42 --only dra-100 --profiles fgd-extender \
        --orders artefact --one-at-a-time --list gpuspec25 \
        --results bench/packing/results/live_lists.jsonl         # another task list, live
    python -m bench.packing report                              # table and plots

`run` appends one JSON line per replay to bench/packing/results/replays.jsonl; `report`
writes the section of docs/performance.md between its markers and the plots beside it.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from castslice.inspect.plan import Plan, environment_of, plan, tasks_from_trace
from castslice.settings.config import Config
from tests.e2e import tools

from . import report
from .replay import PROFILES, Configuration, replay
from .trace import (
    BATCHES,
    LISTS,
    ONE_AT_A_TIME,
    ORDERS,
    TASKS_CSV,
    read_nodes,
    read_tasks,
    sample_nodes,
    task_list,
    workload,
)

RESULTS = Path(__file__).parent / "results" / "replays.jsonl"


@functools.cache
def trace_plan() -> Plan:
    """`castslice plan --trace` on the whole trace (its candidates do not depend on today's
    settings)."""
    return plan(Config(), tasks_from_trace(TASKS_CSV.read_text()))


def planned(backend: str) -> dict[str, str]:
    """The settings `castslice plan --trace` recommends for `backend` on the whole trace."""
    return environment_of(trace_plan().per_backend[backend].settings)


def configurations() -> list[Configuration]:
    memory = {"CASTSLICE_DRA_GPU_MEMORY": "15Gi"}
    resource = {"CASTSLICE_BACKEND": "resource"}
    nvidia_plan, gke_plan = planned("nvidia"), planned("gke")
    return [
        Configuration("no sharing", {"CASTSLICE_BACKEND": "resource"}, sharing=False),
        Configuration("resource-4", {"CASTSLICE_BACKEND": "resource"}),
        Configuration("resource-8", {**resource, "CASTSLICE_SLICES_PER_GPU": "8"}),
        Configuration("resource-100", {**resource, "CASTSLICE_SLICES_PER_GPU": "100"}),
        Configuration("nvidia-4", {"CASTSLICE_BACKEND": "nvidia"}),
        # The degrees and the share of nodes per degree `castslice plan` recommends.
        Configuration("nvidia-plan", nvidia_plan),
        Configuration("gke-4", {"CASTSLICE_BACKEND": "gke"}),
        Configuration("gke-plan", gke_plan),
        Configuration("dra-4", {"CASTSLICE_BACKEND": "dra"}),
        Configuration("dra-8", {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "8"}),
        Configuration("dra-100", {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "100"}),
        Configuration("dra-4 memory", {"CASTSLICE_BACKEND": "dra", **memory}),
        Configuration(
            "dra-8 memory",
            {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "8", **memory},
        ),
        Configuration(
            "dra-100 memory",
            {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "100", **memory},
        ),
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    known = {configuration.name: configuration for configuration in configurations()}
    names = args.only.split(",") if args.only else list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        print(
            f"--only: no configuration {', '.join(unknown)}; known: {', '.join(known)}",
            file=sys.stderr,
        )
        return 2
    chosen = [known[name] for name in names]
    profiles = args.profiles.split(",")
    orders = args.orders.split(",")
    wrong = [name for name in [*profiles, *orders] if name not in [*PROFILES, *ORDERS]]
    if wrong:
        print(f"--profiles/--orders: no {', '.join(wrong)}", file=sys.stderr)
        return 2
    nginx, binaries = tools.nginx(), tools.kube_binaries()
    nodes = sample_nodes(read_nodes(), args.every)
    source = task_list(args.list)
    tasks = read_tasks(source)
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    runs = [
        (seed, order, profile, configuration)
        for seed in map(int, args.seeds.split(","))
        for order in orders
        for profile in profiles
        for configuration in chosen
    ]
    for seed, order, profile, configuration in runs:
        arrived = workload(tasks, sum(node.gpus for node in nodes), seed, order, source)
        print(
            f"{configuration.name}, {profile}, {order}, seed {seed}: {len(arrived)} tasks",
            flush=True,
        )
        began = time.time()
        result = replay(
            configuration, profile, seed, args.every, nodes, arrived, binaries, nginx,
            log=lambda line: print(line, flush=True), order=order,
            creation=ONE_AT_A_TIME if args.one_at_a_time else BATCHES,
        )  # fmt: skip
        record = {**asdict(result), "started": began, "load": report.load(), "list": args.list}
        placements = record.pop("placements")
        if args.placements:
            with Path(args.placements).open("a") as file:
                keys = ("configuration", "profile", "order", "creation", "every", "seed")
                named = {key: record[key] for key in keys}
                file.write(json.dumps({**named, "list": args.list, "nodes": placements}))
                file.write("\n")
        with results.open("a") as file:
            file.write(json.dumps(record) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="replay and append the results")
    runner.add_argument("--every", type=int, default=5, help="one trace node in N (1: all)")
    runner.add_argument("--seeds", default="42,43,44", help="workload seeds, comma-separated")
    runner.add_argument("--profiles", default=",".join(PROFILES), help="scheduler profiles")
    runner.add_argument("--only", help="configuration names, comma-separated, in this order")
    runner.add_argument(
        "--orders",
        default="arrival",
        help="the tasks' orders, comma-separated: arrival (the trace's), shuffled (the FGD "
        "artefact's, --shuffle-pod=true)",
    )
    runner.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="create each Pod once the scheduler has decided the one before, as the FGD "
        "artefact's simulator schedules, instead of each checkpoint's Pods at once",
    )
    runner.add_argument(
        "--list", default="default", choices=LISTS, help="the FGD artefact's task list to replay"
    )
    runner.add_argument("--results", default=str(RESULTS), help="the JSON lines file to append to")
    runner.add_argument(
        "--placements",
        help="a JSON lines file each replay's nodes, Pod by Pod, are appended to (empty: Pending)",
    )
    commands.add_parser("report", help="write docs/performance.md's packing section and plots")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args)
    report.write(RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
