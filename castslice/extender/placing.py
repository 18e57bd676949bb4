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
are known up front, which keeps the search below to seconds). Where the extender does not
serve the GPUs (MIG instances), the score is the stock kube-scheduler's own
(`StockScores`); and beside either, kube-scheduler's with NodeResourcesFit's MostAllocated
strategy (infra/scheduler/most-allocated.yaml), a bin packer that knows nothing of GPUs.

A cluster of n nodes is the first n of the input's nodes taken in an order that keeps their
mix (each kind of node spread evenly over the order) and repeated past the list's end: a
cluster of n + 1 nodes holds the cluster of n. The count is the fewest such nodes on which
no task waits: a task that fits no node when it arrives counts as a failure (the scheduler
would leave it Pending). Placement need not be monotone in the nodes given, so the search
(growing by a quarter, then halving the interval) finds a count where every task is placed
and one node fewer leaves one Pending; a smaller cluster further down that places every
task is not ruled out. Where GPUs are shared by node pools, each pool is such a cluster of
its own, and a task's GPUs come only from its pool's (`fewest`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from castslice.extender.fragmentation import (
    MAX_NODE_SCORE,
    MILLI,
    NodeFree,
    PodShape,
    RareShapes,
    Scorer,
    accessible,
    cpu_per_gpu,
    first_fit,
    scoring_typical_pods,
    take,
)

# The CPU and memory of a node whose size the input does not give: more than any task asks.
UNBOUNDED = 1 << 62


# What ranks the nodes: the extender (its profile scores nothing else), kube-scheduler's
# default profile, or that profile with NodeResourcesFit's MostAllocated strategy.
Scoring = Literal["extender", "kube-scheduler", "most-allocated"]


@dataclass(frozen=True)
class NodeKind:
    """One node of the input: its name, allocatable CPU (thousandths) and memory (MiB), its
    GPUs and their model ("" for any), and its node pool."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str = ""
    # The node pool it is in, where GPUs are shared by node pools ("": none).
    pool: str = ""


@dataclass(frozen=True)
class Arrival:
    """One task as the scheduler sees it: what it asks of a node (memory in MiB), its name,
    and when it arrives and leaves (None: it never leaves, or the input has no times)."""

    shape: PodShape
    name: str
    arrives: int | None = None
    leaves: int | None = None


@dataclass(frozen=True)
class PoolCount:
    """One node pool's part of a count: its nodes and their GPUs, and the first task left
    Pending with one node fewer in that pool ("": none)."""

    pool: str
    nodes: int
    gpus: int
    short: str

    def as_dict(self) -> dict[str, object]:
        return {
            "pool": self.pool,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "pendingWithOneNodeFewer": self.short,
        }


@dataclass(frozen=True)
class Scheduled:
    """The fewest nodes (and their GPUs) on which every task is placed when it arrives;
    `short`: the first task left Pending on one node fewer; `departures`: whether tasks
    left; `pools`: each node pool's part where GPUs are shared by node pools (`short` is
    then the first pool's); `scored_by`: what ranked the nodes (`Scoring`)."""

    nodes: int
    gpus: int
    departures: bool
    short: str
    # GPUs if every share packed perfectly at the busiest moment (all at once without
    # departures).
    floor: int
    pools: tuple[PoolCount, ...] = ()
    scored_by: Scoring = "extender"

    def as_dict(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "nodes": self.nodes,
            "departures": self.departures,
            "scoredBy": self.scored_by,
            "pendingWithOneNodeFewer": self.short,
            "perfectPackingAtPeak": self.floor,
        } | ({"pools": [pool.as_dict() for pool in self.pools]} if self.pools else {})


class NodeScores(Protocol):
    """How a scheduler ranks the nodes a Pod fits: higher first."""

    def score(self, node: NodeKind, free: NodeFree, shape: PodShape) -> int: ...


@dataclass(frozen=True)
class ExtenderScores:
    """The extender's score (its `Scorer` over the workload's typical Pods)."""

    scorer: Scorer

    def score(self, node: NodeKind, free: NodeFree, shape: PodShape) -> int:
        return self.scorer.score(free, shape)


class StockScores:
    """kube-scheduler's default profile's scores that tell the nodes of a Pod apart by what
    it asks (k8s.io/kubernetes v1.37.2, pkg/scheduler/framework/plugins/noderesources):
    NodeResourcesFit's LeastAllocated over CPU and memory (least_allocated.go; with
    `most_allocated`, its MostAllocated strategy, most_allocated.go) plus
    NodeResourcesBalancedAllocation's score of the change the Pod makes to the balance of
    CPU and memory (balanced_allocation.go; none for a Pod that asks neither), each at
    weight 1. The other default scores are alike on every node for the Pods counted here
    (no affinity, taints, images or spread constraints). kube-scheduler's NodeResourcesFit
    scores the CPU and memory of a Pod that asks none as 100m and 200 MiB; here a Pod
    counts what it asks. Ties go to the lowest node name, as everywhere here, where
    kube-scheduler draws one of them at random."""

    def __init__(self, most_allocated: bool = False) -> None:
        self.most_allocated = most_allocated

    def score(self, node: NodeKind, free: NodeFree, shape: PodShape) -> int:
        # A resource the node has none of is left out, as kube-scheduler leaves it.
        had = [
            (whole - left, asked, whole)
            for whole, left, asked in (
                (node.cpu_milli, free.cpu_milli, shape.cpu_milli),
                (node.memory_mib, free.memory, shape.memory),
            )
            if whole
        ]
        if not had:
            return 0
        if not (shape.cpu_milli or shape.memory):
            return fit_score(had, self.most_allocated)
        return default_profile_score(had, self.most_allocated)


def default_profile_score(had: Sequence[tuple[int, int, int]], most_allocated: bool = False) -> int:
    """NodeResourcesFit's score (`fit_score`) plus NodeResourcesBalancedAllocation's score
    of the change the Pod makes to the balance (balancedResourceScorer), over (taken, asked,
    allocatable) of each resource, for a Pod that asks one of them."""
    with_pod = balance([(taken + asked, whole) for taken, asked, whole in had])
    without = balance([(taken, whole) for taken, _, whole in had])
    half = MAX_NODE_SCORE // 2
    return fit_score(had, most_allocated) + half + (half + with_pod - without) // 2


def fit_score(had: Sequence[tuple[int, int, int]], most_allocated: bool = False) -> int:
    """NodeResourcesFit's score over (taken, asked, allocatable) of each resource, weight 1
    each: LeastAllocated (leastRequestedScore: 0 where the Pod overflows), or MostAllocated
    (mostRequestedScore: what is asked counted up to the allocatable)."""
    return sum(
        min(taken + asked, whole) * MAX_NODE_SCORE // whole
        if most_allocated
        else (whole - taken - asked) * MAX_NODE_SCORE // whole
        if taken + asked <= whole
        else 0
        for taken, asked, whole in had
    ) // len(had)


def balance(used: Sequence[tuple[int, int]]) -> int:
    """balancedResourceScore over (used, allocatable) of each resource: 100 less the spread
    of their used fractions (half their gap for two)."""
    fractions = [min(taken / whole, 1.0) for taken, whole in used]
    gap = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - gap) * MAX_NODE_SCORE)


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
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: NodeScores
) -> int | None:
    """The index of the first task, in the order they arrive, that fits no node when it
    arrives; None: all placed."""
    return _place(nodes, arrivals, scorer, stop=True)[1]


def placements(
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: NodeScores
) -> list[str]:
    """The node each task is bound on ("": Pending, or it asks nothing of a node). A task
    left Pending never comes back: the count is of nodes on which no task waits."""
    return _place(nodes, arrivals, scorer, stop=False)[0]


def _place(
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scorer: NodeScores, stop: bool
) -> tuple[list[str], int | None]:
    """Where each task goes, and the first left Pending; with `stop`, placing ends there."""
    free = [_empty(node) for node in nodes]
    ranks = [0] * len(nodes)
    for rank, index in enumerate(sorted(range(len(nodes)), key=lambda i: nodes[i].name)):
        ranks[index] = rank
    placer = _Placer(nodes, free, ranks, scorer)
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

    def __init__(
        self, nodes: Sequence[NodeKind], free: list[NodeFree], ranks: list[int], scorer: NodeScores
    ) -> None:
        self.nodes = nodes
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
        # Nodes alike and left alike score alike: each state scored once per call.
        scores: dict[tuple[NodeFree, int, int], int] = {}
        for node in nodes:
            free = self.free[node]
            if shape.gpus and not accessible(free, shape):
                continue
            if take(free, shape, first_fit(free, shape)) is None:
                continue
            kind = self.nodes[node]
            key = (free, kind.cpu_milli, kind.memory_mib)
            score = scores.get(key)
            if score is None:
                score = scores[key] = self.scorer.score(kind, free, shape)
            heapq.heappush(heap, (-score, self.ranks[node], node, self.versions[node]))


def scorer_for(nodes: Sequence[NodeKind], arrivals: Sequence[Arrival]) -> ExtenderScores:
    """The extender's score over the typical Pods of the whole workload, its pinned Pods
    weighed against the GPUs of each model `nodes` have and its CPU against their CPU per
    GPU (`cluster` keeps their mix), its rare shapes the whole workload's on `nodes`: a
    cluster whose extender has seen the workload before."""
    gpus_per_model: Counter[str] = Counter()
    for node in nodes:
        if node.model:
            gpus_per_model[node.model] += node.gpus
    shapes = [arrival.shape for arrival in arrivals]
    pools = _pools(arrivals)
    # A node of a pooled cluster is in its pool; a node of a list, in each.
    empty = [
        _empty(replace(node, pool=pool))
        for node in nodes
        for pool in ([node.pool] if node.pool else pools)
    ]
    departures = any(arrival.leaves is not None for arrival in arrivals)
    cpu = cpu_per_gpu((node.cpu_milli, node.gpus) for node in nodes)
    return ExtenderScores(
        Scorer(
            scoring_typical_pods(shapes, cpu),
            gpus_per_model,
            cpu,
            RareShapes.of(shapes, empty, departures),
        )
    )


def fewest(
    nodes: Sequence[NodeKind], arrivals: Sequence[Arrival], scoring: Scoring = "extender"
) -> Scheduled:
    """The fewest nodes of `cluster(nodes, n)` on which every task is placed, found by
    growing the count by a quarter from the nodes whose GPUs the peak GPU demand fills, then
    halving the interval.

    Where the tasks' GPUs come from node pools, each pool is a cluster of its own
    (`pooled_cluster`): the count first grows and halves the nodes of all pools together,
    split by each pool's peak demand, then lowers each pool's own count while every task is
    still placed, until none can give up a node. Tasks that ask no GPU go to any pool's
    nodes.
    `scoring` says what ranks the nodes: the extender, or kube-scheduler's own scores
    (`StockScores`) under its default profile or with MostAllocated.
    Every task must fit an empty node of some kind (ValueError naming the first that does
    not; `unplaceable` names them all)."""
    unfit = unplaceable(nodes, arrivals)
    if unfit:
        raise ValueError(f"{unfit[0]} fits no empty node of the list")
    stock = StockScores(most_allocated=scoring == "most-allocated")
    departures = any(arrival.leaves is not None for arrival in arrivals)
    pools = _pools(arrivals)
    demands = [
        peak_demand([arrival for arrival in arrivals if arrival.shape.pool == pool])
        for pool in pools
    ]
    order = cluster(nodes, len(nodes))
    per_node = sum(node.gpus for node in order) / len(order)
    start = max(len(pools), int(sum(demands) / MILLI / per_node)) if per_node else len(pools)
    results: dict[tuple[int, ...], int | None] = {}

    def pending(counts: tuple[int, ...]) -> int | None:
        if counts not in results:
            chosen = pooled_cluster(nodes, dict(zip(pools, counts, strict=True)))
            # The extender on these nodes weighs the models and keeps the rare shapes of
            # these nodes, not of the list's.
            scorer = scorer_for(chosen, arrivals) if scoring == "extender" else stock
            results[counts] = first_pending(chosen, arrivals, scorer)
        return results[counts]

    low, high = 0, start
    # Past this, every task could have an empty node of each kind to itself.
    enough = max(start, len(nodes) * max(1, len(arrivals)))
    while pending(_split(high, demands)) is not None and high < enough:
        low, high = high, min(max(high + 1, high * 5 // 4), enough)
    if pending(_split(high, demands)) is not None:
        raise ValueError(
            f"{arrivals[pending(_split(high, demands)) or 0].name} found no node on {high} nodes"
        )
    while high - low > 1:
        middle = (low + high) // 2
        if pending(_split(middle, demands)) is None:
            high = middle
        else:
            low = middle
    counts = list(_split(high, demands))
    shrunk = len(pools) > 1
    while shrunk:
        shrunk = False
        for index in range(len(pools)):
            floor, top = 0, counts[index]
            while top - floor > 1:
                middle = (floor + top) // 2
                if pending(_with(counts, index, middle)) is None:
                    top = middle
                else:
                    floor = middle
            shrunk = shrunk or top < counts[index]
            counts[index] = top
    shorts = [pending(_with(counts, index, counts[index] - 1)) for index in range(len(pools))]
    names = [arrivals[short].name if short is not None else "" for short in shorts]
    parts = tuple(
        PoolCount(pool, count, sum(node.gpus for node in cluster(nodes, count)), name)
        for pool, count, name in zip(pools, counts, names, strict=True)
    )
    return Scheduled(
        sum(counts),
        sum(part.gpus for part in parts),
        departures,
        names[0],
        -(-peak_demand(arrivals) // MILLI),
        parts if pools != [""] else (),
        scoring,
    )


def pooled_cluster(nodes: Sequence[NodeKind], counts: Mapping[str, int]) -> list[NodeKind]:
    """Each pool's `cluster(nodes, count)`, its nodes in that pool and named after it; with
    no pools ({"": n}), `cluster(nodes, n)` itself."""
    if set(counts) == {""}:
        return cluster(nodes, counts[""])
    return [
        replace(node, name=f"{pool}-{node.name}", pool=pool)
        for pool, count in counts.items()
        for node in cluster(nodes, count)
    ]


def _pools(arrivals: Sequence[Arrival]) -> list[str]:
    """The node pools the tasks' GPUs come from; [""]: GPUs are not shared by pools."""
    return sorted({arrival.shape.pool for arrival in arrivals if arrival.shape.pool}) or [""]


def _split(total: int, demands: Sequence[int]) -> tuple[int, ...]:
    """`total` nodes split in proportion to `demands` (largest remainders), one at least
    each."""
    weights = [max(demand, 1) for demand in demands]
    exact = [total * weight / sum(weights) for weight in weights]
    counts = [max(1, int(share)) for share in exact]
    while sum(counts) < total:
        behind = max(range(len(counts)), key=lambda index: exact[index] - counts[index])
        counts[behind] += 1
    return tuple(counts)


def _with(counts: Sequence[int], index: int, count: int) -> tuple[int, ...]:
    return (*counts[:index], count, *counts[index + 1 :])


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
    """The tasks no empty node of the list fits (CPU, memory, GPUs or GPU model), in any of
    the node pools the tasks' GPUs come from."""
    pools = _pools(arrivals)
    empty = {_empty(replace(node, pool=pool)) for node in nodes for pool in pools}
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


def _empty(node: NodeKind) -> NodeFree:
    return NodeFree(node.cpu_milli, (MILLI,) * node.gpus, node.model, node.memory_mib, node.pool)
