"""GPU fragmentation over a typical-pod distribution, and FGD's node score.

A port of the FGD paper's simulator (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23), from
hkust-adsl/kubernetes-scheduler-simulator at commit
8f3d6417353c5083c6d56617f255fadd8dc306bc:

- pkg/utils/frag.go: `GetNodePodFrag` (which quadrant a typical Pod puts a node's free GPU
  in), `NodeGpuShareFragAmount` and `FragAmountSumExceptQ3` (the node's fragmentation: the
  free GPU thousandths that each typical Pod, weighted by its frequency, could not use),
  `GetTypicalPods` (the most frequent Pod shapes until they cover a share of all Pods);
- pkg/simulator/plugin/fgd_score.go: `calculateGpuShareFragExtendScore` (a node's score is
  sigmoid((fragmentation before - fragmentation after) / 1000) x 100);
- pkg/type/resource.go: `NodeResource.Sub` (whole GPUs come from the fullest GPUs that
  fit, fully free GPUs in index order).

Two departures, each a parameter of the port rather than a rewrite of it: a typical Pod
counts as fitting only where its memory fits too (the artefact looks at CPU and GPU only;
a shape with memory 0 behaves exactly as there), and the GPU a fractional Pod is scored on
can be given (the device the allocator will really pick) instead of the best of the node's.
The extender's typical Pods cover 99 % of the Pods seen where the artefact's cover 95 %
(`scoring_typical_pods`), a parameter of `typical_pods` too.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

MILLI = 1000
# kube-scheduler's framework.MaxNodeScore, which the artefact's score is scaled to.
MAX_NODE_SCORE = 100
# The artefact's experiments (scripts/generate_config_and_run.py, CLUSTER_CONFIG_TEMPLATE,
# typicalPodsConfig): CPU-only Pods count, the shapes covering 95 % of all Pods are
# typical, added one shape at a time.
POPULARITY = 0.95
STEP = 1

Q1_LACK_BOTH = "q1_lack_both"
Q2_LACK_GPU = "q2_lack_gpu"
Q3_SATISFIED = "q3_satisfied"
Q4_LACK_CPU = "q4_lack_cpu"
XL_SATISFIED = "xl_satisfied"
XR_LACK_CPU = "xr_lack_cpu"
NO_ACCESS = "no_access"


@dataclass(frozen=True, order=True)
class PodShape:
    """What a Pod asks of a node: CPU, memory, and `gpus` GPUs with `gpu_milli` of each.

    `models`: the GPU models it may run on (empty: any), as the artefact's `GpuType`.
    `pool`: the node pool its GPUs must come from (a sharing degree, or whole GPUs), where
    GPUs are shared by node pools; "" where every node's GPUs serve every Pod.
    """

    cpu_milli: int
    gpu_milli: int = 0
    gpus: int = 0
    models: tuple[str, ...] = ()
    memory: int = 0
    pool: str = ""

    @property
    def asks_nothing(self) -> bool:
        return not (self.cpu_milli or self.memory or self.gpus)

    @property
    def shares_one_gpu(self) -> bool:
        """Whether it asks for part of one GPU (a share), not whole GPUs."""
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI


@dataclass(frozen=True)
class NodeFree:
    """What a node has left: CPU, memory, and each GPU's free thousandths, in the order
    its GPUs are allocated from, and the node pool it is in ("" where there are none)."""

    cpu_milli: int
    gpu_milli: tuple[int, ...]
    model: str = ""
    memory: int = 0
    pool: str = ""

    @property
    def gpu_milli_left(self) -> int:
        return sum(self.gpu_milli)


# The pool of whole-GPU nodes, beside the sharing pools named by their degree.
WHOLE = "whole"


def client_milli(pool: str) -> int:
    """The thousandths of one GPU a client of `pool` holds: 1/M of it on a pool of degree M
    (each client on a GPU of its own, as the `distributed` policy spreads them), all of it on
    the whole-GPU pool."""
    return MILLI if pool == WHOLE else MILLI // int(pool)


TypicalPods = Sequence[tuple[PodShape, float]]


def accessible(node: NodeFree, pod: PodShape) -> bool:
    """`IsNodeAccessibleToPodByType`: any node if the Pod names no model, else its model;
    and only a node of the Pod's pool (a GPU type of its own, to the artefact)."""
    if pod.pool != node.pool:
        return False
    if not pod.models:
        return True
    return bool(node.model) and node.model in pod.models


class _SortedGpus:
    """A node's free GPU thousandths sorted once, for the questions every typical Pod asks."""

    def __init__(self, node: NodeFree) -> None:
        self.lefts = sorted(node.gpu_milli)
        self.below = list(itertools.accumulate(self.lefts, initial=0))

    def short_of(self, milli: int) -> int:
        """How many GPUs have less than `milli` free."""
        return bisect.bisect_left(self.lefts, milli)

    def hosts(self, pod: PodShape) -> bool:
        """`CanNodeHostPodOnGpuMemory`: enough GPUs with the Pod's share of each free."""
        return len(self.lefts) - self.short_of(pod.gpu_milli) >= pod.gpus

    def free_short_of(self, milli: int) -> int:
        """The free thousandths of the GPUs with less than `milli` free."""
        return self.below[self.short_of(milli)]


def _fits_host(node: NodeFree, pod: PodShape) -> bool:
    # The artefact's CPU test, and memory beside it.
    return node.cpu_milli >= pod.cpu_milli and node.memory >= pod.memory


def _quadrant(node: NodeFree, gpus: _SortedGpus, pod: PodShape) -> str:
    if pod.gpu_milli == 0:
        return XL_SATISFIED if _fits_host(node, pod) else XR_LACK_CPU
    if not accessible(node, pod):
        return NO_ACCESS
    if gpus.hosts(pod):
        return Q3_SATISFIED if _fits_host(node, pod) else Q4_LACK_CPU
    return Q2_LACK_GPU if _fits_host(node, pod) else Q1_LACK_BOTH


def quadrant(node: NodeFree, pod: PodShape) -> str:
    """`GetNodePodFrag`: how a typical Pod sees the node's free GPU."""
    return _quadrant(node, _SortedGpus(node), pod)


def fragmentation(node: NodeFree, typical: TypicalPods) -> float:
    """`NodeGpuShareFragAmount(...).FragAmountSumExceptQ3()`: the free GPU thousandths
    the typical Pods, weighted by frequency, cannot use on this node.

    Where a typical Pod fits (Q3), only the GPUs with less than its share free count;
    otherwise every free thousandth does.
    """
    gpus = _SortedGpus(node)
    total = gpus.below[-1]
    amount = 0.0
    for pod, frequency in typical:
        if _quadrant(node, gpus, pod) == Q3_SATISFIED:
            amount += frequency * gpus.free_short_of(pod.gpu_milli)
        else:
            amount += frequency * total
    return amount


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


def _gradient_score(before: float, after: float, points: int = MAX_NODE_SCORE) -> int:
    # Go's int64() truncates towards zero; the sigmoid is positive, so int() does the same.
    return int(sigmoid((before - after) / MILLI) * points)


# The points the extender counts FGD's score in, for every Pod but a share of one GPU.
COARSE_POINTS = 50


def score_points(pod: PodShape) -> int:
    """The points the extender counts FGD's score in for the Pod: the artefact's 100 for a
    share of one GPU, else COARSE_POINTS. Coarser points tie more nodes (those whose score
    truncates alike), and the tie key (the model place, the packing key, the rare shapes)
    then decides among them; measured on the FGD artefact's fourteen task lists over ten
    seeds (docs/performance.md). Shares keep the artefact's points: in fiftieths,
    gpushare40 placed 0.10 points less (six seeds), behind FGD."""
    return MAX_NODE_SCORE if pod.shares_one_gpu else COARSE_POINTS


def take(node: NodeFree, pod: PodShape, gpu: int | None = None) -> NodeFree | None:
    """The node once the Pod is placed; None if it does not fit.

    A share of one GPU comes from GPU `gpu`; whole GPUs, or a share with no `gpu` given,
    as `NodeResource.Sub` takes them: the fullest GPUs that fit first (for whole GPUs,
    the fully free ones in their order).
    """
    if not _fits_host(node, pod) or len(node.gpu_milli) < pod.gpus:
        return None
    left = list(node.gpu_milli)
    if pod.gpus:
        if gpu is not None:
            if pod.gpus != 1 or left[gpu] < pod.gpu_milli:
                return None
            chosen = [gpu]
        else:
            # A stable sort by what is left: the artefact's SortedMilliGpuLeftIndexList(true).
            fitting = [i for i in sorted(range(len(left)), key=left.__getitem__)
                       if left[i] >= pod.gpu_milli]  # fmt: skip
            if len(fitting) < pod.gpus:
                return None
            chosen = fitting[: pod.gpus]
        for index in chosen:
            left[index] -= pod.gpu_milli
    return replace(
        node,
        cpu_milli=node.cpu_milli - pod.cpu_milli,
        memory=node.memory - pod.memory,
        gpu_milli=tuple(left),
    )


Fragmentation = Callable[[NodeFree], float]


def fgd_choice(
    node: NodeFree,
    pod: PodShape,
    typical: TypicalPods,
    gpu: int | None = None,
    measure: Fragmentation | None = None,
    points: int = MAX_NODE_SCORE,
) -> tuple[int, int | None]:
    """`calculateGpuShareFragExtendScore`: the score, 0 to `points` (the artefact's 100),
    higher where placing the Pod adds least fragmentation (or removes most), and for a
    share of one GPU the GPU scored.

    A Pod asking for nothing scores 100 everywhere. For a share of one GPU the artefact
    tries each GPU that fits and keeps the first of the best (the GPU its Reserve then
    allocates); `gpu` scores the one given instead.
    `measure`: `fragmentation` over `typical`, remembered by the caller.
    """
    if pod.asks_nothing:
        return MAX_NODE_SCORE, None
    if measure is None:
        measure = functools.partial(_fragmentation_of, typical)
    before = measure(node)
    if pod.shares_one_gpu and gpu is None:
        best, chosen = 0, None
        for index in range(len(node.gpu_milli)):
            after = take(node, pod, index)
            if after is None:
                continue
            score = _gradient_score(before, measure(after), points)
            if chosen is None or score > best:
                best, chosen = score, index
        return best, chosen
    after = take(node, pod, gpu)
    if after is None:
        return 0, None
    return _gradient_score(before, measure(after), points), gpu


def fgd_score(
    node: NodeFree,
    pod: PodShape,
    typical: TypicalPods,
    gpu: int | None = None,
    measure: Fragmentation | None = None,
    points: int = MAX_NODE_SCORE,
) -> int:
    """`fgd_choice`'s score alone."""
    return fgd_choice(node, pod, typical, gpu, measure, points)[0]


def _fragmentation_of(typical: TypicalPods, node: NodeFree) -> float:
    return fragmentation(node, typical)


class _ShapeCounts:
    """The Pods seen counted by shape, once, for as many covers as are asked of them."""

    def __init__(self, observed: Iterable[PodShape]) -> None:
        self.counts: Counter[PodShape] = Counter()
        self.memories: dict[PodShape, list[int]] = defaultdict(list)
        for shape in observed:
            key = replace(shape, memory=0)
            self.counts[key] += 1
            self.memories[key].append(shape.memory)
        self.total = sum(self.counts.values())
        # sort.Reverse over (count, PodResource.Less): most frequent first, then the larger shape.
        self.ranked = sorted(
            self.counts, key=lambda shape: (self.counts[shape], shape), reverse=True
        )

    def cover(self, popularity: float, step: int = STEP) -> list[tuple[PodShape, float]]:
        chosen: list[PodShape] = []
        covered = 0
        while covered < popularity * self.total and len(chosen) < len(self.ranked):
            for shape in self.ranked[len(chosen) : len(chosen) + step]:
                chosen.append(shape)
                covered += self.counts[shape]
        return [
            (
                replace(shape, memory=int(statistics.median(self.memories[shape]))),
                self.counts[shape] / covered,
            )
            for shape in chosen
        ]


def typical_pods(
    observed: Iterable[PodShape], popularity: float = POPULARITY, step: int = STEP
) -> list[tuple[PodShape, float]]:
    """`GetTypicalPods`: the most frequent shapes until they cover `popularity` of all
    Pods, each with its frequency among them (summing to 1).

    Shapes are counted without their memory, as the artefact counts them; each typical
    shape carries the median memory of the Pods it stands for.
    """
    return _ShapeCounts(observed).cover(popularity, step)


# The packing key's scale: a node keeping this many GPU thousandths free (eight whole GPUs,
# the most a trace node has) or more gets key 0.
_KEY_SPAN = 8 * MILLI
KEY_RANGE = 1000


def first_fit(node: NodeFree, pod: PodShape) -> int | None:
    """The GPU the DRA allocator gives a share of one GPU: the first with enough free."""
    if not pod.shares_one_gpu:
        return None
    return next((i for i, left in enumerate(node.gpu_milli) if left >= pod.gpu_milli), None)


def packing_key(node: NodeFree) -> int:
    """0 to 999, higher the fewer GPU thousandths the node keeps free: breaks FGD's ties
    towards the fuller node instead of leaving them to chance."""
    kept = min(node.gpu_milli_left, _KEY_SPAN)
    return (KEY_RANGE - 1) - kept * (KEY_RANGE - 1) // _KEY_SPAN


def cpu_per_gpu(nodes: Iterable[tuple[int, int]]) -> float:
    """The CPU thousandths the nodes with GPUs have per GPU thousandth, over each node's
    (CPU thousandths, GPUs); 0: no GPUs."""
    cpu = gpus = 0
    for node_cpu, node_gpus in nodes:
        if node_gpus:
            cpu += node_cpu
            gpus += node_gpus
    return cpu / (gpus * MILLI) if gpus else 0.0


def cpu_scarcer(typical: TypicalPods, cpu_per_gpu: float) -> bool:
    """Whether the typical Pods ask more CPU thousandths per GPU thousandth than the nodes
    with GPUs have (`cpu_per_gpu`; 0: not known, and so no): the cluster runs out of CPU
    before it runs out of GPUs."""
    gpu = sum(frequency * pod.gpus * pod.gpu_milli for pod, frequency in typical)
    cpu = sum(frequency * pod.cpu_milli for pod, frequency in typical)
    return cpu_per_gpu > 0 and gpu > 0 and cpu > cpu_per_gpu * gpu


# The typical Pods the extender scores over cover this share of the Pods seen, more than
# the artefact's 95 %, unless that would hide that the cluster runs out of CPU first.
SCORING_POPULARITY = 0.99


def scoring_typical_pods(
    observed: Sequence[PodShape], cpu_per_gpu: float
) -> list[tuple[PodShape, float]]:
    """The typical Pods the extender scores over: the shapes covering `SCORING_POPULARITY`
    of the Pods seen, or the artefact's `POPULARITY` where those ask more CPU per GPU than
    the nodes with GPUs have (`cpu_scarcer`). Measured on the FGD artefact's fourteen task
    lists over ten seeds (docs/performance.md, "Typical Pods over 99 %"): the rarer shapes
    counted in the wider cover move FGD's score off nodes that only they could use; on
    cpu250, whose Pods ask more CPU per GPU than the nodes have, they cost 0.3 points."""
    counted = _ShapeCounts(observed)
    typical = counted.cover(POPULARITY)
    if cpu_scarcer(typical, cpu_per_gpu):
        return typical
    return counted.cover(SCORING_POPULARITY)


def packs_by_fullness(pod: PodShape, cpu_scarce: bool = False) -> bool:
    """Whether the packing key breaks the Pod's ties: always for a Pod without GPUs, for a
    share of a GPU unless the cluster runs out of CPU first (`cpu_scarcer`), never for whole
    GPUs; the others' ties go to the lowest node name, as FGD's do. Measured on the FGD
    artefact's fourteen task lists over ten seeds (docs/performance.md): whole GPUs tied by
    name placed as much or more on thirteen lists (cpu100 0.27 points more, default 0.12);
    shares sent to the fuller node placed 0.14 points more on gpushare100 (three seeds), but
    on cpu250, the one list whose Pods ask more CPU per GPU than the nodes have, shares tied
    by name placed 0.43 more (the packed nodes' CPU is what its CPU-only Pods then lack);
    CPU-only Pods without the key placed 1.6 points less on cpu100."""
    if not pod.gpus:
        return True
    return pod.gpu_milli < MILLI and not cpu_scarce


def _tie_key(node: NodeFree, pod: PodShape, cpu_scarce: bool) -> int:
    return packing_key(node) if packs_by_fullness(pod, cpu_scarce) else 0


# A Pod shape is rare where it fits, on an empty node, on fewer than this share of the
# nodes with GPUs in its pool, or on one node only.
RARE_SHARE = 0.05


def rare_shapes(
    seen: Iterable[PodShape], empty: Iterable[NodeFree], share: float = RARE_SHARE
) -> list[PodShape]:
    """The GPU Pod shapes of `seen` that fit, on an empty node (`empty`: every node with
    nothing placed), on one node, or on at least one but fewer than `share` of the nodes
    with GPUs in their node pool."""
    # The most common kinds first: a shape most nodes fit is found not rare in a few steps.
    kinds = Counter(node for node in empty if node.gpu_milli).most_common()
    pools: Counter[str] = Counter()
    for node, count in kinds:
        pools[node.pool] += count
    found = []
    for pod in sorted({shape for shape in seen if shape.gpus}):
        enough, hosting = max(share * pools[pod.pool], 2), 0
        for node, count in kinds:
            if hosting >= enough:
                break
            if hosts(node, pod):
                hosting += count
        if 0 < hosting < enough:
            found.append(pod)
    return found


def whole_node_shapes(empty: Iterable[NodeFree]) -> set[PodShape]:
    """For each node (`empty`: with nothing placed), a Pod asking all of it: its CPU, its
    memory and every GPU whole. Where few nodes can take such a Pod (`rare_shapes`), the
    cluster has them for the Pods only they hold, whether one has come yet or not."""
    return {
        PodShape(node.cpu_milli, MILLI, len(node.gpu_milli), (), node.memory, node.pool)
        for node in empty
        if node.gpu_milli
    }


def hosts(node: NodeFree, pod: PodShape) -> bool:
    """Whether the Pod fits the node as it is (FGD's Q3)."""
    return quadrant(node, pod) == Q3_SATISFIED


def keeps_rare(node: NodeFree, after: NodeFree, rare: Sequence[PodShape]) -> bool:
    """Whether the node, once the Pod is placed (`after`), can still host every rare shape
    (`rare_shapes`) it could host before."""
    return not any(hosts(node, shape) and not hosts(after, shape) for shape in rare)


@dataclass(frozen=True)
class RareShapes:
    """The rare shapes the extender keeps nodes for, and how: the GPU Pod shapes seen and
    each node's whole (`whole_node_shapes`), where few nodes fit them (`rare_shapes`).

    Where nothing has left (`first` false: FGD's evaluation, every Pod staying), keeping
    them is a tie key of Pods of whole GPUs only, below FGD's score: tied by name, a
    one-GPU Pod that finds several empty nodes would take the lowest name, which may be one
    of the few nodes a rare eight-GPU task fits. Once a Pod has left (`first`), keeping
    them outranks FGD's score for every Pod: on the openb trace in its own time the largest
    tasks come five times in 149 days, and the small long-lived Pods that FGD's gradient
    sends to a lone G3 node hold it for days (docs/performance.md, "Pods that leave").
    """

    shapes: tuple[PodShape, ...] = ()
    first: bool = False

    @classmethod
    def of(cls, seen: Iterable[PodShape], empty: Sequence[NodeFree], first: bool) -> RareShapes:
        """Rare among `seen` and the wholes of `empty`, on `empty`."""
        return cls(tuple(rare_shapes([*seen, *whole_node_shapes(empty)], empty)), first)

    def looks_at(self, pod: PodShape) -> bool:
        """Whether keeping the rare shapes counts in the Pod's score: every Pod's once a Pod
        has left, before that only a Pod's of whole GPUs."""
        return bool(self.shapes) and (self.first or (pod.gpus > 0 and pod.gpu_milli >= MILLI))

    def bonus(self, node: NodeFree, after: NodeFree) -> int:
        """What keeping the rare shapes adds to FGD's score: above its range once Pods
        leave, else nothing."""
        if self.first and self.shapes and self._keeps(node, after):
            return MAX_NODE_SCORE + 1
        return 0

    def key(self, node: NodeFree, after: NodeFree, pod: PodShape) -> int:
        """The tie key of a Pod of whole GPUs where nothing has left: 1 where the node
        keeps the rare shapes, else 0; 0 for every other Pod (their ties go by the packing
        key or the name)."""
        if self.first or not self.looks_at(pod):
            return 0
        return int(self._keeps(node, after))

    @functools.cached_property
    def _least(self) -> tuple[int, int, int]:
        """The least CPU, memory and GPUs any rare shape asks."""
        return (
            min(shape.cpu_milli for shape in self.shapes),
            min(shape.memory for shape in self.shapes),
            min(shape.gpus for shape in self.shapes),
        )

    def _keeps(self, node: NodeFree, after: NodeFree) -> bool:
        # Most nodes have less left than any rare shape asks: they host none to lose.
        cpu, memory, gpus = self._least
        if node.cpu_milli < cpu or node.memory < memory or len(node.gpu_milli) < gpus:
            return True
        return keeps_rare(node, after, self.shapes)


# The model place's scale: 0 to PLACES - 1, PLACE_STEP for each tenth of a model's GPUs its
# pinned Pods are expected to ask for (`pinned_load`), so models wanted alike tie and the
# fuller node decides among them.
PLACE_STEP = 10
PLACES = 10 * PLACE_STEP + 1
# An extender score is FGD's score x TIE_RANGE plus the tie key: the model place x
# KEY_RANGE plus the packing key.
TIE_RANGE = PLACES * KEY_RANGE

GpusPerModel = Mapping[str, int]


def pinned_load(typical: TypicalPods, gpus_per_model: GpusPerModel) -> dict[str, float]:
    """Per GPU model, the share of its GPUs that the typical Pods pinned to it (to GPU
    models that include it) ask for once the Pods' GPU demand equals the cluster's GPUs:
    their share of the typical GPU demand, times the cluster's GPUs over the model's. Above
    1, the model has fewer GPUs than the Pods that can run nowhere else want."""
    demand = sum(frequency * pod.gpus * pod.gpu_milli for pod, frequency in typical)
    cluster = sum(gpus_per_model.values())
    if not demand:
        return {}
    return {
        model: sum(
            frequency * pod.gpus * pod.gpu_milli
            for pod, frequency in typical
            if pod.models and model in pod.models
        )
        / demand
        * cluster
        / gpus
        for model, gpus in gpus_per_model.items()
        if gpus
    }


def model_place(
    node: NodeFree, pod: PodShape, typical: TypicalPods, gpus_per_model: GpusPerModel
) -> int:
    """0 to PLACES - 1, lower the more of the node's GPU model the Pods pinned to it are
    expected to want (`pinned_load`, in whole tenths): of the nodes FGD scores alike, a Pod
    asking for GPUs takes them where Pods that can run nowhere else want the fewest of
    them, before the fuller node. Pinned Pods make their model's nodes the fuller ones as
    they fill them, so the fuller node alone would draw the Pods free to run anywhere
    there too, and the pinned Pods coming later would find their model full; FGD's own
    score sees that only in amounts its whole points truncate. Measured against the
    model's GPUs, not as a share of the Pods: 3 % of the Pods pinned to a model of 4,392
    GPUs leave most of it free, 3 % pinned to one of 195 want nearly all of it. A Pod without
    GPUs takes CPU and memory, not a model's GPUs: it goes to the fuller node as before
    (spread over the nodes nobody is pinned to, it would leave their GPUs without CPU)."""
    if not pod.gpus:
        return PLACES - 1
    return _place_of(pinned_load(typical, gpus_per_model).get(node.model, 0.0))


def _place_of(load: float) -> int:
    return PLACES - 1 - min(PLACES - 1, math.floor(load * 10) * PLACE_STEP)


# The name order's scale: a node's score is its extender score times this, plus its place
# among the scored nodes in reverse name order (clusters of more nodes than this share the
# last place).
NAME_RANGE = 10_000


def tie_broken(scored: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Each node's score x NAME_RANGE plus its place in reverse name order: of the nodes
    the score ties, kube-scheduler then takes the lowest name, as the FGD artefact's
    `selectHost` does ("for reproducibility, choose the smallest lexicographical order"),
    rather than one at random; so identical nodes fill one at a time instead of evenly.
    A score of 0 (no opinion, or a node the view does not know) stays 0."""
    places = {name: place for place, name in enumerate(sorted(name for name, _ in scored))}
    return [
        (name, score * NAME_RANGE + max(0, NAME_RANGE - 1 - places[name]) if score else 0)
        for name, score in scored
    ]


def extender_score(
    node: NodeFree,
    pod: PodShape,
    typical: TypicalPods,
    gpus_per_model: GpusPerModel,
    measure: Fragmentation | None = None,
    cpu_per_gpu: float = 0.0,
    rare: RareShapes = RareShapes(),
) -> int:
    """FGD's score for the GPU the allocator will pick, in the Pod's `score_points`, plus
    the `rare` shapes' bonus once Pods leave, x TIE_RANGE, plus the tie key: the node's
    model place (`model_place`, over the cluster's `gpus_per_model`) x KEY_RANGE plus the
    packing key of the node once the Pod is placed (`packs_by_fullness`, over the GPU
    nodes' `cpu_per_gpu`), or for whole GPUs while nothing has left whether the node keeps
    the rare shapes."""
    gpu = first_fit(node, pod)
    after = take(node, pod, gpu)
    fgd = fgd_score(node, pod, typical, gpu, measure, score_points(pod))
    if after is not None:
        fgd += rare.bonus(node, after)
    return (
        fgd * TIE_RANGE
        + model_place(node, pod, typical, gpus_per_model) * KEY_RANGE
        + _tie_key(after or node, pod, cpu_scarcer(typical, cpu_per_gpu))
        + (rare.key(node, after, pod) if after is not None else 0)
    )


# ---- the same score, fast: what the extender computes for every node on every call

# The key a node's fragmentation is remembered under: its free GPU thousandths sorted (the
# fragmentation does not depend on their order), its model, and where its free CPU and
# memory fall among the typical Pods' (whether each typical Pod fits the host is all the
# fragmentation reads of them), so nodes that differ only where no typical Pod looks share
# one entry.
_FragmentationKey = tuple[tuple[int, ...], str, int, int, str]
# Fragmentations remembered at most; past it they are forgotten at once.
_REMEMBERED = 200_000


class Scorer:
    """`extender_score` and `fragmentation` over one typical-pod distribution and the
    cluster's GPUs per model, with each fragmentation remembered, giving exactly the same
    numbers: the typical Pods are visited in their order and each frequency is added as
    `fragmentation` adds it, so every float comes out bit for bit the same (a test
    compares them on random and trace nodes)."""

    def __init__(
        self,
        typical: TypicalPods,
        gpus_per_model: GpusPerModel,
        cpu_per_gpu: float = 0.0,
        rare: RareShapes = RareShapes(),
    ) -> None:
        self.typical = list(typical)
        self.rare = rare
        self._loads = pinned_load(typical, gpus_per_model)
        self._cpu_scarce = cpu_scarcer(typical, cpu_per_gpu)
        self._cpus = sorted({pod.cpu_milli for pod, _ in typical})
        self._memories = sorted({pod.memory for pod, _ in typical})
        cpu_index = {cpu: index for index, cpu in enumerate(self._cpus)}
        memory_index = {memory: index for index, memory in enumerate(self._memories)}
        # Per typical Pod in order: frequency, GPU thousandths (0: asks no GPU, never Q3),
        # GPUs, the index of its CPU and its memory among the distinct ones, its models,
        # its pool.
        self._rows = [
            (frequency, pod.gpu_milli, pod.gpus, cpu_index[pod.cpu_milli],
             memory_index[pod.memory], frozenset(pod.models), pod.pool)
            for pod, frequency in typical
        ]  # fmt: skip
        self._remembered: dict[_FragmentationKey, float] = {}

    def _key(
        self, lefts: Iterable[int], model: str, cpu_milli: int, memory: int, pool: str
    ) -> _FragmentationKey:
        return (
            tuple(sorted(lefts)),
            model,
            bisect.bisect_right(self._cpus, cpu_milli),
            bisect.bisect_right(self._memories, memory),
            pool,
        )

    def _fragmentation(self, key: _FragmentationKey) -> float:
        found = self._remembered.get(key)
        if found is not None:
            return found
        lefts, model, cpus_fitting, memories_fitting, node_pool = key
        below = list(itertools.accumulate(lefts, initial=0))
        total = below[-1]
        count = len(lefts)
        amount = 0.0
        for frequency, milli, gpus, cpu, memory, models, pool in self._rows:
            # Q3: the Pod asks a GPU, may run on this model, its host needs fit, and enough
            # GPUs have its share free; then only the GPUs short of its share count.
            if (
                milli
                and pool == node_pool
                and (not models or (model and model in models))
                and cpu < cpus_fitting
                and memory < memories_fitting
            ):
                short = bisect.bisect_left(lefts, milli)
                if count - short >= gpus:
                    amount += frequency * below[short]
                    continue
            amount += frequency * total
        if len(self._remembered) >= _REMEMBERED:
            self._remembered.clear()
        self._remembered[key] = amount
        return amount

    def fragmentation(self, node: NodeFree) -> float:
        """`fragmentation(node, typical)`."""
        return self._fragmentation(
            self._key(node.gpu_milli, node.model, node.cpu_milli, node.memory, node.pool)
        )

    def score(self, node: NodeFree, pod: PodShape, before: float | None = None) -> int:
        """`extender_score` over the scorer's typical Pods, GPUs per model, CPU per GPU and
        rare shapes; `before`: the node's fragmentation, if known."""
        left = node.gpu_milli
        place = self._place(node, pod)
        if pod.asks_nothing:
            fgd = MAX_NODE_SCORE + self.rare.bonus(node, node)
            return fgd * TIE_RANGE + place + _tie_key(node, pod, self._cpu_scarce)
        cpu_after, memory_after = node.cpu_milli - pod.cpu_milli, node.memory - pod.memory
        after: list[int] | None = None
        if cpu_after >= 0 and memory_after >= 0 and len(left) >= pod.gpus:
            if pod.shares_one_gpu:
                # The allocator's first fit; where none fits, FGD's best over the GPUs that
                # fit is over none: 0.
                for gpu, free in enumerate(left):
                    if free >= pod.gpu_milli:
                        after = list(left)
                        after[gpu] -= pod.gpu_milli
                        break
            elif pod.gpus:
                fitting = [i for i in sorted(range(len(left)), key=left.__getitem__)
                           if left[i] >= pod.gpu_milli]  # fmt: skip
                if len(fitting) >= pod.gpus:
                    after = list(left)
                    for index in fitting[: pod.gpus]:
                        after[index] -= pod.gpu_milli
            else:
                after = list(left)
        if after is None:
            return place + _tie_key(node, pod, self._cpu_scarce)
        if before is None:
            before = self.fragmentation(node)
        measured = self._fragmentation(
            self._key(after, node.model, cpu_after, memory_after, node.pool)
        )
        fgd, key = _gradient_score(before, measured, score_points(pod)), 0
        if packs_by_fullness(pod, self._cpu_scarce):
            kept = min(sum(after), _KEY_SPAN)
            key = (KEY_RANGE - 1) - kept * (KEY_RANGE - 1) // _KEY_SPAN
        if self.rare.looks_at(pod):
            placed = NodeFree(cpu_after, tuple(after), node.model, memory_after, node.pool)
            fgd += self.rare.bonus(node, placed)
            key += self.rare.key(node, placed, pod)
        return fgd * TIE_RANGE + place + key

    def _place(self, node: NodeFree, pod: PodShape) -> int:
        """`model_place` x KEY_RANGE, each model's pinned load counted once."""
        if not pod.gpus:
            return (PLACES - 1) * KEY_RANGE
        return _place_of(self._loads.get(node.model, 0.0)) * KEY_RANGE
