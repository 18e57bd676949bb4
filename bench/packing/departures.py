"""`python -m bench.packing.departures`: the trace replayed in its own time, Pods leaving.

FGD's evaluation (and `bench.packing.offline`) places every task at once and frees
nothing. The openb trace also says when each task was created and deleted
(`creation_time`, `deletion_time`: seconds since the trace began, per the trace's
README, alibaba/clusterdata cluster-trace-gpu-v2023 at 0c9677b; never empty in
`openb_pod_list_default.csv`; `scheduled_time` is empty for the 897 tasks it left
Pending). Here each task arrives at its creation time and, once placed, holds its node
for its lifetime in the trace (deletion less creation, so a task placed at once leaves
at its deletion time; a task the trace left Pending counts as running its whole life);
tasks without times (the `multigpu` lists) cannot be replayed.

A task that fits no node waits, in arrival order, and is tried again each time a task
leaves, as kube-scheduler moves unschedulable Pods back to its active queue when a
scheduled Pod is deleted (NodeResourcesFit's queueing hint `isSchedulableAfterPodEvent`,
pkg/scheduler/framework/plugins/noderesources/fit.go). Every waiting task was found to
fit no node, and nodes gain room only by departures, so a task can only fit on the node
just freed: it is tried there. The scheduler's back-off (one to ten seconds) is left
out: the trace's times are whole seconds over months. Departures at a time come before
arrivals at the same time; a task that arrives while others wait is tried at once.

Six policies, on the same nodes and the same tasks:

- `default`: kube-scheduler's default profile, `dra` at S shares per GPU: of the nodes
  that pass its filters (CPU, memory, the GPU model asked for, and the DRA allocator's
  first fit), the first `numFeasibleNodesToFind` found from a start that goes round
  (pkg/scheduler/schedule_one.go), scored by NodeResourcesFit's LeastAllocated plus
  NodeResourcesBalancedAllocation on CPU and memory (each weight 1;
  pkg/scheduler/framework/plugins/noderesources/least_allocated.go and
  balanced_allocation.go), the best at random among equals (`selectHost`). Its other
  score plugins tell no trace node apart. The one task asking for no memory is scored
  with 0, not kube-scheduler's non-zero default of 200 MiB. BalancedAllocation scores the
  change the task makes to the node's balance, as kube-scheduler 1.37.2 does and
  `castslice plan`'s `placing.StockScores` counts it (1.30.14 scored the balance with the
  task on the node; the records before 2026-12-05's re-run were made with that).
- `most-allocated`: the same profile with NodeResourcesFit's scoring strategy set to
  MostAllocated over CPU and memory (infra/scheduler/most-allocated.yaml;
  most_allocated.go): the nodes most requested in proportion first, a bin packer that
  knows nothing of GPUs. The shipped profile scores every feasible node
  (`percentageOfNodesToScore: 100`); here, as for the default profile, kube-scheduler's
  adaptive share of them is, which is every node below 100.
- `extender`: the shipped extender profile (`infra/scheduler/fgd-extender.yaml`): the
  extender's own view (`ClusterView`, its typical Pods learnt from the Pods present)
  scores every node that passes the filters, and the Pod is bound on the best, as in
  `bench.packing.offline`; a Pod that leaves is deleted from the view with its claim.
- `fgd`: the FGD paper's policy (`offline.fgd_pick`: the typical Pods of the whole list,
  the GPU it scores, the trace's own thousandths of a GPU), on each node's `NodeFree`
  as `offline.place_fgd` keeps them, not on a `ClusterView`: FGD reads no Pods or
  claims, and counts thousandths of a GPU rather than S shares.
- `mig-first-fit`, `mig-least-fragmenting`: `bench.packing.mig`'s rules (`mig.Departing`)
  with every GPU an A100-80GB in MIG mode, cut as the tasks come; a task that leaves
  gives its instances back.

`--largest-gpus N` leaves out the tasks asking more than N GPUs; the others keep their
times.

The default profile and the extender bind on the scheduler's own `ClusterView` with
`extender_cost.bind` (the scheduler's filters and the DRA allocator's first fit).

Then, for each policy, the fewest nodes that run the trace's whole life with no task
waiting longer than a bound: the trace's nodes in `spread` order (each node shape's
nodes spread evenly along it, so every first K keeps the trace's mix of shapes), the
smallest K found by doubling then bisecting (it assumes more nodes never make a wait
longer; the record keeps K less one, which fails).

    python -m bench.packing.departures --bounds 0,600 --seeds 42
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Protocol

from castslice.backends.mig.profiles import MODELS
from castslice.contract import Manifest
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import NodeFree, accessible, take
from castslice.extender.placing import default_profile_score

from . import mig, report
from .extender_cost import (
    CAPACITY,
    bind,
    claim_manifest,
    feasible_nodes,
    fitting_gpus,
    node_manifest,
    prioritized,
    slice_manifest,
)
from .offline import (
    Remembered,
    add_arriving,
    arriving,
    fgd_measure,
    fgd_pick,
    head_commit,
    shape_of,
)
from .trace import MILLI, TASKS_CSV, TraceNode, TraceTask, read_nodes, read_tasks, task_list

RESULTS = Path(__file__).parent / "results" / "departures.jsonl"
POLICIES = {
    "default": "default profile",
    "most-allocated": "MostAllocated profile",
    "extender": "extender",
    "fgd": "FGD (in process)",
    "mig-first-fit": "MIG first fit (A100-80GB)",
    "mig-least-fragmenting": "MIG least fragmenting (A100-80GB)",
}
# The MIG policies' GPU: every GPU of the trace's nodes taken as one (the A100-80GB and the
# H200 place the trace alike, docs/performance.md).
MIG_MODEL = "A100-80GB"
# kube-scheduler's numFeasibleNodesToFind (pkg/scheduler/schedule_one.go): all nodes below
# 100, else an adaptive share of them, at least 5 % and at least 100 nodes.
_MIN_FEASIBLE_NODES = 100
_MIN_FEASIBLE_PERCENTAGE = 5
# Allocation samples a record keeps: the curve's peak in each of this many equal stretches.
_SAMPLES = 500


@dataclass(frozen=True)
class Stay:
    """A task with its times: it arrives at `arrival` and, once placed, holds its node for
    `lifetime` seconds."""

    task: TraceTask
    arrival: int
    lifetime: int


def read_stays(path: Path = TASKS_CSV) -> list[Stay]:
    """The task list's tasks with their times, in the file's order."""
    tasks = read_tasks(path)
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    if rows and not {"creation_time", "deletion_time"} <= rows[0].keys():
        raise ValueError(f"{path.name}: no creation_time and deletion_time columns to replay")
    stays = []
    for task, row in zip(tasks, rows, strict=True):
        if not row["creation_time"] or not row["deletion_time"]:
            raise ValueError(f"{path.name}: {task.name} has no creation or deletion time")
        created, deleted = int(row["creation_time"]), int(row["deletion_time"])
        stays.append(Stay(task, created, deleted - created))
    return stays


class Policy(Protocol):
    """Where a policy places tasks on a cluster that frees them."""

    def arrive(self, index: int, task: TraceTask) -> str | None:
        """The task arrives: the node it is placed on, or None (it waits)."""

    def retry(self, index: int, task: TraceTask, node: str) -> bool:
        """The waiting task is tried on `node`, just freed: whether it was placed there."""

    def leave(self, index: int, task: TraceTask) -> None:
        """The placed task is deleted."""


def _view(nodes: Sequence[TraceNode], shares: int) -> ClusterView:
    view = ClusterView(CAPACITY, shares, clock=lambda: 0.0)
    view.replace("nodes", [node_manifest(node) for node in nodes])
    view.replace("resourceslices", [slice_manifest(node, shares) for node in nodes if node.gpus])
    return view


class _Claimed:
    """Tasks as Pods with ResourceClaims (`dra` at `shares` per GPU) on the scheduler's view
    of the cluster, which binds them; `watchers`: the views told of every change besides."""

    def __init__(self, nodes: Sequence[TraceNode], shares: int) -> None:
        self.shares = shares
        self.scheduler = _view(nodes, shares)
        self.names = [node.name for node in nodes]
        self.watchers: list[ClusterView] = []
        self.pods: dict[int, tuple[str | None, Manifest]] = {}

    def _tell(self, event: tuple[str, str, Manifest]) -> None:
        for view in self.watchers:
            view.apply(*event)

    def _created(self, index: int, task: TraceTask) -> Manifest:
        claim, pod = arriving(index, task)
        self.pods[index] = (claim, pod)
        for view in (self.scheduler, *self.watchers):
            add_arriving(view, claim, pod, task, self.shares)
        return pod

    def fits(self, task: TraceTask, node: str) -> bool:
        return fitting_gpus(self.scheduler.free(node), task, self.shares) is not None

    def retry(self, index: int, task: TraceTask, node: str) -> bool:
        pod = self.pods[index][1]
        return bind(self.scheduler, pod, task, [(node, 1)], self.shares, self._tell) is not None

    def leave(self, index: int, task: TraceTask) -> None:
        claim, pod = self.pods.pop(index)
        for view in (self.scheduler, *self.watchers):
            view.apply("pods", "DELETED", pod)
            if claim is not None:
                view.apply(
                    "resourceclaims", "DELETED", claim_manifest(claim, task, self.shares, None)
                )


def feasible_to_find(nodes: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with percentageOfNodesToScore unset."""
    if nodes < _MIN_FEASIBLE_NODES:
        return nodes
    percentage = max(_MIN_FEASIBLE_PERCENTAGE, 50 - nodes // 125)
    return max(_MIN_FEASIBLE_NODES, nodes * percentage // 100)


def default_score(
    node: TraceNode, free: NodeFree, task: TraceTask, most_allocated: bool = False
) -> int:
    """NodeResourcesFit (LeastAllocated, or MostAllocated) plus
    NodeResourcesBalancedAllocation, on CPU and memory, as kube-scheduler 1.37.2 scores
    them (`placing.default_profile_score`)."""
    had = [
        (node.cpu_milli - free.cpu_milli, task.cpu_milli, node.cpu_milli),
        ((node.memory_mib << 20) - free.memory, task.memory_mib << 20, node.memory_mib << 20),
    ]
    return default_profile_score(had, most_allocated)


class DefaultProfile(_Claimed):
    """kube-scheduler's default profile, or with `most_allocated` the same profile whose
    NodeResourcesFit scores by MostAllocated (the module's docstring)."""

    def __init__(
        self, nodes: Sequence[TraceNode], shares: int, seed: int, most_allocated: bool = False
    ) -> None:
        super().__init__(nodes, shares)
        self.most_allocated = most_allocated
        self.nodes = {node.name: node for node in nodes}
        self.draw = random.Random(seed)
        self.start = 0

    def arrive(self, index: int, task: TraceTask) -> str | None:
        pod = self._created(index, task)
        wanted, checked = feasible_to_find(len(self.names)), 0
        found: list[str] = []
        while checked < len(self.names) and len(found) < wanted:
            name = self.names[(self.start + checked) % len(self.names)]
            checked += 1
            if self.fits(task, name):
                found.append(name)
        self.start = (self.start + checked) % len(self.names)
        if not found:
            return None
        scored = [
            (default_score(self.nodes[name], self._free(name), task, self.most_allocated), name)
            for name in found
        ]
        best = max(score for score, _ in scored)
        chosen = self.draw.choice([name for score, name in scored if score == best])
        return bind(self.scheduler, pod, task, [(chosen, 1)], self.shares)

    def _free(self, name: str) -> NodeFree:
        free = self.scheduler.free(name)
        assert free is not None
        return free


class Extender(_Claimed):
    """The shipped extender profile: the extender's view scores every feasible node."""

    def __init__(self, nodes: Sequence[TraceNode], shares: int) -> None:
        super().__init__(nodes, shares)
        # The extender's own view: told of every binding at once (no watch lag), and it
        # counts a Pod where it sent it until then, so it is not the scheduler's.
        self.view = _view(nodes, shares)
        self.watchers.append(self.view)

    def arrive(self, index: int, task: TraceTask) -> str | None:
        pod = self._created(index, task)
        feasible = feasible_nodes(self.scheduler, task, self.names, self.shares)
        scores = prioritized(self.view, pod, feasible)
        return bind(self.scheduler, pod, task, scores, self.shares, self._tell)


class Fgd:
    """The FGD paper's policy, on each node's free resources in the trace's thousandths."""

    def __init__(self, nodes: Sequence[TraceNode], known: Sequence[TraceTask]) -> None:
        self.free = {
            node.name: NodeFree(node.cpu_milli, (MILLI,) * node.gpus, node.model, node.memory_mib)
            for node in nodes
        }
        self.names = sorted(self.free)
        self.measure = fgd_measure(known)
        self.remembered: Remembered = {}
        # Per placed task: its node and what it took of each GPU.
        self.held: dict[int, tuple[str, tuple[int, ...]]] = {}

    def _place(self, index: int, task: TraceTask, names: Sequence[str]) -> str | None:
        pod = shape_of(task)
        best = fgd_pick(self.free, names, pod, self.measure, self.remembered)
        if best is None:
            return None
        name, gpu = best
        before = self.free[name]
        after = take(before, pod, gpu)
        assert after is not None
        self.free[name] = after
        taken = tuple(a - b for a, b in zip(before.gpu_milli, after.gpu_milli, strict=True))
        self.held[index] = (name, taken)
        return name

    def arrive(self, index: int, task: TraceTask) -> str | None:
        return self._place(index, task, self.names)

    def retry(self, index: int, task: TraceTask, node: str) -> bool:
        free = self.free[node]
        pod = shape_of(task)
        if (pod.gpus and not accessible(free, pod)) or take(free, pod) is None:
            return False
        return self._place(index, task, [node]) is not None

    def leave(self, index: int, task: TraceTask) -> None:
        name, taken = self.held.pop(index)
        free = self.free[name]
        self.free[name] = replace(
            free,
            cpu_milli=free.cpu_milli + task.cpu_milli,
            memory=free.memory + task.memory_mib,
            gpu_milli=tuple(left + back for left, back in zip(free.gpu_milli, taken, strict=True)),
        )


def policy_for(
    name: str, nodes: Sequence[TraceNode], stays: Sequence[Stay], seed: int, shares: int = 100
) -> Policy:
    if name in ("default", "most-allocated"):
        return DefaultProfile(nodes, shares, seed, most_allocated=name == "most-allocated")
    if name == "extender":
        return Extender(nodes, shares)
    if name == "fgd":
        return Fgd(nodes, [stay.task for stay in stays])
    if name.startswith("mig-"):
        known = [stay.task for stay in stays]
        return mig.Departing(MODELS[MIG_MODEL], nodes, known, name.removeprefix("mig-"))
    raise ValueError(f"policy {name!r}: one of {', '.join(POLICIES)}")


@dataclass
class Run:
    """One replay: each task's wait (None: never placed), and the GPU allocation ratio
    after each time something happened, (seconds, placed GPU demand / cluster GPUs).
    `stopped`: the replay gave up at that time, a task having waited past the bound."""

    waits: list[int | None]
    curve: list[tuple[int, float]] = field(default_factory=list)
    stopped: int | None = None

    @property
    def waited(self) -> list[int]:
        return sorted(wait for wait in self.waits if wait)

    @property
    def never_placed(self) -> int:
        return sum(wait is None for wait in self.waits)

    @property
    def max_wait(self) -> float:
        """The longest wait; infinite if a task was never placed."""
        if self.never_placed:
            return math.inf
        return max((wait for wait in self.waits if wait is not None), default=0)


def arrival_order(stays: Sequence[Stay]) -> list[int]:
    """The stays' indices by arrival time, ties in the list's order."""
    return sorted(range(len(stays)), key=lambda index: (stays[index].arrival, index))


def replay(stays: Sequence[Stay], policy: Policy, gpus: int, bound: float = math.inf) -> Run:
    """Every task arrives at its time, waits if it fits no node, and leaves its lifetime
    after it is placed. `bound`: stop once a task has waited longer (the run then only
    says the bound was not kept)."""
    arrivals = arrival_order(stays)
    departures: list[tuple[int, int, str]] = []
    waits: list[int | None] = [None] * len(stays)
    waiting: list[int] = []
    where: dict[int, str] = {}
    placed = Fraction(0)
    curve: list[tuple[int, float]] = []
    next_arrival = 0

    def start(index: int, node: str, now: int) -> None:
        nonlocal placed
        where[index] = node
        waits[index] = now - stays[index].arrival
        placed += stays[index].task.demand
        heapq.heappush(departures, (now + stays[index].lifetime, index, node))

    while next_arrival < len(arrivals) or departures:
        now = min(
            stays[arrivals[next_arrival]].arrival if next_arrival < len(arrivals) else math.inf,
            departures[0][0] if departures else math.inf,
        )
        assert isinstance(now, int)
        if waiting and now - stays[waiting[0]].arrival > bound:
            return Run(waits, curve, stopped=now)
        while departures and departures[0][0] == now:
            _, index, node = heapq.heappop(departures)
            task = stays[index].task
            policy.leave(index, task)
            placed -= task.demand
            del where[index]
            still = []
            for other in waiting:
                if policy.retry(other, stays[other].task, node):
                    start(other, node, now)
                else:
                    still.append(other)
            waiting = still
        while next_arrival < len(arrivals) and stays[arrivals[next_arrival]].arrival == now:
            index = arrivals[next_arrival]
            next_arrival += 1
            placed_on = policy.arrive(index, stays[index].task)
            if placed_on is None:
                waiting.append(index)
            else:
                start(index, placed_on, now)
        curve.append((now, float(placed / gpus) if gpus else 0.0))
    return Run(waits, curve)


def spread(nodes: Sequence[TraceNode]) -> list[TraceNode]:
    """The nodes in an order whose every first K keeps the trace's mix of node shapes:
    the i-th of a shape's n nodes (in the file's order) at (i + 1/2) / n along it."""
    shapes: dict[tuple[str, int, int, int], list[int]] = {}
    for position, node in enumerate(nodes):
        shapes.setdefault((node.model, node.gpus, node.cpu_milli, node.memory_mib), []).append(
            position
        )
    keys = {}
    for positions in shapes.values():
        for rank, position in enumerate(positions):
            keys[position] = ((rank + 0.5) / len(positions), position)
    return [nodes[position] for position in sorted(keys, key=keys.__getitem__)]


def fewest_nodes(
    ordered: Sequence[TraceNode],
    stays: Sequence[Stay],
    keeps: Callable[[Sequence[TraceNode]], bool],
) -> int:
    """The smallest K whose first K nodes `keeps` the bound: doubling up from one node,
    then bisecting; 0 if even every node fails it."""
    low, high = 0, 1
    while not keeps(ordered[:high]):
        if high >= len(ordered):
            return 0
        low, high = high, min(2 * high, len(ordered))
    while high - low > 1:
        middle = (low + high) // 2
        if keeps(ordered[:middle]):
            high = middle
        else:
            low = middle
    return high


def nearest_rank(values: Sequence[int], share: float) -> int:
    """The nearest-rank percentile of sorted `values` (0 when there are none)."""
    if not values:
        return 0
    return values[max(0, math.ceil(share * len(values)) - 1)]


def summary(run: Run, stays: Sequence[Stay]) -> dict[str, object]:
    """A run's figures: who waited and how long (seconds), and its allocation."""
    waited = run.waited
    span = _span(stays)
    return {
        "tasks": len(stays), "waited": len(waited), "never_placed": run.never_placed,
        "wait_median_s": statistics.median(waited) if waited else 0,
        "wait_p95_s": nearest_rank(waited, 0.95), "wait_max_s": waited[-1] if waited else 0,
        "allocation_peak": round(max((ratio for _, ratio in run.curve), default=0.0), 6),
        "allocation_mean": round(time_mean(run.curve, *span), 6), "span_s": list(span),
        "curve": sampled(run.curve, *span),
    }  # fmt: skip


def _span(stays: Sequence[Stay]) -> tuple[int, int]:
    """The trace's busy part: from the arrival of the task 1 % of the way through the list
    (in arrival order; before it, a few tasks over months) to the last deletion."""
    arrivals = sorted(stay.arrival for stay in stays)
    return arrivals[len(arrivals) // 100], max(stay.arrival + stay.lifetime for stay in stays)


def _at(curve: Sequence[tuple[int, float]], when: float) -> float:
    """The step curve's value at `when` (0 before its first point)."""
    low, high = 0, len(curve)
    while low < high:
        middle = (low + high) // 2
        if curve[middle][0] <= when:
            low = middle + 1
        else:
            high = middle
    return curve[low - 1][1] if low else 0.0


def time_mean(curve: Sequence[tuple[int, float]], first: int, last: int) -> float:
    """The step curve's mean over [first, last]."""
    if last <= first:
        return 0.0
    total = 0.0
    for (when, value), (later, _) in zip(curve, [*curve[1:], (last, 0.0)], strict=True):
        total += value * max(0, min(later, last) - max(when, first))
    return total / (last - first)


def sampled(curve: Sequence[tuple[int, float]], first: int, last: int) -> list[list[float]]:
    """The curve over _SAMPLES equal stretches of [first, last]: each stretch's start
    (seconds) and the highest ratio in it."""
    step = (last - first) / _SAMPLES
    peaks = [_at(curve, first + step * index) for index in range(_SAMPLES)]
    for when, ratio in curve:
        index = math.floor((when - first) / step) if step else 0
        if 0 <= index < _SAMPLES:
            peaks[index] = max(peaks[index], ratio)
    return [[round(first + step * index), round(peaks[index], 6)] for index in range(_SAMPLES)]


def fewest(
    name: str, ordered: Sequence[TraceNode], stays: Sequence[Stay], seed: int, bound: int
) -> dict[str, object]:
    """The record of the fewest first nodes of `ordered` on which policy `name` keeps every
    wait within `bound` seconds: their count, GPUs, the replay on them, and the longest
    wait on one node fewer."""
    began = time.perf_counter()

    def run_on(chosen: Sequence[TraceNode], stop: float = math.inf) -> Run:
        policy = policy_for(name, chosen, stays, seed)
        return replay(stays, policy, sum(node.gpus for node in chosen), stop)

    count = fewest_nodes(ordered, stays, lambda chosen: run_on(chosen, bound).max_wait <= bound)
    # 0: not even every node keeps the bound; the record is then the replay on all of them.
    kept = count > 0
    count = count or len(ordered)
    chosen = ordered[:count]
    run, short = run_on(chosen), run_on(ordered[: count - 1])
    return {
        "kind": "fewest", "policy": name, "seed": seed, "bound_s": bound, "kept": kept,
        "nodes": count,
        "gpus": sum(node.gpus for node in chosen),
        "one_fewer_max_wait_s": None if math.isinf(short.max_wait) else short.max_wait,
        "seconds": round(time.perf_counter() - began, 1), **summary(run, stays),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.packing.departures", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated: {', '.join(POLICIES)}"
    )
    parser.add_argument("--seeds", default="42", help="the default profile's draws (ties)")
    parser.add_argument(
        "--bounds",
        default="0,600",
        help="longest waits allowed, seconds, comma-separated: the fewest nodes for each",
    )
    parser.add_argument("--list", default="default", help="the task list (one with times)")
    parser.add_argument(
        "--largest-gpus",
        type=int,
        help="leave out the tasks asking more GPUs than this (the rest keep their times)",
    )
    parser.add_argument("--record", type=Path, help="a JSON Lines file the figures go to")
    parser.add_argument(
        "--fewest-only", action="store_true", help="leave out the replay on every node"
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help=f"only write the table and plot of {RESULTS.name} into docs/",
    )
    parser.add_argument(
        "--plot-bound", type=int, default=600, help="the bound whose GPUs the plot draws"
    )
    args = parser.parse_args(argv)
    if args.report:
        report.write_departures(RESULTS, args.plot_bound)
        return 0
    policies = args.policies.split(",")
    wrong = [policy for policy in policies if policy not in POLICIES]
    if wrong:
        print(f"--policies: no {', '.join(wrong)}; one of {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    try:
        stays = read_stays(task_list(args.list))
        if args.largest_gpus is not None:
            stays = [stay for stay in stays if stay.task.num_gpu <= args.largest_gpus]
        seeds = [int(seed) for seed in args.seeds.split(",")]
        bounds = [int(bound) for bound in args.bounds.split(",")]
    except ValueError as error:
        print(f"departures: {error}", file=sys.stderr)
        return 2
    nodes = read_nodes()
    ordered = spread(nodes)
    commit = head_commit() if args.record else ""

    def record(line: dict[str, object]) -> None:
        shown = {key: value for key, value in line.items() if key != "curve"}
        print(json.dumps(shown), flush=True)
        if args.record:
            with args.record.open("a") as file:
                limit = {} if args.largest_gpus is None else {"largest_gpus": args.largest_gpus}
                file.write(
                    json.dumps({**line, "list": args.list, **limit, "commit": commit}) + "\n"
                )

    for seed in seeds:
        for name in policies:
            if name not in ("default", "most-allocated") and seed != seeds[0]:
                continue  # only kube-scheduler's profiles draw
            for bound in bounds:
                record(fewest(name, ordered, stays, seed, bound))
            if args.fewest_only:
                continue
            began = time.perf_counter()
            gpus = sum(node.gpus for node in nodes)
            run = replay(stays, policy_for(name, nodes, stays, seed), gpus)
            record({
                "kind": "whole", "policy": name, "seed": seed, "nodes": len(nodes),
                "gpus": gpus, "seconds": round(time.perf_counter() - began, 1),
                **summary(run, stays),
            })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
