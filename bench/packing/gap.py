"""`python -m bench.packing.gap`: what stands between the extender and the upper bound the
trace allows: the bound, and why the GPUs the extender leaves free stay free.

The figure FGD's evaluation reports is the GPU demand placed once the demand arrived
reaches 100 % and 130 % of the cluster's GPUs. No placement of those tasks, in any order,
by any policy, can place more than the optimum of this linear program, which relaxes the
packing:

- each node shape (CPU, memory, GPUs, GPU model) is one bin holding the sum of its nodes'
  CPU, memory and GPUs, so a task may straddle nodes of a shape and shares of a GPU pack
  without gaps;
- each task shape (CPU, memory, GPUs, share of each, models allowed) may be placed
  fractionally, on shapes of node one of which it fits alone when empty (its CPU, memory
  and GPUs, a model it allows);
- the objective is the GPU demand placed; nothing makes a task that fits be placed, so
  CPU-only tasks, which FGD's figure does not count, are left out when they would take
  CPU the GPU tasks need.

Solved with HiGHS through SciPy's `linprog`. The gap between this bound and what a
scheduler places is the most any better placement could win back; how much of it no
placement of whole tasks on whole nodes can win is not measured.

Then the extender's placement in process (`offline.place_all`, the paper's order, the
nodes named as the simulator names them in that seed's run, as `offline` names them; with
`--trace-names`, the trace's names) and, at its end, each node's free GPU thousandths
put down to the first reason no task left Pending takes them (`REASONS`): none of them
may use the node's GPU model (or asks more GPUs than it has), none fits its free CPU,
none its free memory, or the free GPUs are too few or their free shares too small for
every one that would fit otherwise. Nothing leaves, so a Pending task fits no node at the
end either.

    python -m bench.packing.gap --lists default,gpuspec25 --seeds 42 \\
        --record bench/packing/results/gap.jsonl
    python -m bench.packing.gap --report   # the table in docs/performance.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from scipy.optimize import linprog  # type: ignore[import-untyped]
from scipy.sparse import lil_matrix  # type: ignore[import-untyped]

from castslice.extender.fragmentation import NodeFree

from . import report
from .offline import Placed, head_commit, node_names, nodes_named, place_all
from .trace import (
    LISTS,
    MILLI,
    ORDERS,
    TraceNode,
    TraceTask,
    read_nodes,
    read_tasks,
    sample_nodes,
    task_list,
    workload,
)

RESULTS = Path(__file__).parent / "results" / "gap.jsonl"
# Why a node's free GPUs stay free, in the order they are tried.
REASONS = {
    "model": "no Pending task may use its GPU model",
    "cpu": "too little CPU free",
    "memory": "too little memory free",
    "gpus": "too few GPUs, or shares too small, free",
}

NodeShape = tuple[int, int, int, str]
TaskShape = tuple[int, int, int, int, tuple[str, ...]]


def _node_shape(node: TraceNode) -> NodeShape:
    return (node.cpu_milli, node.memory_mib, node.gpus, node.model)


def _task_shape(task: TraceTask) -> TaskShape:
    return (task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli, task.gpu_spec)


def _fits(task: TaskShape, node: NodeShape) -> bool:
    cpu, memory, gpus, _, models = task
    node_cpu, node_memory, node_gpus, model = node
    return (
        cpu <= node_cpu
        and memory <= node_memory
        and gpus <= node_gpus
        and (not gpus or not models or model in models)
    )


def most_placed(nodes: Sequence[TraceNode], tasks: Sequence[TraceTask]) -> float:
    """The LP's optimum: the most GPU demand of `tasks` placeable on `nodes`, over the
    nodes' GPUs (0 to 1)."""
    gpus = sum(node.gpus for node in nodes)
    bins = Counter(_node_shape(node) for node in nodes if node.gpus)
    demand = Counter(_task_shape(task) for task in tasks if task.num_gpu)
    if not gpus or not demand:
        return 0.0
    bin_list, shape_list = list(bins), list(demand)
    pairs = [
        (s, b)
        for s, shape in enumerate(shape_list)
        for b, node in enumerate(bin_list)
        if _fits(shape, node)
    ]
    if not pairs:
        return 0.0
    # Rows: each task shape's count, then each node shape's CPU, memory and GPUs.
    rows = lil_matrix((len(shape_list) + 3 * len(bin_list), len(pairs)))
    bounds: list[float] = [float(demand[shape]) for shape in shape_list]
    for node in bin_list:
        cpu, memory, node_gpus, _ = node
        bounds += [float(bins[node] * cpu), float(bins[node] * memory)]
        bounds.append(float(bins[node] * node_gpus * MILLI))
    objective = []
    for column, (s, b) in enumerate(pairs):
        cpu, memory, task_gpus, milli, _ = shape_list[s]
        first = len(shape_list) + 3 * b
        rows[s, column] = 1
        rows[first, column] = cpu
        rows[first + 1, column] = memory
        rows[first + 2, column] = task_gpus * milli
        objective.append(-float(task_gpus * milli))
    solved = linprog(objective, A_ub=rows.tocsr(), b_ub=bounds, bounds=(0, None), method="highs")
    if solved.status != 0:
        raise RuntimeError(f"the bound's linear program: {solved.message}")
    return float(-solved.fun / (gpus * MILLI))


@dataclass(frozen=True)
class Bound:
    """The bound once the arrived demand reaches 100 % and at the end (130 %)."""

    seed: int
    at_100: float
    at_130: float


def bound(nodes: Sequence[TraceNode], tasks: Sequence[TraceTask], seed: int) -> Bound:
    """The bound over the tasks arrived when the demand reaches the cluster's GPUs (the
    task that reaches it counted, as `offline.place_all` counts it) and over them all."""
    gpus = sum(node.gpus for node in nodes)
    arrived, reached = Fraction(0), len(tasks)
    for index, task in enumerate(tasks):
        arrived += task.demand
        if arrived >= gpus:
            reached = index + 1
            break
    return Bound(seed, most_placed(nodes, tasks[:reached]), most_placed(nodes, tasks))


def _reason(free: NodeFree, pending: Sequence[TraceTask]) -> str:
    allowed = [
        task
        for task in pending
        if (not task.gpu_spec or free.model in task.gpu_spec)
        and task.num_gpu <= len(free.gpu_milli)
    ]
    if not allowed:
        return "model"
    fitting = [task for task in allowed if task.cpu_milli <= free.cpu_milli]
    if not fitting:
        return "cpu"
    if not any(task.memory_mib << 20 <= free.memory for task in fitting):
        return "memory"
    return "gpus"


def left_free(tasks: Sequence[TraceTask], placed: Placed) -> dict[str, float]:
    """The cluster's GPUs `placed` leaves free at its end, as a share of them, by the first
    of `REASONS` that keeps every task left Pending off them."""
    pending = [
        task for task, node in zip(tasks, placed.nodes, strict=True) if not node and task.num_gpu
    ]
    gpus = sum(len(free.gpu_milli) for _, free in placed.left)
    kept = dict.fromkeys(REASONS, 0)
    for _, free in placed.left:
        if free.gpu_milli_left:
            kept[_reason(free, pending)] += free.gpu_milli_left
    return {reason: milli / (gpus * MILLI) for reason, milli in kept.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.packing.gap", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seeds", default="42", help="workload seeds, comma-separated")
    parser.add_argument("--lists", default="default", help=f"comma-separated: {', '.join(LISTS)}")
    parser.add_argument("--order", default="artefact", choices=ORDERS)
    parser.add_argument("--every", type=int, default=1, help="one trace node in N (1: all)")
    parser.add_argument(
        "--trace-names",
        action="store_true",
        help="in the artefact's order, keep the trace's node names, not its simulator's",
    )
    parser.add_argument("--record", type=Path, help="a JSON Lines file the figures go to")
    parser.add_argument(
        "--report", action="store_true", help=f"only write the table of {RESULTS.name} into docs/"
    )
    args = parser.parse_args(argv)
    if args.report:
        report.write_gap(RESULTS)
        return 0
    lists = args.lists.split(",")
    wrong = [name for name in lists if name not in LISTS]
    if wrong:
        print(f"--lists: no {', '.join(wrong)}; one of {', '.join(LISTS)}", file=sys.stderr)
        return 2
    sampled = sample_nodes(read_nodes(), args.every)
    gpus = sum(node.gpus for node in sampled)
    commit = head_commit() if args.record else ""
    for name in lists:
        source = task_list(name)
        tasks = read_tasks(source)
        for seed in map(int, args.seeds.split(",")):
            nodes = nodes_named(args, sampled, seed, source)
            arrived = workload(tasks, gpus, seed, args.order, source)
            found = bound(nodes, arrived, seed)
            placed = place_all(nodes, arrived, "extender", seed)
            free = left_free(arrived, placed)
            line = {
                "list": name, "order": args.order, "every": args.every,
                "names": node_names(args), "seed": seed,
                "bound_100": round(found.at_100 * 100, 4),
                "bound_130": round(found.at_130 * 100, 4),
                "extender_100": round(placed.at_100 * 100, 4),
                "extender_130": round(placed.at_130 * 100, 4),
                "left_free": {reason: round(share * 100, 4) for reason, share in free.items()},
                "commit": commit,
            }  # fmt: skip
            print(json.dumps(line), flush=True)
            if args.record:
                with args.record.open("a") as file:
                    file.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
