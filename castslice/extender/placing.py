"""The extender's placements in process: the GPUs a workload needs once the stock
kube-scheduler with CastSlice's extender places it, rather than once every share packs
perfectly (`castslice plan`'s second count).

Each task arrives in the input's order (with its departures, where the input gives the
times: a task leaves at its deletion time and frees what it held), and is bound, before the
next arrives, on the node the extender scores best of those it fits (kube-scheduler's
filters: its CPU, memory and GPU model, and GPUs with its share free), its share on the
first GPU that has it free (the DRA allocator's first fit); ties go to the lowest node name,
as the extender breaks them (`tie_broken`). The score is the extender's
(`fragmentation.Scorer`), over the typical Pods of the whole workload: what the extender
learns once it has seen the workload's Pods (it learns them as they arrive; in process they
are known up front, which keeps the search below to seconds).

A cluster of n nodes is the first n of the input's nodes taken in an order that keeps their
mix (each kind of node spread evenly over the order) and repeated past the list's end: a
cluster of n + 1 nodes holds the cluster of n. The count is the fewest such nodes on which
no task waits: a task that fits no node when it arrives counts as a failure (the scheduler
would leave it Pending). Placement need not be monotone in the nodes given, so the search
(growing by a quarter, then halving the interval) finds a count where every task is placed
and one node fewer leaves one Pending; a smaller cluster further down that places every
task is not ruled out.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from castslice.extender.fragmentation import (
    MILLI,
    NodeFree,
    PodShape,
    Scorer,
    accessible,
    first_fit,
    take,
    typical_pods,
)

# The CPU and memory of a node whose size the input does not give: more than any task asks.
UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class NodeKind:
    """One node of the input: its name, allocatable CPU (thousandths) and memory (MiB), its
    GPUs and their model ("" for any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str = ""


@dataclass(frozen=True)
class Arrival:
    """One task as the scheduler sees it: what it asks of a node (memory in MiB), its name,
    and when it arrives and leaves (None: it never leaves, or the input has no times)."""

    shape: PodShape
    name: str
    arrives: int | None = None
    leaves: int | None = None


@dataclass(frozen=True)
class Scheduled:
    """The fewest nodes (and their GPUs) on which every task is placed when it arrives;
    `short`: the first task left Pending on one node fewer; `departures`: whether tasks
    left."""

    nodes: int
    gpus: int
    departures: bool
    short: str
    # GPUs if every share packed perfectly at the busiest moment (all at once without
    # departures).
    floor: int

    def as_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "nodes": self.nodes,
            "departures": self.departures,
            "pendingWithOneNodeFewer": self.short,
            "perfectPackingAtPeak": self.floor,
        }


def cluster(nodes: Sequence[NodeKind], count: int) -> list[NodeKind]:
    """The first `count` nodes of `nodes` in an order that keeps their mix: each kind (size
    and model) spread evenly over it, the list's order within a kind; repeated, with a
    numbered name, past the list's end."""
    kinds = Counter(_kind(node) for node in nodes)
    seen: Counter[tuple[int, int, int, str]] = Counter()
    keys = []
    for index, node in enumerate(nodes):
        kind = _kind(node)
        keys.append(((2 * seen[kind] + 1) / (2 * kinds[kind]), index))
        seen[kind] += 1
    order = [nodes[index] for _, index in sorted(keys)]
    return [
        replace(
            order[place % len(order)],
            name=_copy(order[place % len(order)].name, place // len(order)),
        )
        for place in range(count)
    ]


def _kind(node: NodeKind) -> tuple[int, int, int, str]:
    return (node.gpus, node.cpu_milli, node.memory_mib, node.model)


def _copy(name: str, copy: int) -> str:
    return name if copy == 0 else f"{name}-{copy}"


def first_pending(
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: Scorer
) -> int | None:
    """The index of the first task, in the order they arrive, that fits no node when it
    arrives; None: all placed."""
    return _place(nodes, arrivals, scorer, stop=True)[1]


def placements(nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: Scorer) -> list[str]:
    """The node each task is bound on ("": Pending, or it asks nothing of a node). A task
    left Pending never comes back: the count is of nodes on which no task waits."""
    return _place(nodes, arrivals, scorer, stop=False)[0]


def _place(
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: Scorer, stop: bool
) -> tuple[list[str], int | None]:
    """Where each task goes, and the first left Pending; with `stop`, placing ends there."""
    free = [
        NodeFree(node.cpu_milli, (MILLI,) * node.gpus, node.model, node.memory_mib)
        for node in nodes
    ]
    ranks = [0] * len(nodes)
    for rank, index in enumerate(sorted(range(len(nodes)), key=lambda i: nodes[i].name)):
        ranks[index] = rank
    placer = _Placer(free, ranks, scorer)
    held: dict[int, tuple[int, PodShape, tuple[int, ...]]] = {}
    where = [""] * len(arrivals)
    pending: int | None = None
    for kind, index in _events(arrivals):
        if kind == _LEAVES:
            if index in held:
                placer.release(*held.pop(index))
            continue
        shape = arrivals[index].shape
        if shape.asks_nothing:
            continue
        found = placer.bind(shape)
        if found is None:
            pending = index if pending is None else pending
            if stop:
                break
            continue
        held[index] = found
        where[index] = nodes[found[0]].name
    return where, pending


_LEAVES, _ARRIVES, _LEAVES_AT_ONCE = 0, 1, 2


def _events(arrivals: Sequence[Arrival]) -> list[tuple[int, int]]:
    """(kind, task) in time order, departures before arrivals at the same time (what left
    is free for what comes); without times, arrivals in the input's order."""
    if all(arrival.arrives is None for arrival in arrivals):
        return [(_ARRIVES, index) for index in range(len(arrivals))]
    timed: list[tuple[int, int, int]] = []
    for index, arrival in enumerate(arrivals):
        arrives = arrival.arrives or 0
        timed.append((arrives, _ARRIVES, index))
        if arrival.leaves is not None:
            # A task that leaves when (or before) it arrives is placed, then leaves.
            kind = _LEAVES if arrival.leaves > arrives else _LEAVES_AT_ONCE
            timed.append((max(arrival.leaves, arrives), kind, index))
    timed.sort()
    return [(_LEAVES if kind == _LEAVES_AT_ONCE else kind, index) for _, kind, index in timed]


class _Placer:
    """The nodes' free resources, and per Pod shape a heap of the nodes it fits by score:
    a node's entries are stale once it changes, and a shape asked again rescores only the
    nodes changed since it was last asked."""

    def __init__(self, free: list[NodeFree], ranks: list[int], scorer: Scorer) -> None:
        self.free = free
        self.ranks = ranks
        self.scorer = scorer
        self.versions = [0] * len(free)
        self.changed: list[int] = []
        # Per shape: its heap of (-score, name rank, node, version), and how much of
        # `changed` it has seen.
        self.heaps: dict[PodShape, tuple[list[tuple[int, int, int, int]], list[int]]] = {}

    def bind(self, shape: PodShape) -> tuple[int, PodShape, tuple[int, ...]] | None:
        """The node the shape goes to, updated; None: it fits none."""
        entry = self.heaps.get(shape)
        if entry is None:
            heap: list[tuple[int, int, int, int]] = []
            entry = self.heaps[shape] = (heap, [len(self.changed)])
            self._push(shape, heap, range(len(self.free)))
        else:
            heap, seen = entry
            self._push(shape, heap, set(self.changed[seen[0] :]))
            seen[0] = len(self.changed)
        while heap and heap[0][3] != self.versions[heap[0][2]]:
            heapq.heappop(heap)
        if not heap:
            return None
        node = heap[0][2]
        before = self.free[node]
        after = take(before, shape, first_fit(before, shape))
        assert after is not None
        self._set(node, after)
        taken = tuple(
            gpu
            for gpu, (was, now) in enumerate(zip(before.gpu_milli, after.gpu_milli, strict=True))
            if was != now
        )
        return node, shape, taken

    def release(self, node: int, shape: PodShape, gpus: tuple[int, ...]) -> None:
        """What a task that leaves held on `node` (its share of GPUs `gpus`) is free again."""
        free = self.free[node]
        left = list(free.gpu_milli)
        for gpu in gpus:
            left[gpu] += shape.gpu_milli
        self._set(
            node,
            replace(
                free,
                cpu_milli=free.cpu_milli + shape.cpu_milli,
                memory=free.memory + shape.memory,
                gpu_milli=tuple(left),
            ),
        )

    def _set(self, node: int, free: NodeFree) -> None:
        self.free[node] = free
        self.versions[node] += 1
        self.changed.append(node)

    def _push(
        self, shape: PodShape, heap: list[tuple[int, int, int, int]], nodes: Iterable[int]
    ) -> None:
        # Nodes left alike score alike: each state scored once per call.
        scores: dict[NodeFree, int] = {}
        for node in nodes:
            free = self.free[node]
            if shape.gpus and not accessible(free, shape):
                continue
            if take(free, shape, first_fit(free, shape)) is None:
                continue
            score = scores.get(free)
            if score is None:
                score = scores[free] = self.scorer.score(free, shape)
            heapq.heappush(heap, (-score, self.ranks[node], node, self.versions[node]))


def scorer_for(nodes: Sequence[NodeKind], arrivals: Sequence[Arrival]) -> Scorer:
    """The extender's score over the typical Pods of the whole workload, its pinned Pods
    weighed against the GPUs of each model `nodes` have and its CPU against their CPU per
    GPU (`cluster` keeps their mix)."""
    gpus_per_model: Counter[str] = Counter()
    for node in nodes:
        if node.model:
            gpus_per_model[node.model] += node.gpus
    gpus = sum(node.gpus for node in nodes)
    cpu = sum(node.cpu_milli for node in nodes if node.gpus)
    return Scorer(
        typical_pods(arrival.shape for arrival in arrivals),
        gpus_per_model,
        cpu / (gpus * MILLI) if gpus else 0.0,
    )


def fewest(nodes: Sequence[NodeKind], arrivals: Sequence[Arrival]) -> Scheduled:
    """The fewest nodes of `cluster(nodes, n)` on which every task is placed, found by
    growing the count by a quarter from the nodes whose GPUs the peak GPU demand fills, then
    halving the interval.
    Every task must fit an empty node of some kind (ValueError naming the first that does
    not; `unplaceable` names them all)."""
    scorer = scorer_for(nodes, arrivals)
    departures = any(arrival.leaves is not None for arrival in arrivals)
    demand = peak_demand(arrivals)
    order = cluster(nodes, len(nodes))
    per_node = sum(node.gpus for node in order) / len(order)
    start = max(1, int(demand / MILLI / per_node)) if per_node else 1
    results: dict[int, int | None] = {}

    def pending(count: int) -> int | None:
        if count not in results:
            results[count] = first_pending(cluster(nodes, count), arrivals, scorer)
        return results[count]

    unfit = unplaceable(nodes, arrivals)
    if unfit:
        raise ValueError(f"{unfit[0]} fits no empty node of the list")
    low, high = 0, start
    # Past this, every task could have an empty node of each kind to itself.
    enough = len(nodes) * max(1, len(arrivals))
    while pending(high) is not None and high < enough:
        low, high = high, min(max(high + 1, high * 5 // 4), enough)
    if pending(high) is not None:
        raise ValueError(f"{arrivals[pending(high) or 0].name} found no node on {high} nodes")
    while high - low > 1:
        middle = (low + high) // 2
        if pending(middle) is None:
            high = middle
        else:
            low = middle
    short = pending(high - 1)
    chosen = cluster(nodes, high)
    return Scheduled(
        high,
        sum(node.gpus for node in chosen),
        departures,
        arrivals[short].name if short is not None and arrivals else "",
        -(-peak_demand(arrivals) // MILLI),
    )


def peak_demand(arrivals: Sequence[Arrival]) -> int:
    """The most GPU thousandths the tasks present at once ask for."""
    present = most = 0
    for kind, index in _events(arrivals):
        shape = arrivals[index].shape
        asked = shape.gpus * shape.gpu_milli
        present += -asked if kind == _LEAVES else asked
        most = max(most, present)
    return most


def unplaceable(nodes: Sequence[NodeKind], arrivals: Sequence[Arrival]) -> list[str]:
    """The tasks no empty node of the list fits (CPU, memory, GPUs or GPU model)."""
    empty = {
        NodeFree(node.cpu_milli, (MILLI,) * node.gpus, node.model, node.memory_mib)
        for node in nodes
    }
    return [
        arrival.name
        for arrival in arrivals
        if not arrival.shape.asks_nothing
        and not any(
            (not arrival.shape.gpus or accessible(free, arrival.shape))
            and take(free, arrival.shape) is not None
            for free in empty
        )
    ]
