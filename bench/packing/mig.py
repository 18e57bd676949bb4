"""`python -m bench.packing.mig`: the openb trace placed on MIG GPUs, first fit against the
least fragmenting placement (castslice/backends/mig/slot_fragmentation.py), in process.

The cluster is the trace's GPU nodes (their CPU, memory and number of GPUs) with every GPU
an A100-80GB or an H200 in MIG mode. Each task of the workload (`trace.workload`: the
trace tuned to 130 % of the cluster's GPUs, in the FGD artefact's shuffled order by
default) asks what castslice's `mig` backend gives it under its default settings: a share
of one GPU becomes the smallest instance whose memory holds it (`choice.choose`, the
memory-first rule: 0.47 of an A100-80GB is a 3g.40gb), whole GPUs become the full
instance on each. A task is placed on the first node (in the trace's order) whose CPU and
memory fit and whose GPUs take its instances:

- `first-fit`: the first GPUs with a free placement, each at its first (NVML's order);
- `least-fragmenting`: the node, GPU and placement that make the node's MIG fragmentation
  grow least (`SlotFragmentation`), the typical requests being the trace's own (every
  request the whole trace makes, weighted by how often, as FGD learns its typical Pods
  from the trace before tuning).

CPU-only tasks go first fit under both. Tasks never leave (the FGD paper's setting); where
they do, `Departing` runs the same rules in the departures replay
(bench/packing/departures.py), each instance given back when its task leaves. Each
run gives, once the arrived GPU demand reaches 100 % of the cluster's GPUs and at the end
(130 %): the GPU tasks placed of those arrived, the GPU demand placed (of the cluster's
GPUs, the FGD paper's figure), the instances, the GPUs holding any, and the memory slices
taken.

    python -m bench.packing.mig --models A100-80GB,H200 --seeds 42,43,44 \\
        --record bench/packing/results/mig.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from castslice.backends.mig import choice
from castslice.backends.mig.layouts import GpuState
from castslice.backends.mig.profiles import MODELS, GpuModel
from castslice.backends.mig.slot_fragmentation import (
    Host,
    Move,
    Request,
    SlotFragmentation,
    apply,
    first_fit,
    release,
)
from castslice.settings.config import Config

from .offline import head_commit
from .trace import (
    MILLI,
    ORDERS,
    TASKS_CSV,
    TraceNode,
    TraceTask,
    read_nodes,
    read_tasks,
    sample_nodes,
    workload,
)

FIRST_FIT = "first-fit"
LEAST_FRAGMENTING = "least-fragmenting"
POLICIES = (FIRST_FIT, LEAST_FRAGMENTING)
MODEL_NAMES = ("A100-80GB", "H200")


def request(model: GpuModel, task: TraceTask, config: Config) -> Request | None:
    """The instances castslice's mig backend gives the task (None: it asks no GPU)."""
    if not task.num_gpu or not task.gpu_milli:
        return None
    if task.fractional:
        profile = choice.choose(config, model, Fraction(task.gpu_milli, MILLI))
        if profile is not None:
            return Request(profile)
    return Request(model.full(), task.num_gpu)


def typical_requests(
    model: GpuModel, tasks: Sequence[TraceTask], config: Config
) -> list[tuple[Request, Host, float]]:
    """Every request the tasks make, with the median CPU and memory of its tasks (as the
    typical Pods of castslice/extender/fragmentation.py carry their memory) and how often
    it comes among them."""
    needs: dict[Request, list[TraceTask]] = defaultdict(list)
    for task in tasks:
        if (each := request(model, task, config)) is not None:
            needs[each].append(task)
    total = sum(len(found) for found in needs.values())
    ranked = sorted(needs.items(), key=lambda item: -len(item[1]))
    return [
        (
            each,
            Host(
                int(statistics.median(task.cpu_milli for task in found)),
                int(statistics.median(task.memory_mib for task in found)),
            ),
            len(found) / total,
        )
        for each, found in ranked
    ]


@dataclass
class Point:
    """The cluster at one moment of a run."""

    tasks_arrived: int = 0
    tasks_placed: int = 0
    demand_placed: float = 0.0
    instances: int = 0
    gpus_used: int = 0
    slices_taken: float = 0.0


@dataclass
class Run:
    model: str
    seed: int
    policy: str
    order: str = "shuffled"
    at_100: Point = field(default_factory=Point)
    at_130: Point = field(default_factory=Point)
    # Every GPU of the cluster at the end.
    gpus: tuple[GpuState, ...] = ()


@dataclass
class _Node:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuState, ...]


def _cluster(nodes: Sequence[TraceNode]) -> list[_Node]:
    return [_Node(n.name, n.cpu_milli, n.memory_mib, (GpuState(),) * n.gpus) for n in nodes]


def choose(
    model: GpuModel,
    rule: SlotFragmentation,
    policy: str,
    cluster: Iterable[_Node],
    task: TraceTask,
    wanted: Request | None,
) -> tuple[_Node, Move] | None:
    """Where `policy` places the task (asking `wanted` of the GPUs) on the cluster as it is:
    the node and the instances' GPUs and placements; None: it fits no node."""
    chosen: tuple[_Node, Move] | None = None
    for node in cluster:
        if node.cpu_milli < task.cpu_milli or node.memory_mib < task.memory_mib:
            continue
        if policy == FIRST_FIT:
            if wanted is None:
                return (node, Move(0.0, (), ()))
            move = first_fit(model, node.gpus, wanted)
            if move is not None:
                return (node, move)
            continue
        host = Host(node.cpu_milli, node.memory_mib)
        move = rule.best(node.gpus, wanted, host, Host(task.cpu_milli, task.memory_mib))
        if move is not None and (chosen is None or move.growth < chosen[1].growth):
            chosen = (node, move)
    return chosen


def _take(
    model: GpuModel, node: _Node, task: TraceTask, wanted: Request | None, move: Move
) -> None:
    node.cpu_milli -= task.cpu_milli
    node.memory_mib -= task.memory_mib
    if wanted is not None:
        node.gpus = apply(model, node.gpus, wanted, move)


def place(
    model: GpuModel,
    nodes: Sequence[TraceNode],
    tasks: Sequence[TraceTask],
    known: Sequence[TraceTask],
    policy: str,
    seed: int,
    order: str = "shuffled",
    config: Config | None = None,
) -> Run:
    """Each task in turn placed by `policy` (or left Pending) before the next arrives."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    config = config or Config()
    rule = SlotFragmentation(model, typical_requests(model, known, config))
    cluster = _cluster(nodes)
    gpus = sum(node.gpus for node in nodes)
    run = Run(model.name, seed, policy, order)
    arrived = placed = Fraction(0)
    counted = [0, 0]
    for task in tasks:
        wanted = request(model, task, config)
        chosen = choose(model, rule, policy, cluster, task, wanted)
        if wanted is not None:
            counted[0] += 1
            arrived += task.demand
        if chosen is not None:
            _take(model, chosen[0], task, wanted, chosen[1])
            if wanted is not None:
                counted[1] += 1
                placed += task.demand
        if arrived >= gpus and not run.at_100.tasks_arrived:
            run.at_100 = _point(model, cluster, counted, placed, gpus)
    run.at_130 = _point(model, cluster, counted, placed, gpus)
    run.gpus = tuple(state for node in cluster for state in node.gpus)
    return run


class Departing:
    """`policy` on a cluster that frees what a task held once it leaves (the departures
    replay's `Policy`): every GPU of `nodes` a `model` GPU in MIG mode, cut as the tasks
    come, an instance gone with its task; the typical requests those of `known`."""

    def __init__(
        self,
        model: GpuModel,
        nodes: Sequence[TraceNode],
        known: Sequence[TraceTask],
        policy: str,
        config: Config | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
        self.model, self.policy, self.config = model, policy, config or Config()
        self.rule = SlotFragmentation(model, typical_requests(model, known, self.config))
        self.cluster = {node.name: node for node in _cluster(nodes)}
        # Per placed task: its node, what it asked of the GPUs and where that went.
        self.held: dict[int, tuple[_Node, Request | None, Move]] = {}

    def _place(self, index: int, task: TraceTask, nodes: Iterable[_Node]) -> str | None:
        wanted = request(self.model, task, self.config)
        chosen = choose(self.model, self.rule, self.policy, nodes, task, wanted)
        if chosen is None:
            return None
        node, move = chosen
        _take(self.model, node, task, wanted, move)
        self.held[index] = (node, wanted, move)
        return node.name

    def arrive(self, index: int, task: TraceTask) -> str | None:
        return self._place(index, task, self.cluster.values())

    def retry(self, index: int, task: TraceTask, node: str) -> bool:
        return self._place(index, task, [self.cluster[node]]) is not None

    def leave(self, index: int, task: TraceTask) -> None:
        node, wanted, move = self.held.pop(index)
        node.cpu_milli += task.cpu_milli
        node.memory_mib += task.memory_mib
        if wanted is not None:
            node.gpus = release(node.gpus, wanted, move)


def _point(
    model: GpuModel, cluster: Sequence[_Node], counted: Sequence[int], placed: Fraction, gpus: int
) -> Point:
    states = [state for node in cluster for state in node.gpus]
    return Point(
        tasks_arrived=counted[0],
        tasks_placed=counted[1],
        demand_placed=round(float(placed / gpus) * 100, 4),
        instances=sum(len(state.instances) for state in states),
        gpus_used=sum(1 for state in states if state.taken),
        slices_taken=round(
            sum(state.taken.bit_count() for state in states) / (model.memory_total * gpus) * 100,
            4,
        ),
    )


def record_line(run: Run, every: int, commit: str) -> dict[str, object]:
    return {
        "model": run.model, "seed": run.seed, "policy": run.policy, "order": run.order,
        "every": every, "at_100": vars(run.at_100), "at_130": vars(run.at_130),
        "commit": commit,
    }  # fmt: skip


def read_record(path: Path) -> list[Run]:
    """The runs a record file holds, in its order."""
    runs = []
    for line in path.read_text().splitlines():
        found = json.loads(line)
        runs.append(
            Run(
                found["model"],
                found["seed"],
                found["policy"],
                found["order"],
                Point(**found["at_100"]),
                Point(**found["at_130"]),
            )
        )
    return runs


def table(runs: Sequence[Run]) -> str:
    """A Markdown table: per order, model and policy, the mean over the seeds of each figure."""
    lines = [
        "| order | GPU | placement | seeds | GPU tasks placed at 100 % | at 130 % | GPU demand"
        " placed at 100 % | at 130 % | instances at 130 % | GPUs used at 100 % | slices taken"
        " at 130 % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.order, run.model, run.policy), []).append(run)
    for (order, model, policy), group in groups.items():

        def mean(value: list[float]) -> float:
            return statistics.fmean(value)

        at_100 = [run.at_100 for run in group]
        at_130 = [run.at_130 for run in group]
        lines.append(
            f"| {order} | {model} | {policy} | {','.join(str(run.seed) for run in group)} "
            f"| {mean([p.tasks_placed for p in at_100]):.1f} of "
            f"{mean([p.tasks_arrived for p in at_100]):.1f} "
            f"| {mean([p.tasks_placed for p in at_130]):.1f} of "
            f"{mean([p.tasks_arrived for p in at_130]):.1f} "
            f"| {mean([p.demand_placed for p in at_100]):.2f} % "
            f"| {mean([p.demand_placed for p in at_130]):.2f} % "
            f"| {mean([p.instances for p in at_130]):.1f} "
            f"| {mean([p.gpus_used for p in at_100]):.1f} "
            f"| {mean([p.slices_taken for p in at_130]):.2f} % |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.packing.mig", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seeds", default="42", help="workload seeds, comma-separated")
    parser.add_argument(
        "--models", default=",".join(MODEL_NAMES), help=f"comma-separated: {', '.join(MODELS)}"
    )
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated: {', '.join(POLICIES)}"
    )
    parser.add_argument(
        "--order", default="shuffled", choices=[o for o in ORDERS if o != "artefact"]
    )
    parser.add_argument("--every", type=int, default=1, help="one trace node in N (1: all)")
    parser.add_argument(
        "--record", type=Path, help="a JSON Lines file each run's figures are appended to"
    )
    parser.add_argument(
        "--show", type=Path, help="print the table of a record file's runs, running nothing"
    )
    args = parser.parse_args(argv)
    if args.show:
        print(table(read_record(args.show)))
        return 0
    models = args.models.split(",")
    policies = args.policies.split(",")
    wrong = [m for m in models if m not in MODELS] + [p for p in policies if p not in POLICIES]
    if wrong:
        print(
            f"no {', '.join(wrong)}: --models is some of {', '.join(MODELS)}, --policies some"
            f" of {', '.join(POLICIES)}",
            file=sys.stderr,
        )
        return 2
    nodes = sample_nodes([node for node in read_nodes() if node.gpus], args.every)
    tasks = read_tasks(TASKS_CSV)
    commit = head_commit() if args.record else ""
    runs = []
    for seed in map(int, args.seeds.split(",")):
        arrived = workload(tasks, sum(node.gpus for node in nodes), seed, args.order)
        for name in models:
            for policy in policies:
                run = place(MODELS[name], nodes, arrived, tasks, policy, seed, args.order)
                print(
                    f"seed {seed}, {name}, {policy}: {run.at_130.tasks_placed} of "
                    f"{run.at_130.tasks_arrived} GPU tasks placed, "
                    f"{run.at_130.demand_placed:.2f} % of the GPUs' demand",
                    flush=True,
                )
                runs.append(run)
                if args.record:
                    with args.record.open("a") as record:
                        line = record_line(run, args.every, commit)
                        record.write(json.dumps(line) + "\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
