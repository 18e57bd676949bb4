"""`python -m bench.packing.offline`: the extender's placements on the whole trace, in
process, for as many seeds as wanted.

No cluster: each task in turn (the replay's workload and order) arrives as a Pod with its
ResourceClaim (`dra` at S shares per GPU), the extender's own view scores the nodes that
pass the scheduler's filters, as it answers kube-scheduler (asked only where two or more
pass: `extender_cost.prioritized`), and the Pod is bound on the best-scored node, with the
DRA allocator's first fit (`extender_cost.bind`), before the next one arrives. Ties are
broken as the extender breaks them (`tie_broken`: the lowest node name) or, as
`extender-random-ties`, at random among the best nodes, as kube-scheduler breaks ties
between equal totals; `fgd` places the same tasks as the FGD paper's simulator would
(`place_fgd`), the oracle to compare with on the same workloads. Left out, and so what a
live replay adds: the scheduler's queue and retries, the watch's lag, and the Pods the watch
shows before kube-scheduler reaches them; `--lag`, `--jitter` and `--batches` model the lag,
the order a live cluster takes Pods in, and the batches the replay creates them in. A seed
takes 20 seconds to three minutes where a live replay takes 45 to 90, so this gives the ten
seeds a live replay cannot; the live replay of one seed checks it (docs/performance.md).

In the artefact's order the nodes carry the names the artefact's simulator gives them in
that seed's run (`trace.artefact_names`), so both policies break their ties by name over
the cluster the paper's FGD ran on; `--trace-names` keeps the trace's names, as the live
replays name their nodes.

Each run gives the GPU demand placed when the arrivals cross 100 % of the cluster's GPUs
and at the end (130 %), as the live replays count it, and the same two figures as the FGD
artefact reads its own runs (`artefact_reading`), which its published figures are
compared with.

    python -m bench.packing.offline --seeds 42,43,44 --policies extender,fgd
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from castslice.contract import Manifest
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import (
    NodeFree,
    PodShape,
    accessible,
    fgd_choice,
    take,
    tie_broken,
)

from .extender_cost import (
    CAPACITY,
    bind,
    claim_manifest,
    feasible_nodes,
    node_manifest,
    pod_manifest,
    prioritized,
    slice_manifest,
)
from .fgd_arithmetic import SimulatorFragmentation
from .replay import batch_ends
from .trace import (
    LISTS,
    MILLI,
    ORDERS,
    TraceNode,
    TraceTask,
    named_as_simulated,
    read_nodes,
    read_tasks,
    sample_nodes,
    task_list,
    workload,
)

# The policies compared, and what the table calls them: the extender as it is; without
# counting Pods where it expects them (`ClusterView.prioritize`), as it was; that, with
# kube-scheduler's random pick among equal scores instead of its name order, as it was
# first; and FGD itself.
POLICIES = {
    "extender": "extender",
    "extender-no-expect": "extender, not counting expected Pods",
    "extender-random-ties": "extender, random ties",
    "fgd": "FGD (the simulator's policy, in process)",
}


def jittered(tasks: Sequence[TraceTask], width: int, seed: int) -> list[TraceTask]:
    """`tasks` as a live cluster takes them: nearly in order, each moved by less than
    `width` places at random (Pods created several at a time, their claims by a
    controller), reproducibly for a seed."""
    draw = random.Random(seed)
    keys = [index + draw.uniform(0, width) for index in range(len(tasks))]
    return [tasks[index] for index in sorted(range(len(tasks)), key=keys.__getitem__)]


@dataclass(frozen=True)
class Placed:
    """GPUs placed over the cluster's, once the arrived demand reached 100 % and at the end
    (130 %), and the node each task went to ("": Pending)."""

    seed: int
    policy: str
    at_100: float
    at_130: float
    nodes: tuple[str, ...] = ()
    # What each node has left at the end, by name.
    left: tuple[tuple[str, NodeFree], ...] = ()
    # The figures at 100 % and 130 % in %, as the FGD artefact reads them (`artefact_reading`).
    artefact_figures: tuple[float | None, float | None] | None = None

    @classmethod
    def of(
        cls,
        seed: int,
        policy: str,
        tasks: Sequence[TraceTask],
        nodes: Sequence[str],
        gpus: int,
        left: tuple[tuple[str, NodeFree], ...] = (),
    ) -> Placed:
        """The figures of a run: `tasks` in the order they arrived, `nodes` where each went
        ("": Pending), on a cluster of `gpus`, read both ways."""
        arrived, placed = Fraction(0), Fraction(0)
        at_100: Fraction | None = None
        for task, node in zip(tasks, nodes, strict=True):
            if node:
                placed += task.demand
            arrived += task.demand
            if at_100 is None and arrived >= gpus:
                at_100 = placed
        return cls(
            seed,
            policy,
            float((at_100 or placed) / gpus),
            float(placed / gpus),
            tuple(nodes),
            left,
            artefact_reading(tasks, nodes, gpus),
        )


def artefact_reading(
    tasks: Sequence[TraceTask], nodes: Sequence[str], gpus: int
) -> tuple[float | None, float | None]:
    """The GPUs placed, in %, at 100 % and 130 % arrival as the FGD artefact reads its runs
    (hkust-adsl/kubernetes-scheduler-simulator 8f3d641,
    experiments/analysis/merge_alloc_discrete.py): its simulator logs the GPU thousandths
    arrived and placed after every task (`ClusterGpuFragReport`); each line's arrival is
    rounded to a whole %, its allocation to the hundredth, and a point's figure is the mean
    allocation of the lines whose arrival rounds to it (of those within 1 % where none
    does), rounded to the hundredth. Where allocation still rises or falls behind around a
    point, this mean differs from the allocation when the arrivals cross it (`Placed.at_100`):
    on `gpuspec10` and `gpuspec25` at 100 % by up to 0.1 points.

    `tasks` in the order they arrived, `nodes` where each went ("": Pending), `gpus` the
    cluster's. None where no line is within 1 % of a point (the artefact gives no figure).
    """
    arrived = placed = 0
    lines: list[tuple[float, float]] = []
    for task, node in zip(tasks, nodes, strict=True):
        milli = task.num_gpu * task.gpu_milli
        arrived += milli
        placed += milli if node else 0
        # pandas' `x / total_gpus / 10` on integers, then Python's round.
        lines.append((round(arrived / gpus / 10, 0), round(placed / gpus / 10, 2)))

    def at(point: int) -> float | None:
        near = [alloc for ratio, alloc in lines if ratio == point] or [
            alloc for ratio, alloc in lines if point - 1 <= ratio <= point + 1
        ]
        return round(statistics.fmean(near), 2) if near else None

    return at(100), at(130)


def place_all(
    nodes: Sequence[TraceNode],
    tasks: Sequence[TraceTask],
    policy: str,
    seed: int,
    shares: int = 100,
    lag: int = 0,
    batches: bool = False,
    up_front: bool = False,
) -> Placed:
    """Each task arrives, is scored and is bound (or left Pending) before the next.

    `lag`: the extender's view learns each binding only once that many more tasks have
    been scored, as a watch that trails kube-scheduler's binding (which fits and binds
    on the scheduler's own, current view). `batches`: the extender's view is shown each
    batch of Pods (and claims) the live replay creates at once (`replay.batch_ends`)
    before the first of them is scored, so its typical Pods are learnt from Pods not
    scored yet. `up_front`: the extender's view is shown every Pod (and claim) before the
    first is scored, so its typical Pods are the whole workload's from the start, as
    `castslice plan` counts them (castslice.extender.placing). `policy`: one of POLICIES
    but `fgd`."""
    if policy not in POLICIES or policy == "fgd":
        raise ValueError(
            f"policy {policy!r}: one of {', '.join(p for p in POLICIES if p != 'fgd')}"
        )
    gpus = sum(node.gpus for node in nodes)
    # The extender's view, and the scheduler's, which binds on what is placed, not on what
    # the extender expects: one view serves both only without lag or expectations.
    # Time stands still in process: a Pod expected on a node is counted there until the
    # view learns where it went, however long the machine takes.
    views = [
        ClusterView(CAPACITY, shares, clock=lambda: 0.0)
        for _ in range(2 if lag or batches or up_front or policy == "extender" else 1)
    ]
    for each in views:
        each.replace("nodes", [node_manifest(node) for node in nodes])
        each.replace(
            "resourceslices", [slice_manifest(node, shares) for node in nodes if node.gpus]
        )
    view, scheduler = views[0], views[-1]
    # The bindings the extender's view has not learnt yet, task by task.
    unseen: deque[list[tuple[str, str, Manifest]]] = deque()
    names = [node.name for node in nodes]
    draw = random.Random(seed)
    where: list[str] = []
    # Where each batch the extender's view is shown ends: the replay's, or each task alone.
    if up_front:
        ends = iter([len(tasks)])
    else:
        ends = iter(batch_ends(tasks, gpus) if batches else range(1, len(tasks) + 1))
    shown = 0
    for index, task in enumerate(tasks):
        claim, pod = arriving(index, task)
        add_arriving(scheduler, claim, pod, task, shares)
        while view is not scheduler and shown <= index:
            end = next(ends)
            for ahead in range(shown, end):
                add_arriving(view, *arriving(ahead, tasks[ahead]), tasks[ahead], shares)
            shown = end
        feasible = feasible_nodes(scheduler, task, names, shares)
        if policy == "extender" or len(feasible) < 2:
            scores = prioritized(view, pod, feasible)
        elif policy == "extender-no-expect":
            scores = tie_broken(view.scores(pod, feasible))
        else:
            # kube-scheduler's pick among equal totals, made up front: the best scores in a
            # random order (bind takes the first that fits, by score, stably).
            scores = view.scores(pod, feasible)
            draw.shuffle(scores)
        learnt: list[tuple[str, str, Manifest]] = []
        unseen.append(learnt)
        node = bind(
            scheduler, pod, task, scores, shares, learnt.append if view is not scheduler else None
        )
        while len(unseen) > lag:
            for event in unseen.popleft():
                view.apply(*event)
        where.append(node or "")
    left = tuple((name, free) for name in names if (free := scheduler.free(name)) is not None)
    return Placed.of(seed, policy, tasks, where, gpus, left)


def arriving(index: int, task: TraceTask) -> tuple[str | None, Manifest]:
    """The task's claim name (None: no GPU) and its Pod."""
    name = f"task-{index:05d}"
    claim = f"{name}-gpu" if task.num_gpu else None
    return claim, pod_manifest(name, task, "", claim)


def add_arriving(
    view: ClusterView, claim: str | None, pod: Manifest, task: TraceTask, shares: int
) -> None:
    if claim is not None:
        view.apply("resourceclaims", "ADDED", claim_manifest(claim, task, shares, None))
    view.apply("pods", "ADDED", pod)


def shape_of(task: TraceTask, memory: bool = True) -> PodShape:
    return PodShape(
        task.cpu_milli,
        task.gpu_milli if task.num_gpu else 0,
        task.num_gpu,
        task.gpu_spec,
        task.memory_mib if memory else 0,
    )


# Per node, its state and FGD's choices made on it for each shape, while it stays so.
Remembered = dict[str, tuple[NodeFree, dict[PodShape, tuple[int, int | None]]]]


def fgd_measure(known: Sequence[TraceTask]) -> SimulatorFragmentation:
    """FGD's fragmentation measure: the typical Pods counted once over `known` (the trace
    before tuning), memory not looked at, as the paper's simulator counts them, with its
    float steps."""
    return SimulatorFragmentation(shape_of(task, memory=False) for task in known)


def fgd_pick(
    free: dict[str, NodeFree],
    names: Sequence[str],
    pod: PodShape,
    measure: SimulatorFragmentation,
    remembered: Remembered,
) -> tuple[str, int | None] | None:
    """The node FGD places `pod` on among `names` (each scored by `fgd_choice`, the lowest
    name of the best) and, for a share of one GPU, the GPU it scored; None: fits none."""
    best: tuple[int, str, int | None] | None = None
    for name in names:
        node = free[name]
        if (pod.gpus and not accessible(node, pod)) or take(node, pod) is None:
            continue
        state, choices = remembered.get(name, (None, {}))
        if state is not node:
            state, choices = node, {}
            remembered[name] = (node, choices)
        choice = choices.get(pod)
        if choice is None:
            choice = choices[pod] = fgd_choice(node, pod, (), None, measure.fragmentation)
        if best is None or choice[0] > best[0]:
            best = (choice[0], name, choice[1])
    return None if best is None else (best[1], best[2])


def place_fgd(
    nodes: Sequence[TraceNode], tasks: Sequence[TraceTask], known: Sequence[TraceTask], seed: int
) -> Placed:
    """FGD itself, as the paper's simulator runs it, on the same nodes and tasks: the
    typical Pods counted once over `known` (the trace before tuning, memory not looked at),
    every node scored (`fgd_choice`), the lowest name of the best, and for a share of one
    GPU the GPU FGD scored, not the first that fits. The oracle the extender is measured
    against, like for like."""
    measure = fgd_measure(known)
    free = {
        node.name: NodeFree(node.cpu_milli, (MILLI,) * node.gpus, node.model, node.memory_mib)
        for node in nodes
    }
    names = sorted(free)
    gpus = sum(node.gpus for node in nodes)
    remembered: Remembered = {}
    where: list[str] = []
    for task in tasks:
        pod = shape_of(task)
        best = fgd_pick(free, names, pod, measure, remembered)
        if best is not None:
            name, gpu = best
            after = take(free[name], pod, gpu)
            assert after is not None
            free[name] = after
        where.append(best[0] if best else "")
    return Placed.of(seed, "fgd", tasks, where, gpus)


def table(results: Sequence[Placed]) -> str:
    """A Markdown table: each seed's figures per policy, and their mean."""
    policies = sorted({result.policy for result in results}, key=list(POLICIES).index)
    by = {(result.seed, result.policy): result for result in results}
    seeds = sorted({result.seed for result in results})
    head = "| seed | " + " | ".join(
        f"{POLICIES[policy]}, at 100 % | at 130 %" for policy in policies
    )
    percent = "{:.2f} %".format
    lines = [head + " |", "|---" * (1 + 2 * len(policies)) + "|"]
    for seed in seeds:
        cells = [
            f"{percent(by[seed, policy].at_100 * 100)} | {percent(by[seed, policy].at_130 * 100)}"
            for policy in policies
        ]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    means = []
    for policy in policies:
        chosen = [result for result in results if result.policy == policy]
        means.append(
            f"{percent(statistics.fmean(r.at_100 for r in chosen) * 100)} | "
            f"{percent(statistics.fmean(r.at_130 for r in chosen) * 100)}"
        )
    lines.append("| mean | " + " | ".join(means) + " |")
    return "\n".join(lines)


def figures(result: Placed, args: argparse.Namespace, commit: str) -> dict[str, object]:
    """One line of a record: what was placed, how, by which commit's code, and the two
    figures in %."""
    return {
        "list": args.list, "order": args.order, "every": args.every, "lag": args.lag,
        "jitter": args.jitter, "batches": args.batches, "names": node_names(args),
        "seed": result.seed,
        "policy": result.policy, "at_100": round(result.at_100 * 100, 4),
        "at_130": round(result.at_130 * 100, 4), "commit": commit,
        **({"artefact_figures": list(result.artefact_figures)} if result.artefact_figures else {}),
    }  # fmt: skip


def node_names(args: argparse.Namespace) -> str:
    """Whose names the nodes carry: the artefact's simulator's, or the trace's."""
    return "artefact" if args.order == "artefact" and not args.trace_names else "trace"


def nodes_named(
    args: argparse.Namespace, nodes: Sequence[TraceNode], seed: int, source: Path
) -> Sequence[TraceNode]:
    """`nodes` with the names `node_names` says they carry in the run of `seed`."""
    if node_names(args) == "artefact":
        return named_as_simulated(nodes, seed, source)
    return nodes


def head_commit() -> str:
    """The checkout's commit, short, with `+` where its files differ from it ("": none)."""

    def git(*arguments: str) -> str:
        done = subprocess.run(
            ["git", *arguments],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    try:
        commit, changed = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "-uno")
    except (OSError, subprocess.CalledProcessError):
        return ""
    return commit + ("+" if changed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.packing.offline", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seeds", default="42", help="workload seeds, comma-separated")
    parser.add_argument(
        "--policies", default="extender", help=f"comma-separated: {', '.join(POLICIES)}"
    )
    parser.add_argument(
        "--lag", type=int, default=0, help="tasks the extender's view learns bindings after"
    )
    parser.add_argument(
        "--jitter", type=int, default=0, help="each task moved by less than N places at random"
    )
    parser.add_argument(
        "--batches",
        action="store_true",
        help="the extender's view sees Pods in the live replay's batches, before scoring them",
    )
    parser.add_argument("--order", default="shuffled", choices=ORDERS)
    parser.add_argument("--every", type=int, default=1, help="one trace node in N (1: all)")
    parser.add_argument(
        "--list", default="default", choices=LISTS, help="the FGD artefact's task list to place"
    )
    parser.add_argument(
        "--trace-names",
        action="store_true",
        help="in the artefact's order, keep the trace's node names, not its simulator's",
    )
    parser.add_argument(
        "--record", type=Path, help="a JSON Lines file each seed's figures are appended to"
    )
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    wrong = [policy for policy in policies if policy not in POLICIES]
    if wrong:
        print(f"--policies: no {', '.join(wrong)}; one of {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    sampled = sample_nodes(read_nodes(), args.every)
    commit = head_commit() if args.record else ""
    source = task_list(args.list)
    tasks = read_tasks(source)
    results = []
    for seed in map(int, args.seeds.split(",")):
        nodes = nodes_named(args, sampled, seed, source)
        arrived = workload(tasks, sum(node.gpus for node in nodes), seed, args.order, source)
        if args.jitter:
            arrived = jittered(arrived, args.jitter, seed)
        for policy in policies:
            if policy == "fgd":
                result = place_fgd(nodes, arrived, tasks, seed)
            else:
                result = place_all(
                    nodes,
                    arrived,
                    policy,
                    seed,
                    lag=args.lag,
                    batches=args.batches,
                )
            print(f"seed {seed}, {POLICIES[policy]}: {result.at_100 * 100:.2f} % at 100 %, "
                  f"{result.at_130 * 100:.2f} % at 130 %", flush=True)  # fmt: skip
            results.append(result)
            if args.record:
                with args.record.open("a") as record:
                    record.write(json.dumps(figures(result, args, commit)) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
