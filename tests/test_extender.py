"""The extender's FGD score: the port checked against the artefact's own test cases and
against cases worked by hand from the formulas; the cluster view read from manifests as
the API server stores them; the HTTP verb as kube-scheduler calls it."""

from __future__ import annotations

import json
import math
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from http.server import ThreadingHTTPServer

import pytest

from castslice.extender.cluster_view import ClusterView
from castslice.extender.expectations import EXPECTED_FOR
from castslice.extender.fragmentation import (
    MAX_NODE_SCORE,
    NO_ACCESS,
    Q2_LACK_GPU,
    Q3_SATISFIED,
    Q4_LACK_CPU,
    TIE_RANGE,
    XL_SATISFIED,
    XR_LACK_CPU,
    NodeFree,
    PodShape,
    RareShapes,
    Scorer,
    TypicalPods,
    cpu_scarcer,
    extender_score,
    fgd_score,
    first_fit,
    fragmentation,
    packing_key,
    packs_by_fullness,
    pinned_load,
    quadrant,
    rare_shapes,
    scoring_typical_pods,
    tie_broken,
    typical_pods,
    whole_node_shapes,
)
from castslice.extender.server import Extender, handler_for
from castslice.extender.watching import MODEL_LABEL
from tests.e2e import dra

GIB = 1 << 30


def _artefact(rows: list[tuple[int, int, int, str, float]]) -> list[tuple[PodShape, float]]:
    return [
        (PodShape(cpu, milli, gpus, (model,) if model else ()), percent / 100)
        for cpu, milli, gpus, model, percent in rows
    ]


# hkust-adsl/kubernetes-scheduler-simulator@8f3d6417353c5083c6d56617f255fadd8dc306bc,
# pkg/utils/frag_test.go, TestingGenerateGetTypicalPods: (MilliCpu, MilliGpu, GpuNumber,
# GpuType, Percentage in %), copied in its order.
ARTEFACT_TYPICAL = _artefact([
    (6000, 465, 1, "", 9.33), (8000, 440, 1, "2080", 9.15), (8000, 475, 1, "T4", 8.76),
    (8000, 440, 1, "P100", 8.72), (2000, 465, 1, "", 8.68), (12000, 900, 1, "", 8.65),
    (4000, 900, 1, "", 8.43), (16000, 678, 1, "T4", 8.36), (8000, 500, 1, "", 8.29),
    (6000, 511, 1, "", 8.11), (14000, 1000, 2, "2080", 0.54), (4000, 1000, 1, "2080", 0.43),
    (32000, 1000, 2, "T4", 0.43), (16000, 1000, 1, "V100M16", 0.40),
    (64000, 1000, 2, "", 0.40), (10000, 1000, 2, "", 0.40), (11400, 1000, 1, "T4", 0.36),
    (16000, 1000, 1, "T4", 0.36), (4000, 1000, 2, "", 0.36), (14000, 1000, 2, "V100M16", 0.36),
    (8000, 1000, 4, "", 0.36), (16000, 1000, 2, "", 0.32), (2000, 1000, 1, "T4", 0.32),
    (6000, 1000, 1, "", 0.32), (4000, 1000, 1, "", 0.32), (5000, 1000, 1, "", 0.32),
    (32000, 1000, 4, "V100M16", 0.32), (32000, 1000, 2, "", 0.32), (24000, 1000, 8, "2080", 0.32),
    (40000, 1000, 4, "", 0.29), (32000, 1000, 8, "", 0.29), (32000, 1000, 1, "T4", 0.29),
    (16000, 1000, 1, "", 0.25), (7000, 1000, 1, "V100M16", 0.25), (24000, 1000, 1, "T4", 0.25),
])  # fmt: skip
# The same file, TestingGenerateGetTypicalPodsWithNonGpu.
ARTEFACT_TYPICAL_WITH_CPU = _artefact([
    (15700, 1000, 1, "", 28.69), (11900, 1000, 1, "", 18.93), (11400, 1000, 1, "", 12.27),
    (1000, 0, 0, "", 7.36), (18710, 1000, 1, "", 4.85), (8200, 1000, 1, "", 3.79),
    (16400, 1000, 1, "", 3.31), (9810, 1000, 1, "", 1.97), (15200, 1000, 1, "", 1.87),
    (11200, 1000, 1, "", 1.81), (14200, 1000, 1, "", 1.76), (12000, 0, 0, "", 1.65),
    (14900, 1000, 1, "", 1.39), (60200, 1000, 4, "", 1.23), (64200, 1000, 8, "", 1.07),
    (32200, 1000, 4, "", 1.01), (17400, 1000, 2, "", 0.91), (30200, 1000, 2, "", 0.69),
    (16000, 1000, 1, "", 0.64), (15000, 1000, 1, "", 0.59), (64000, 1000, 8, "", 0.53),
    (15000, 0, 0, "", 0.53), (11910, 1000, 1, "", 0.53), (120200, 1000, 8, "", 0.48),
    (11300, 1000, 1, "", 0.37), (30000, 1000, 2, "", 0.32), (9800, 1000, 1, "", 0.32),
    (8000, 1000, 1, "", 0.32), (2000, 1000, 1, "", 0.27), (2000, 80, 1, "", 0.27),
    (1000, 1000, 1, "", 0.27),
])  # fmt: skip


@pytest.mark.parametrize(
    ("cpu", "gpus", "model", "typical", "expected"),
    [
        # TestNodeGpuShareFragAmount
        (1000, (200, 1000, 1000, 500), "1080", ARTEFACT_TYPICAL, 2566.62),
        (1000, (1000,) * 4, "1080", ARTEFACT_TYPICAL, 3802.40),
        (1000, (1000,) * 8, "1080", ARTEFACT_TYPICAL, 7604.80),
        (1000, (200, 1000, 1000, 500), "1080", ARTEFACT_TYPICAL[:1], 251.91),
        # TestNodeGpuShareFragAmountWithNonGpu
        (64000, (1000,) * 8, "P100", ARTEFACT_TYPICAL_WITH_CPU, 887.20),
        (32000, (1000,) * 4 + (0,) * 4, "P100", ARTEFACT_TYPICAL_WITH_CPU, 554.4),
        (0, (1000,) * 4 + (0,) * 4, "P100", ARTEFACT_TYPICAL_WITH_CPU, 4000),
    ],
)
def test_fragmentation_is_the_artefact_s_on_its_own_test_cases(
    cpu: int, gpus: tuple[int, ...], model: str, typical: list, expected: float
) -> None:
    assert fragmentation(NodeFree(cpu, gpus, model), typical) == pytest.approx(expected, abs=0.01)


def test_each_quadrant_as_the_paper_draws_it() -> None:
    node = NodeFree(4000, (300, 1000), "T4", memory=8 * GIB)
    assert quadrant(node, PodShape(2000, 500, 1)) == Q3_SATISFIED
    assert quadrant(node, PodShape(8000, 500, 1)) == Q4_LACK_CPU
    assert quadrant(node, PodShape(2000, 1000, 2)) == Q2_LACK_GPU
    assert quadrant(node, PodShape(2000, 500, 1, ("V100",))) == NO_ACCESS
    assert quadrant(node, PodShape(2000)) == XL_SATISFIED
    assert quadrant(node, PodShape(8000)) == XR_LACK_CPU
    # Memory-aware: a Pod whose memory does not fit lacks the host as a CPU shortage does.
    assert quadrant(node, PodShape(2000, 500, 1, memory=16 * GIB)) == Q4_LACK_CPU


# Worked by hand. Typical Pods: half want half a GPU, half a whole GPU, little CPU.
HALF_AND_WHOLE = [(PodShape(1000, 500, 1), 0.5), (PodShape(1000, 1000, 1), 0.5)]


def test_fragmentation_by_hand() -> None:
    # Two free GPUs: every typical Pod fits, no GPU has less than either one's share: 0.
    assert fragmentation(NodeFree(8000, (1000, 1000)), HALF_AND_WHOLE) == 0
    # Half of one used: the whole-GPU Pods cannot use its 500 free: 0.5 x 500.
    assert fragmentation(NodeFree(8000, (500, 1000)), HALF_AND_WHOLE) == 250
    # Both half used: the whole-GPU Pods fit nowhere, all 1000 free is theirs to miss.
    assert fragmentation(NodeFree(8000, (500, 500)), HALF_AND_WHOLE) == 500
    # No CPU left: nothing fits, every free thousandth counts for each Pod.
    assert fragmentation(NodeFree(0, (500, 1000)), HALF_AND_WHOLE) == 1500


def test_the_score_is_the_sigmoid_of_the_fragmentation_removed() -> None:
    half = PodShape(1000, 500, 1)
    # On a fresh node the half-GPU Pod adds 250: int(100 / (1 + e^0.25)) = 43.
    assert fgd_score(NodeFree(8000, (1000, 1000)), half, HALF_AND_WHOLE) == 43
    assert int(100 / (1 + math.exp(0.25))) == 43
    # Beside another half, it removes 250: int(100 / (1 + e^-0.25)) = 56.
    assert fgd_score(NodeFree(8000, (500, 1000)), half, HALF_AND_WHOLE) == 56
    # The artefact tries every GPU and keeps the best; the allocator's first fit takes
    # GPU 0 and leaves two half-free GPUs (+250).
    uneven = NodeFree(8000, (1000, 500))
    assert fgd_score(uneven, half, HALF_AND_WHOLE) == 56
    assert first_fit(uneven, half) == 0
    assert fgd_score(uneven, half, HALF_AND_WHOLE, gpu=0) == 43
    # The extender scores the GPU the allocator will give, not the artefact's best one.
    assert extender_score(uneven, half, HALF_AND_WHOLE, {}) // TIE_RANGE == 43
    # A Pod asking for nothing scores the most everywhere.
    assert fgd_score(uneven, PodShape(0), HALF_AND_WHOLE) == 100


def test_whole_gpus_come_from_fully_free_gpus_in_order() -> None:
    whole = PodShape(1000, 1000, 1)
    # Taking GPU 1 leaves the half-free GPU 0: fragmentation 0.5 x 500 stays 250 -> 50.
    assert fgd_score(NodeFree(8000, (500, 1000, 1000)), whole, HALF_AND_WHOLE) == 50
    assert fgd_score(NodeFree(8000, (500, 500)), whole, HALF_AND_WHOLE) == 0


def test_memory_counts_where_a_typical_pod_needs_it() -> None:
    big = [(PodShape(1000, 1000, 1, memory=16 * GIB), 1.0)]
    assert fragmentation(NodeFree(8000, (1000,), memory=32 * GIB), big) == 0
    assert fragmentation(NodeFree(8000, (1000,), memory=8 * GIB), big) == 1000


def test_typical_pods_cover_the_popular_shapes_with_their_frequencies() -> None:
    a, b, c = PodShape(1000, 500, 1), PodShape(2000, 1000, 1), PodShape(500)
    seen = [a] * 6 + [b] * 3 + [c]
    assert typical_pods(seen, popularity=0.8) == [(a, 6 / 9), (b, 3 / 9)]
    assert typical_pods(seen, popularity=0.95) == [(a, 0.6), (b, 0.3), (c, 0.1)]
    # Shapes differing only in memory are one shape, carrying their median memory.
    memories = [PodShape(1000, 500, 1, memory=m * GIB) for m in (1, 2, 9)]
    assert typical_pods(memories) == [(PodShape(1000, 500, 1, memory=2 * GIB), 1.0)]
    assert typical_pods([]) == []


def test_the_extender_counts_shapes_of_99_in_100_pods_unless_cpu_runs_out_first() -> None:
    """Pairs of GPUs, three Pods in a hundred: the artefact's 95 % leaves them out, and a
    whole GPU goes to the lowest name though that leaves no pair free; counted, it goes
    where a pair still fits. Where the nodes have less CPU per GPU than the Pods ask, the
    95 % stays (cpu250 placed 0.3 points less with the wider cover)."""
    whole, pair = PodShape(1000, 1000, 1), PodShape(2000, 1000, 2)
    seen = [whole] * 96 + [pair] * 3 + [PodShape(500)]
    assert typical_pods(seen) == [(whole, 1.0)]
    assert scoring_typical_pods(seen, 16.0) == [(whole, 96 / 99), (pair, 3 / 99)]
    assert scoring_typical_pods(seen, 0.0) == scoring_typical_pods(seen, 16.0)
    assert scoring_typical_pods(seen, 0.5) == [(whole, 1.0)]

    def best(cpu_per_gpu: float) -> str:
        scorer = Scorer(scoring_typical_pods(seen, cpu_per_gpu), {}, cpu_per_gpu)
        scored = [
            ("a-two-free", scorer.score(NodeFree(16000, (1000, 1000, 0, 0)), whole)),
            ("b-three-free", scorer.score(NodeFree(16000, (1000, 1000, 1000, 0)), whole)),
        ]
        return max(tie_broken(scored), key=lambda item: item[1])[0]

    assert best(16.0) == "b-three-free"
    assert best(0.5) == "a-two-free"


def test_the_packing_key_breaks_fgd_s_ties_towards_the_fuller_node() -> None:
    assert packing_key(NodeFree(0, (0,) * 8)) == 999
    assert packing_key(NodeFree(0, (1000,) * 8)) == 0
    cpu_pod = PodShape(1000)
    # A CPU-only Pod changes no GPU: FGD is level; the node with less GPU free wins.
    fuller = extender_score(NodeFree(8000, (500, 0)), cpu_pod, HALF_AND_WHOLE, {})
    emptier = extender_score(NodeFree(8000, (500, 1000)), cpu_pod, HALF_AND_WHOLE, {})
    assert fuller // TIE_RANGE == emptier // TIE_RANGE
    assert fuller > emptier


FULLER = NodeFree(8000, (0, 1000, 1000, 1000))
EMPTIER = NodeFree(8000, (1000,) * 4)


def best_of_fuller_and_emptier(pod: PodShape, typical: TypicalPods, cpu_per_gpu: float) -> str:
    """The node the extender sends `pod` to of two FGD scores alike, the emptier one having
    the lower name; its fast score checked against the reference on both."""
    scorer = Scorer(typical, {}, cpu_per_gpu)
    scored = []
    for name, node in (("b-fuller", FULLER), ("a-emptier", EMPTIER)):
        assert fgd_score(node, pod, typical) == fgd_score(EMPTIER, pod, typical)
        score = extender_score(node, pod, typical, {}, cpu_per_gpu=cpu_per_gpu)
        assert scorer.score(node, pod) == score
        scored.append((name, score))
    return max(tie_broken(scored), key=lambda item: item[1])[0]


def test_whole_gpus_that_fgd_scores_alike_go_to_the_lowest_name_not_the_fuller_node() -> None:
    """Sent to the fuller node, whole GPUs placed less on the FGD artefact's task lists
    (cpu100: a quarter of a point); shares and CPU-only Pods keep the packing key."""
    whole, share, cpu_only = PodShape(1000, 1000, 1), PodShape(1000, 500, 1), PodShape(1000)
    assert best_of_fuller_and_emptier(whole, HALF_AND_WHOLE, 0.0) == "a-emptier"
    assert best_of_fuller_and_emptier(share, HALF_AND_WHOLE, 0.0) == "b-fuller"
    assert best_of_fuller_and_emptier(cpu_only, HALF_AND_WHOLE, 0.0) == "b-fuller"


# Half the Pods CPU-only with 6 CPUs, half a whole GPU with 2: 8 CPUs per GPU asked.
CPU_HUNGRY = [(PodShape(6000), 0.5), (PodShape(2000, 1000, 1), 0.5)]


def test_the_cpu_a_cluster_runs_out_of_first_is_the_typical_pods_per_gpu_against_its_own() -> None:
    assert not cpu_scarcer(CPU_HUNGRY, 0.0)  # the nodes' CPU not known
    assert not cpu_scarcer(CPU_HUNGRY, 8.0)  # 8 CPUs per GPU on the nodes: as much as asked
    assert cpu_scarcer(CPU_HUNGRY, 7.9)
    assert not cpu_scarcer([(PodShape(6000), 1.0)], 1.0)  # no GPU asked


def test_shares_tie_by_name_where_the_cluster_runs_out_of_cpu_first() -> None:
    """cpu250, where CPU-only Pods ask as much of the CPU as GPU Pods of the GPUs: shares
    packed on the fuller node spent the CPU the CPU-only Pods then lacked (0.4 points)."""
    share, cpu_only = PodShape(2000, 500, 1), PodShape(6000)
    typical = [*CPU_HUNGRY, (share, 0.0)]
    # 16 CPUs per GPU on the nodes: CPU to spare, the fuller node.
    assert best_of_fuller_and_emptier(share, typical, 16.0) == "b-fuller"
    # 4 per GPU: the lowest name, as for whole GPUs; CPU-only Pods keep the fuller node.
    assert best_of_fuller_and_emptier(share, typical, 4.0) == "a-emptier"
    assert best_of_fuller_and_emptier(cpu_only, typical, 4.0) == "b-fuller"


def test_the_view_counts_the_cpu_of_the_nodes_with_gpus_per_gpu() -> None:
    view = ClusterView(CAPACITY, S)
    view.replace("nodes", [_node("a", cpu="16"), _node("b", cpu="8"), _node("cpu-only", cpu="64")])
    view.replace("resourceslices", [_slice("a", 2), _slice("b", 2)])
    assert view.watched.cpu_per_gpu() == 24000 / 4000
    view.apply("resourceslices", "DELETED", _slice("b", 2))
    assert view.watched.cpu_per_gpu() == 16000 / 2000
    assert ClusterView(CAPACITY, S).watched.cpu_per_gpu() == 0.0


@pytest.mark.parametrize(("node_cpu", "best"), [("64", "b"), ("16", "a")])
def test_the_view_ties_shares_by_name_once_its_nodes_cpu_is_scarcer(
    node_cpu: str, best: str
) -> None:
    """A CPU-only Pod of 12 CPUs and two halves of a GPU seen: 14 CPUs asked per GPU. On
    nodes of 2 GPUs and 64 CPUs a half goes to the fuller node b; with 16 CPUs, to a."""
    view = ClusterView(CAPACITY, S)
    view.replace("nodes", [_node("a", cpu=node_cpu), _node("b", cpu=node_cpu)])
    view.replace("resourceslices", [_slice("a", 2), _slice("b", 2)])
    device = view.watched.devices_of("b")[0][0].rsplit("/", 1)[-1]
    view.replace(
        "resourceclaims", [_claim("held", S // 2, on=("b", device)), _claim("new", S // 2)]
    )
    view.replace("pods", [_pod("cpu", None, cpu="12"), _pod("held", "held", node="b")])
    assert view.recounted("b") == NodeFree(int(node_cpu) * 1000 - 1000, (500, 1000), "T4", 63 * GIB)
    scored = view.prioritize(_pod("newcomer", "new"), ["a", "b"])
    assert max(scored, key=lambda item: item[1])[0] == best


# A few Pods pinned to T4 among many that run anywhere: too few to move FGD's whole-point
# score, which truncates, so the nodes below tie on it.
RARELY_PINNED = [(PodShape(1000, 1000, 1, ("T4",)), 0.02), (PodShape(1000, 1000, 1), 0.98)]
# A cluster where those few Pods want all of T4's GPUs: 2 % of 100 GPUs.
FEW_T4 = {"T4": 2, "G2": 98}
T4_HALF_USED = NodeFree(8000, (0, 1000), "T4")
G2_FREE = NodeFree(32000, (1000,) * 4, "G2")


def test_a_gpu_pod_free_to_choose_leaves_a_pinned_model_s_nodes_to_the_pods_pinned_there() -> None:
    """The pinned Pods fill their model's nodes first, which makes them the fuller nodes;
    ties to the fuller node alone then send Pods that could run anywhere there too, and the
    pinned Pods that come later find their model full (10 to 25 % of the GPU tasks pinned:
    the artefact's gpuspec lists)."""
    anywhere = PodShape(1000, 1000, 1)
    t4 = extender_score(T4_HALF_USED, anywhere, RARELY_PINNED, FEW_T4)
    g2 = extender_score(G2_FREE, anywhere, RARELY_PINNED, FEW_T4)
    assert fgd_score(T4_HALF_USED, anywhere, RARELY_PINNED, 1) == 50
    # In the extender's fiftieths for Pods of whole GPUs.
    assert t4 // TIE_RANGE == g2 // TIE_RANGE == 25
    assert packing_key(NodeFree(8000, (0, 0), "T4")) > packing_key(
        NodeFree(32000, (0,) + (1000,) * 3)
    )
    assert g2 > t4
    # A Pod that may use T4 or G2 the same; one pinned to T4 has no choice to make.
    either = PodShape(1000, 1000, 1, ("G2", "T4"))
    assert extender_score(G2_FREE, either, RARELY_PINNED, FEW_T4) > extender_score(
        T4_HALF_USED, either, RARELY_PINNED, FEW_T4
    )
    # FGD's own preference comes first: a node it scores higher wins whatever its model.
    half, typical = (
        PodShape(1000, 500, 1),
        [*HALF_AND_WHOLE, (PodShape(1000, 500, 1, ("T4",)), 0.2)],
    )
    preferred = extender_score(NodeFree(8000, (500, 1000), "T4"), half, typical, FEW_T4)
    other = extender_score(NodeFree(8000, (1000, 1000), "G2"), half, typical, FEW_T4)
    assert preferred // TIE_RANGE > other // TIE_RANGE and preferred > other


def test_fgd_s_points_tie_nodes_a_point_apart_for_whole_gpus_but_not_for_shares() -> None:
    """FGD's score in fiftieths for a Pod of whole GPUs: a node FGD scores one whole point
    higher (51 against 50) ties, and the tie key sends the Pod to the model no pinned Pod
    wants. A share keeps FGD's whole points, and so FGD's choice."""
    # 5 % of the Pods ask 4 CPUs, which the T4 node below lacks: its GPU, taken, is no
    # longer counted as fragmented for them.
    typical = [
        (PodShape(4000, 500, 1), 0.05),
        (PodShape(1000, 1000, 1, ("T4",)), 0.02),
        (PodShape(1000, 1000, 1), 0.93),
    ]
    t4, g2 = NodeFree(3000, (1000,), "T4"), NodeFree(8000, (1000,), "G2")
    whole = PodShape(1000, 1000, 1)
    assert (fgd_score(t4, whole, typical), fgd_score(g2, whole, typical)) == (51, 50)
    assert extender_score(g2, whole, typical, FEW_T4) > extender_score(t4, whole, typical, FEW_T4)
    scorer = Scorer(typical, FEW_T4)
    assert scorer.score(g2, whole) > scorer.score(t4, whole)
    # A share of 500: FGD scores the emptier node a point higher (61 against 60), the
    # fuller one would win the tie.
    typical = [
        (PodShape(4000, 500, 1), 0.05),
        (PodShape(1000, 250, 1), 0.05),
        (PodShape(1000, 1000, 1), 0.9),
    ]
    share = PodShape(1000, 500, 1)
    emptier, fuller = NodeFree(3000, (500, 500)), NodeFree(8000, (750,))
    assert (fgd_score(emptier, share, typical), fgd_score(fuller, share, typical)) == (61, 60)
    assert packs_by_fullness(share)
    assert extender_score(emptier, share, typical, {}) > extender_score(fuller, share, typical, {})
    scorer = Scorer(typical, {})
    assert scorer.score(emptier, share) > scorer.score(fuller, share)


# The openb trace's GPUs per model (bench/packing/data/openb_node_list_gpu_node.csv): G2 has
# 4,392, V100M16 195.
TRACE_GPUS = {"G2": 4392, "V100M16": 195}
# More Pods pinned to G2 than to V100M16, as on the gpuspec lists (4 % and 2 %).
PINNED_TO_BOTH = [
    (PodShape(1000, 1000, 1, ("G2",)), 0.04),
    (PodShape(1000, 1000, 1, ("V100M16",)), 0.02),
    (PodShape(1000, 1000, 1), 0.94),
]


def test_a_model_s_pinned_load_is_what_its_pinned_pods_ask_of_its_own_gpus() -> None:
    loads = pinned_load(PINNED_TO_BOTH, TRACE_GPUS)
    # 2 % of a demand equal to the cluster's 4,587 GPUs is 91.74 GPUs, of V100M16's 195.
    assert loads["V100M16"] == pytest.approx(0.02 * 4587 / 195)
    assert loads["G2"] == pytest.approx(0.04 * 4587 / 4392)
    # A Pod that may take either model counts against both; a GPU share by its thousandths.
    either = [(PodShape(1000, 500, 1, ("G2", "V100M16")), 0.5), (PodShape(1000, 1000, 2), 0.5)]
    assert pinned_load(either, TRACE_GPUS) == pytest.approx(
        {"G2": 500 / 2500 * 4587 / 4392, "V100M16": 500 / 2500 * 4587 / 195}
    )
    assert pinned_load(HALF_AND_WHOLE, TRACE_GPUS) == {"G2": 0, "V100M16": 0}


def test_a_pod_free_to_choose_leaves_the_small_model_its_few_pinned_pods_need() -> None:
    """Fewer Pods pin to V100M16 than to G2, but they want half of its 195 GPUs where G2's
    want 4 % of its 4,392: a Pod that can run anywhere takes G2 (counted as a share of the
    Pods, V100M16 was the model fewer Pods pin to, and the pinned Pods found it full)."""
    anywhere = PodShape(1000, 1000, 1)
    v100 = NodeFree(32000, (1000,) * 4, "V100M16")
    g2 = NodeFree(32000, (1000,) * 4, "G2")
    assert fgd_score(v100, anywhere, PINNED_TO_BOTH) == fgd_score(g2, anywhere, PINNED_TO_BOTH)
    assert extender_score(g2, anywhere, PINNED_TO_BOTH, TRACE_GPUS) > extender_score(
        v100, anywhere, PINNED_TO_BOTH, TRACE_GPUS
    )


def test_models_whose_pinned_pods_want_the_same_tenth_leave_it_to_the_fuller_node() -> None:
    anywhere = PodShape(1000, 500, 1)
    # Of 7,512 GPUs: G2's load 0.04 x 7,512 / 4,392 = 0.07, G3's 0.02 x 7,512 / 3,120 = 0.05.
    gpus = {"G2": 4392, "G3": 3120}
    typical = [*PINNED_TO_BOTH[::2], (PodShape(1000, 1000, 1, ("G3",)), 0.02)]
    assert all(load < 0.1 for load in pinned_load(typical, gpus).values())
    fuller_g2 = NodeFree(32000, (0,) + (1000,) * 3, "G2")
    emptier_g3 = NodeFree(32000, (1000,) * 4, "G3")
    assert fgd_score(fuller_g2, anywhere, typical) == fgd_score(emptier_g3, anywhere, typical)
    assert extender_score(fuller_g2, anywhere, typical, gpus) > extender_score(
        emptier_g3, anywhere, typical, gpus
    )


def test_the_view_weighs_pinned_pods_against_the_gpus_its_nodes_have() -> None:
    view = ClusterView(CAPACITY, S)
    view.replace("nodes", [_node("a", model="T4"), _node("b", model="T4"), _node("c", model="G2")])
    view.replace("resourceslices", [_slice("a", 2), _slice("b", 2), _slice("c", 8)])
    assert view.gpus_per_model() == {"T4": 4, "G2": 8}
    view.apply("nodes", "DELETED", _node("b", model="T4"))
    view.apply("resourceslices", "DELETED", _slice("b", 2))
    assert view.gpus_per_model() == {"T4": 2, "G2": 8}


def test_a_node_joining_changes_the_load_the_view_scores_with() -> None:
    """Half the GPU demand pinned to T4: on 2 of 10 GPUs it wants them all (place 0); once
    a T4 node of 8 joins, 0.9 of them. The view must score with the new count at once,
    though no Pod arrived to make it learn its typical Pods again."""
    view = ClusterView(CAPACITY, S)
    view.replace("nodes", [_node("t4", model="T4"), _node("g2", model="G2")])
    view.replace("resourceslices", [_slice("t4", 2), _slice("g2", 8)])
    pinned = _pod("pinned", "pinned")
    t4_only = {"key": MODEL_LABEL, "operator": "In", "values": ["T4"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [t4_only]}]}
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    view.replace("resourceclaims", [_claim("pinned", S), _claim("free", S)])
    view.replace("pods", [pinned, _pod("free", "free")])
    free = _pod("free", "free")
    before = dict(view.scores(free, ["t4", "g2"]))
    view.apply("nodes", "ADDED", _node("t4b", model="T4"))
    view.apply("resourceslices", "ADDED", _slice("t4b", 8))
    names = ["t4", "g2", "t4b"]
    shape, typical = view.shape(free), view.typical()
    assert shape is not None and view.gpus_per_model() == {"T4": 10, "G2": 8}
    after = view.scores(free, names)
    assert [score for _, score in after] == [
        extender_score(node, shape, typical, view.gpus_per_model(), rare=view.rare()) if node else 0
        for node in (view.recounted(name) for name in names)
    ]
    assert dict(after)["t4"] > before["t4"]


def test_a_pod_without_gpus_still_goes_to_the_fuller_node_whatever_its_model() -> None:
    """Its CPU is what it takes: spread over the nodes nobody is pinned to, it would leave
    their GPUs without CPU (measured: 4 points lost at 130 % on gpuspec20)."""
    cpu_pod = PodShape(1000)
    assert extender_score(T4_HALF_USED, cpu_pod, RARELY_PINNED, FEW_T4) > extender_score(
        G2_FREE, cpu_pod, RARELY_PINNED, FEW_T4
    )


def test_without_pinned_typical_pods_the_model_changes_no_score() -> None:
    anywhere = PodShape(1000, 1000, 1)
    unpinned = [(PodShape(1000, 1000, 1), 1.0)]
    for node in (T4_HALF_USED, G2_FREE):
        same_elsewhere = NodeFree(node.cpu_milli, node.gpu_milli, "A10")
        assert extender_score(node, anywhere, unpinned, FEW_T4) == extender_score(
            same_elsewhere, anywhere, unpinned, FEW_T4
        )


# ---- the cluster view, from objects as the API server stores them

S = 100
CAPACITY = "shares"


def _node(name: str, cpu: str = "16", memory: str = "64Gi", model: str = "T4") -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {MODEL_LABEL: model}},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def _slice(node: str, gpus: int) -> dict:
    manifest = dra.resource_slice(node, f"uid-{node}", gpus)
    manifest["metadata"]["name"] = f"{node}-slice"
    for device in manifest["spec"]["devices"]:
        device["capacity"]["shares"]["value"] = str(S)
    return manifest


def _claim(name: str, shares: int, devices: int = 1, on: tuple[str, str] | None = None) -> dict:
    claim: dict = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": devices,
                            "capacity": {"requests": {CAPACITY: str(shares)}},
                        },
                    }
                ]
            }
        },
    }
    if on is not None:
        node, device = on
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": dra.DRIVER,
                            "pool": node,
                            "device": device,
                            "consumedCapacity": {CAPACITY: str(shares)},
                        }
                    ]
                }
            }
        }
    return claim


def _pod(name: str, claim: str | None, node: str = "", cpu: str = "1") -> dict:
    spec: dict = {
        "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
    }
    status: dict = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "castslice-50"}]
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {"metadata": {"name": name, "namespace": "ml", "uid": name}, "spec": spec,
            "status": status}  # fmt: skip


def _view() -> ClusterView:
    """Two nodes of two GPUs; on `half`, a Pod holds half of its first GPU."""
    view = ClusterView(CAPACITY, S)
    view.replace("nodes", [_node("empty"), _node("half")])
    view.replace("resourceslices", [_slice("empty", 2), _slice("half", 2)])
    first = _slice("half", 2)["spec"]["devices"][0]["name"]
    view.replace("resourceclaims", [_claim("held", 50, on=("half", first)), _claim("new", 50)])
    view.replace("pods", [_pod("holder", "held", node="half"), _pod("newcomer", "new")])
    return view


def test_the_view_reads_each_gpu_s_free_share_and_each_node_s_cpu() -> None:
    view = _view()
    assert view.free("empty") == NodeFree(16000, (1000, 1000), "T4", 64 * GIB)
    assert view.free("half") == NodeFree(15000, (500, 1000), "T4", 63 * GIB)
    # Both Pods seen, both half a GPU and a CPU: one typical shape.
    assert view.typical() == [(PodShape(1000, 500, 1, (), GIB), 1.0)]


def test_the_view_scores_the_node_that_keeps_a_whole_gpu_free_highest() -> None:
    view = _view()
    scores = dict(view.scores(_pod("newcomer", "new"), ["empty", "half", "gone"]))
    assert scores["half"] > scores["empty"] > scores["gone"] == 0
    # A Pod whose claim is not seen yet gets no opinion: every node alike.
    assert {score for _, score in view.scores(_pod("x", "unknown"), ["empty", "half"])} == {0}


def test_a_deleted_claim_frees_its_share() -> None:
    view = _view()
    view.apply("resourceclaims", "DELETED", _claim("held", 50))
    assert view.free("half").gpu_milli == (1000, 1000)


def _clocked() -> tuple[ClusterView, list[float]]:
    now = [0.0]
    view = _view()
    view.clock = lambda: now[0]
    return view, now


def test_a_pod_sent_to_a_node_counts_there_until_the_watch_shows_it_and_only_once() -> None:
    first = _slice("empty", 2)["spec"]["devices"][0]["name"]
    # kube-scheduler binds in the background, so the watch may show the claim or the Pod first.
    for events in (
        [("resourceclaims", _claim("new", 50, on=("empty", first))),
         ("pods", _pod("newcomer", "new", node="empty"))],
        [("pods", _pod("newcomer", "new", node="empty")),
         ("resourceclaims", _claim("new", 50, on=("empty", first)))],
    ):  # fmt: skip
        view, _ = _clocked()
        # With `half` out (as if its filter failed), `empty` is the best.
        scored = dict(view.prioritize(_pod("newcomer", "new"), ["empty"]))
        assert scored["empty"] > 0
        # Before any event, the next Pod is scored with this one on `empty`: its CPU, its
        # memory and half of the GPU the allocator's first fit gives it.
        placed = NodeFree(15000, (500, 1000), "T4", 63 * GIB)
        assert view.free("empty") == placed == view.recounted("empty")
        assert view.free("half") == NodeFree(15000, (500, 1000), "T4", 63 * GIB)
        for kind, item in events:
            view.apply(kind, "MODIFIED", item)
            assert view.free("empty") == placed == view.recounted("empty")
        assert _outcomes(view) == {"bound where expected": 1, "devices as expected": 1}
    # The allocator took the second GPU where first fit predicted the first: said so.
    view, _ = _clocked()
    view.prioritize(_pod("newcomer", "new"), ["empty"])
    second = _slice("empty", 2)["spec"]["devices"][1]["name"]
    view.apply("resourceclaims", "MODIFIED", _claim("new", 50, on=("empty", second)))
    view.apply("pods", "MODIFIED", _pod("newcomer", "new", node="empty"))
    assert _outcomes(view) == {"bound where expected": 1, "devices elsewhere": 1}


def _outcomes(view: ClusterView) -> dict[str, int]:
    """How the view's expectations ended, as its summary gives them (zeros left out)."""
    return {name: count for name, count in view.summary()["expectations"].items() if count}


def test_a_pod_bound_elsewhere_or_never_bound_stops_counting_where_it_was_expected() -> None:
    view, now = _clocked()
    alone = view.free("half")
    view.prioritize(_pod("newcomer", "new"), ["empty", "half"])
    assert view.free("half") != alone
    view.apply("pods", "MODIFIED", _pod("newcomer", "new", node="empty"))
    assert view.free("half") == alone
    assert view.free("empty").cpu_milli == 15000
    assert _outcomes(view) == {"bound elsewhere": 1}
    # Never bound: counted until EXPECTED_FOR has passed, then no more.
    view, now = _clocked()
    view.prioritize(_pod("newcomer", "new"), ["empty", "half"])
    now[0] = EXPECTED_FOR - 1
    view.scores(_pod("other", "new"), ["empty", "half"])
    assert view.free("half") != alone
    now[0] = EXPECTED_FOR
    view.scores(_pod("other", "new"), ["empty", "half"])
    assert view.free("half") == alone == view.recounted("half")
    assert _outcomes(view) == {"lapsed": 1}
    # Scored again (a retry), a Pod is not counted against itself.
    view, _ = _clocked()
    once = view.prioritize(_pod("newcomer", "new"), ["empty", "half"])
    assert view.prioritize(_pod("newcomer", "new"), ["empty", "half"]) == once
    assert view.free("half") == NodeFree(14000, (0, 1000), "T4", 62 * GIB)


# ---- the HTTP verb


@pytest.fixture
def served() -> tuple[str, Extender]:
    extender = Extender(_view(), ready=lambda: True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(extender))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", extender
    server.shutdown()
    server.server_close()


def _post(url: str, body: bytes) -> tuple[int, object]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_ties_go_to_the_lowest_node_name_and_never_outweigh_the_score() -> None:
    scored = tie_broken([("node-b", 7), ("node-c", 7), ("node-a", 7), ("node-z", 8), ("gone", 0)])
    ranked = [name for name, _ in sorted(scored, key=lambda item: -item[1])]
    # The higher score first, whatever its name; then the tie in name order; no opinion last.
    assert ranked == ["node-z", "node-a", "node-b", "node-c", "gone"]
    assert dict(scored)["gone"] == 0


def test_prioritize_sends_a_pod_to_the_lowest_named_of_identical_nodes() -> None:
    view = _view()
    view.replace("nodes", [_node("empty"), _node("half"), _node("empty-2"), _node("empty-1")])
    view.replace(
        "resourceslices", [_slice(name, 2) for name in ("empty", "half", "empty-2", "empty-1")]
    )
    extender = Extender(view, ready=lambda: True)
    # With `half` out (as if its filter failed), three identical empty nodes remain.
    args = {"Pod": _pod("newcomer", "new"), "NodeNames": ["empty-2", "empty", "empty-1"]}
    status, body = extender.prioritize(json.dumps(args).encode())
    assert status == 200
    answer = {item["Host"]: item["Score"] for item in json.loads(body)}
    assert max(answer, key=answer.__getitem__) == "empty"
    assert answer["empty"] > answer["empty-1"] > answer["empty-2"]


# An eight-GPU task of 120 CPUs, which only a node of 128 CPUs fits, and a one-GPU one.
LARGE = PodShape(120000, 1000, 8)
ONE_GPU = PodShape(8000, 1000, 1)
BIG_NODE = NodeFree(128000, (1000,) * 8)
SMALL_NODE = NodeFree(64000, (1000,) * 8)


def test_a_rare_shape_fits_empty_on_one_node_or_fewer_than_one_in_twenty_with_gpus() -> None:
    cpu_only = NodeFree(256000, ())
    too_large = PodShape(200000, 1000, 8)
    seen = [LARGE, ONE_GPU, too_large, PodShape(120000), LARGE]
    # Two nodes in 41 fit LARGE; every node ONE_GPU; none too_large; a CPU-only shape
    # never counts.
    assert rare_shapes(seen, [*[BIG_NODE] * 2, *[SMALL_NODE] * 39, *[cpu_only] * 5]) == [LARGE]
    # Two in 40 is not fewer than 5 %: the CPU-only nodes do not count.
    assert rare_shapes(seen, [*[BIG_NODE] * 2, *[SMALL_NODE] * 38, *[cpu_only] * 5]) == []
    # One node is always few.
    assert rare_shapes(seen, [BIG_NODE, SMALL_NODE]) == [LARGE]
    # Where GPUs are shared by node pools, against the nodes of the shape's own pool: two
    # in 22 of the whole-GPU pool, though two in 52 of all nodes.
    whole = [*[replace(BIG_NODE, pool="whole")] * 2, *[replace(SMALL_NODE, pool="whole")] * 20]
    halves = [replace(SMALL_NODE, pool="2")] * 30
    large = replace(LARGE, pool="whole")
    assert rare_shapes([large], whole + halves) == []
    assert rare_shapes([large], whole + [replace(SMALL_NODE, pool="whole")] * 20) == [large]
    # A node's whole is a shape too: here only the big node's is rare.
    wholes = whole_node_shapes([BIG_NODE, *[SMALL_NODE] * 20, cpu_only])
    assert wholes == {PodShape(128000, 1000, 8), PodShape(64000, 1000, 8)}
    assert rare_shapes(wholes, [BIG_NODE, *[SMALL_NODE] * 20]) == [PodShape(128000, 1000, 8)]


def test_while_nothing_has_left_whole_gpus_tied_by_fgd_keep_off_the_node_a_rare_shape_needs() -> (
    None
):
    typical = [(ONE_GPU, 1.0)]
    rare = RareShapes((LARGE,))
    plain, keeping = Scorer(typical, {}), Scorer(typical, {}, rare=rare)
    # FGD and every tie key alike: without rare shapes the name decides.
    assert plain.score(BIG_NODE, ONE_GPU) == plain.score(SMALL_NODE, ONE_GPU)
    assert keeping.score(BIG_NODE, ONE_GPU) < keeping.score(SMALL_NODE, ONE_GPU)
    assert keeping.score(SMALL_NODE, ONE_GPU) == plain.score(SMALL_NODE, ONE_GPU) + 1
    # The key only breaks ties: FGD's score still comes first.
    fgd_small, fgd_big = (
        keeping.score(node, ONE_GPU) // TIE_RANGE for node in (SMALL_NODE, BIG_NODE)
    )
    assert fgd_small == fgd_big
    # A node that could not host the rare shape before loses nothing by the Pod.
    used_big = NodeFree(128000, (0,) + (1000,) * 7)
    assert keeping.score(used_big, ONE_GPU) % 1000 == 1
    # Shares and Pods without GPUs keep their own tie keys, rare shapes or not.
    for pod in (PodShape(8000, 500, 1), PodShape(16000)):
        assert keeping.score(BIG_NODE, pod) == plain.score(BIG_NODE, pod)
    for node in (BIG_NODE, SMALL_NODE, used_big):
        assert keeping.score(node, ONE_GPU) == extender_score(node, ONE_GPU, typical, {}, rare=rare)


def test_once_pods_leave_keeping_a_rare_shape_outranks_fgd_for_every_pod() -> None:
    """A Pod without GPUs of 16 CPUs: FGD prefers the big node, where the one-GPU typical
    Pods keep their CPU; once Pods leave, the node the rare shape needs is kept whole."""
    typical = [(PodShape(56000, 1000, 1), 1.0)]
    cpu_pod = PodShape(16000)
    pods = [cpu_pod, ONE_GPU, PodShape(8000, 500, 1), PodShape(0)]
    staying, leaving = RareShapes((LARGE,)), RareShapes((LARGE,), first=True)
    for rare in (staying, leaving):
        scorer = Scorer(typical, {}, rare=rare)
        for node in (BIG_NODE, SMALL_NODE):
            for pod in pods:
                assert scorer.score(node, pod) == extender_score(node, pod, typical, {}, rare=rare)
    staying_scorer, leaving_scorer = (
        Scorer(typical, {}, rare=staying),
        Scorer(typical, {}, rare=leaving),
    )
    assert staying_scorer.score(BIG_NODE, cpu_pod) > staying_scorer.score(SMALL_NODE, cpu_pod)
    assert leaving_scorer.score(BIG_NODE, cpu_pod) < leaving_scorer.score(SMALL_NODE, cpu_pod)
    # A Pod that asks nothing breaks nothing: every node alike.
    assert leaving_scorer.score(BIG_NODE, PodShape(0)) == leaving_scorer.score(
        SMALL_NODE, PodShape(0)
    )
    # A node that can no longer host the rare shape loses nothing more: FGD decides again.
    used_big = NodeFree(112000, (1000,) * 8)
    assert (
        leaving_scorer.score(used_big, cpu_pod)
        == staying_scorer.score(used_big, cpu_pod) + (MAX_NODE_SCORE + 1) * TIE_RANGE
    )


def _rare_view(bigs: int = 1) -> tuple[ClusterView, list[str]]:
    """Eight GPUs on each node: `bigs` of 128 CPUs (the first a G3, the others G2), twenty
    of 64 (G2)."""
    big = ["a-big", *(f"a-big-{index}" for index in range(1, bigs))]
    names = [*big, *(f"small-{index:02d}" for index in range(20))]
    view = ClusterView(CAPACITY, S)
    view.replace(
        "nodes",
        [*(_node(name, cpu="128", memory="1Ti", model="G3" if name == "a-big" else "G2")
           for name in big),
         *(_node(name, cpu="64", memory="512Gi", model="G2") for name in names[bigs:])],
    )  # fmt: skip
    view.replace("resourceslices", [_slice(name, 8) for name in names])
    return view, names


def _best(view: ClusterView, pod: dict, names: list[str]) -> str:
    scored = view.prioritize(pod, names)
    return max(scored, key=lambda item: item[1])[0]


# The whole of a node of 128 CPUs with its eight GPUs and 1 TiB.
BIG_WHOLE = PodShape(128000, 1000, 8, (), 1 << 40)


@pytest.mark.parametrize("bigs", [1, 2])
def test_a_whole_gpu_pod_keeps_off_a_node_whose_whole_fits_few(bigs: int) -> None:
    """A one-GPU Pod finds every node empty and FGD scoring them alike. With one node of
    128 CPUs in 21 its whole is rare: the extender keeps it free. With two in 22, it is
    not (9 %), and the lowest name takes the Pod."""
    view, names = _rare_view(bigs)
    view.apply("resourceclaims", "ADDED", _claim("one", S))
    best = _best(view, _pod("one", "one", cpu="8"), names)
    assert (best, view.rare()) == (
        ("small-00", RareShapes((BIG_WHOLE,))) if bigs == 1 else ("a-big", RareShapes())
    )
    assert (
        view.summary()["rarePods"]
        == [{"cpuMilli": 128000, "gpuMilli": 1000, "gpus": 8, "models": [], "memory": 1 << 40}][
            : 2 - bigs
        ]
    )


def test_a_node_joining_is_counted_in_the_rare_shapes_at_once() -> None:
    """A second node of 128 CPUs joins: the big whole, in one node of 21 before, is in two
    of 22 now and no longer rare."""
    view, _ = _rare_view()
    assert view.rare() == RareShapes((BIG_WHOLE,))
    view.apply("nodes", "ADDED", _node("a-big-1", cpu="128", memory="1Ti", model="G2"))
    view.apply("resourceslices", "ADDED", _slice("a-big-1", 8))
    assert view.rare() == RareShapes()


def _pinned_to_g3(pod: dict) -> dict:
    g3 = {"key": MODEL_LABEL, "operator": "In", "values": ["G3"]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                               {"nodeSelectorTerms": [{"matchExpressions": [g3]}]}}}  # fmt: skip
    return pod


@pytest.mark.parametrize("scored", [True, False], ids=["scored", "gone-unscored"])
@pytest.mark.parametrize("saw_large", [True, False])
def test_a_whole_gpu_pod_keeps_off_the_one_node_a_large_task_seen_before_needs(
    saw_large: bool, scored: bool
) -> None:
    """Two nodes of 128 CPUs, so neither's whole is rare; a large task pinned to the G3
    fits `a-big` alone. It has come and gone (scored, or deleted before any score call);
    a one-GPU Pod then finds every node empty and FGD scoring them alike. Remembering the
    large shape, the extender keeps `a-big` free; never having seen it, it takes the
    lowest name, `a-big`."""
    view, names = _rare_view(bigs=2)
    large = PodShape(120000, 1000, 8, ("G3",), GIB)
    if saw_large:
        view.apply("resourceclaims", "ADDED", _claim("large", S, devices=8))
        view.apply("pods", "ADDED", _pinned_to_g3(_pod("large", "large", cpu="120")))
        if scored:
            assert view.rare() == RareShapes((large,))
        view.apply("pods", "DELETED", _pod("large", "large", cpu="120"))
        view.apply("resourceclaims", "DELETED", _claim("large", S, devices=8))
    view.apply("resourceclaims", "ADDED", _claim("one", S))
    best = _best(view, _pod("one", "one", cpu="8"), names)
    assert best == ("a-big-1" if saw_large else "a-big")
    assert view.rare() == RareShapes((large,) if saw_large else ())


@pytest.mark.parametrize("leaving", ["deleted", "finished"])
def test_once_a_bound_pod_leaves_the_view_keeps_rare_nodes_whole_for_every_pod(
    leaving: str,
) -> None:
    """`a-big`'s whole fits it alone: rare from the start. While no Pod has left, a Pod
    without GPUs goes where FGD sends it, `a-big`, whose CPU keeps room for the one-GPU
    Pods of 56 CPUs seen (the whole-GPU tie key leaves it be); once a Pod bound to a node
    is deleted or finishes, keeping `a-big` whole comes first: a small node."""
    view, names = _rare_view()
    view.apply("resourceclaims", "ADDED", _claim("one", S, on=("small-05", "gpu-0")))
    one = _pod("one", "one", node="small-05", cpu="56")
    view.apply("pods", "ADDED", one)
    cpu_pod = _pod("cpu", None, cpu="16")
    assert _best(view, cpu_pod, names) == "a-big"
    assert view.rare() == RareShapes((BIG_WHOLE,))
    if leaving == "deleted":
        view.apply("pods", "DELETED", one)
    else:
        view.apply("pods", "MODIFIED", one | {"status": {"phase": "Succeeded"}})
    assert view.rare() == RareShapes((BIG_WHOLE,), first=True)
    assert _best(view, cpu_pod, names) != "a-big"


def test_prioritize_answers_a_host_priority_list_for_the_node_names(served) -> None:
    url, extender = served
    args = {"Pod": _pod("newcomer", "new"), "NodeNames": ["empty", "half"]}
    status, answer = _post(f"{url}/prioritize", json.dumps(args).encode())
    assert status == 200
    assert [item["Host"] for item in answer] == ["empty", "half"]
    scores = {item["Host"]: item["Score"] for item in answer}
    assert scores["half"] > scores["empty"]
    assert extender.calls == 1


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not an ExtenderArgs body"),
        (b'{"NodeNames": ["a"]}', "no Pod"),
        (b'{"Pod": {}, "Nodes": {"items": []}}', "nodeCacheCapable: true"),
    ],
)
def test_a_bad_request_is_an_error_the_scheduler_ignores_and_the_server_keeps_serving(
    served, body: bytes, says: str
) -> None:
    url, _ = served
    status, answer = _post(f"{url}/prioritize", body)
    assert status == 400
    assert says in answer["error"]
    good = json.dumps({"Pod": _pod("newcomer", "new"), "NodeNames": ["half"]}).encode()
    assert _post(f"{url}/prioritize", good)[0] == 200


def test_an_unsynced_view_answers_unavailable() -> None:
    extender = Extender(_view(), ready=lambda: False)
    status, _ = extender.prioritize(b"{}")
    assert status == 503


def test_the_pod_asked_about_counts_among_the_typical_pods_though_the_watch_trails() -> None:
    # The watch shows the newcomer as it was created: its template named, no claim made
    # from it yet (no `resourceClaimStatuses`). kube-scheduler's copy names its claim, a
    # quarter of a GPU where every other Pod asks for half of one.
    trailing, current = _view(), _view()
    for view in (trailing, current):
        view.apply("resourceclaims", "ADDED", _claim("quarter", 25))
    created = _pod("newcomer-2", "quarter")
    del created["status"]["resourceClaimStatuses"]
    trailing.apply("pods", "ADDED", created)
    quarter = PodShape(1000, 250, 1, (), GIB)
    # Read as the watch left it, before kube-scheduler asks.
    assert quarter not in dict(trailing.typical())
    current.apply("pods", "ADDED", _pod("newcomer-2", "quarter"))
    args = {"Pod": _pod("newcomer-2", "quarter"), "NodeNames": ["empty", "half"]}
    answers = [
        Extender(view, ready=lambda: True).prioritize(json.dumps(args).encode())
        for view in (trailing, current)
    ]
    assert answers[0] == answers[1]
    assert dict(trailing.typical()).get(quarter) == pytest.approx(1 / 3)
