"""The extender's fast path gives the straightforward port's scores, bit for bit.

`fragmentation.Scorer` (fragmentations remembered by what they depend on, the typical Pods
compiled once) and `ClusterView` (each node's free resources kept from the watch events,
its scores remembered until an event touches it) are checked against `extender_score`
and `fragmentation` as written from the artefact, and against free resources counted again
over every Pod and claim: on random nodes and Pods, on a sample of the openb trace as the
replay fills it, and after every kind of watch event.
"""

from __future__ import annotations

import copy
import random

import pytest

from bench.packing import extender_cost
from bench.packing.trace import MILLI, TraceTask
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import (
    NodeFree,
    PodShape,
    Scorer,
    extender_score,
    fragmentation,
    typical_pods,
)

GIB = 1 << 30
MODELS = ("T4", "V100", "A10", "")
# A cluster's GPUs per model for the random nodes: few of some, many of others, so the
# pinned loads fall in different tenths.
GPUS_PER_MODEL = {"T4": 40, "V100": 8, "A10": 400}
# Node pools as the pool backends name them ("" where GPUs are DRA devices).
POOLS = ("", "", "4", "whole")


def _random_shape(draw: random.Random) -> PodShape:
    kind = draw.random()
    if kind < 0.05:
        return PodShape(0)
    if kind < 0.2:
        gpus, milli = 0, 0
    elif kind < 0.6:
        gpus, milli = 1, draw.choice((10, 50, 100, 250, 300, 500, 700, 990))
    elif kind < 0.65:
        # A claim for less than a thousandth of a GPU reads as 0 thousandths.
        gpus, milli = draw.randint(1, 2), 0
    else:
        gpus, milli = draw.choice((1, 1, 2, 4, 8)), MILLI
    models = tuple(sorted(draw.sample(MODELS[:3], draw.randint(1, 2)))) if kind > 0.8 else ()
    return PodShape(draw.choice((0, 1000, 2000, 8000, 16000, 32000)), milli, gpus, models,
                    draw.choice((0, 1, 4, 16, 64)) * GIB, draw.choice(POOLS))  # fmt: skip


def _random_node(draw: random.Random) -> NodeFree:
    gpus = tuple(draw.choice((0, 0, 10, 250, 500, 600, 990, 1000, 1000, 1000))
                 for _ in range(draw.choice((0, 1, 2, 4, 8))))  # fmt: skip
    # Overcommitted hosts (a Pod bound before the view saw its node's size) go negative.
    return NodeFree(draw.randint(-2000, 96000), gpus, draw.choice(MODELS),
                    draw.randint(-GIB, 512 * GIB), draw.choice(POOLS))  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_the_scorer_gives_the_reference_scores_and_fragmentations_on_random_nodes(
    seed: int,
) -> None:
    draw = random.Random(seed)
    # Typical Pods as the view learns them: frequencies from counts, medians of memory.
    typical = typical_pods(_random_shape(draw) for _ in range(300))
    scorer = Scorer(typical, GPUS_PER_MODEL)
    nodes = [_random_node(draw) for _ in range(150)]
    # A node's state repeated: a remembered fragmentation must be the one computed.
    nodes += nodes[:30]
    pods = [_random_shape(draw) for _ in range(40)]
    for node in nodes:
        assert scorer.fragmentation(node) == fragmentation(node, typical)
        for pod in pods:
            assert scorer.score(node, pod) == extender_score(node, pod, typical, GPUS_PER_MODEL), (
                node,
                pod,
            )


def _shape(task: TraceTask, shares: int) -> PodShape:
    """The shape a trace task's Pod has under `dra` at `shares` per GPU, from the task."""
    devices, each = extender_cost.claim_shape(task, shares) if task.num_gpu else (0, 0)
    milli = min(MILLI, each * MILLI // shares) if devices else 0
    return PodShape(task.cpu_milli, milli, devices, tuple(sorted(task.gpu_spec)),
                    task.memory_mib << 20)  # fmt: skip


def _reference_scores(view: ClusterView, names: list[str], shape: PodShape) -> list[int]:
    typical = view.typical()
    frees = [view.recounted(name) for name in names]
    return [
        extender_score(free, shape, typical, view.gpus_per_model(), rare=view.rare()) if free else 0
        for free in frees
    ]


def test_the_view_scores_a_trace_sample_as_the_reference_while_the_replay_fills_it() -> None:
    view, names, pending = extender_cost.build(every=20)
    shares = 100
    for pod, task in pending[:60]:
        scores = view.scores(pod, [*names, "no-such-node"])
        assert [score for _, score in scores] == [
            *_reference_scores(view, names, _shape(task, shares)),
            0,
        ]
        assert [view.free(name) for name in names] == [view.recounted(name) for name in names]
        extender_cost.bind(view, pod, task, scores, shares)
    placed = sum(view.free(name) != view.recounted(name) for name in names)
    assert placed == 0


def _events(draw: random.Random, nodes: list[str]) -> list[tuple[str, str, dict]]:
    """Random watch events over `nodes`: nodes resized, slices replaced, claims allocated
    and released, Pods bound, finished and deleted, and objects deleted and added back."""
    events: list[tuple[str, str, dict]] = []
    for step in range(120):
        node = draw.choice(nodes)
        kind = draw.random()
        if kind < 0.1:
            cpu, memory = draw.choice((8000, 32000, 96000)), draw.choice((16, 64, 512))
            manifest = extender_cost.node_manifest(extender_cost.TraceNode(
                node, cpu, memory * 1024, draw.randint(1, 8), draw.choice(MODELS[:3])))  # fmt: skip
            events.append(("nodes", draw.choice(("MODIFIED", "DELETED", "ADDED")), manifest))
        elif kind < 0.2:
            trace_node = extender_cost.TraceNode(node, 0, 0, draw.choice((0, 2, 4, 8)), "T4")
            manifest = extender_cost.slice_manifest(trace_node, 100)
            events.append(("resourceslices", draw.choice(("MODIFIED", "DELETED")), manifest))
        else:
            cpu, memory = draw.choice((1000, 4000)), draw.choice((1024, 8192))
            task = TraceTask(f"t{step}", cpu, memory, draw.choice((0, 1, 1, 2)),
                             draw.choice((250, 500, 1000)), ())  # fmt: skip
            name = f"pod-{draw.randint(0, 30)}"
            claim = f"{name}-gpu" if task.num_gpu else None
            devices, each = extender_cost.claim_shape(task, 100) if task.num_gpu else (0, 0)
            allocated = [(node, f"gpu-{index}", each) for index in range(devices)]
            bound = node if draw.random() < 0.8 else ""
            pod = extender_cost.pod_manifest(name, task, bound, claim)
            if draw.random() < 0.2:
                pod["status"]["phase"] = "Succeeded"
            if claim is not None:
                events.append(("resourceclaims", "MODIFIED", extender_cost.claim_manifest(
                    claim, task, 100, allocated if bound else None)))  # fmt: skip
            events.append(("pods", "DELETED" if draw.random() < 0.15 else "MODIFIED", pod))
            if bound and draw.random() < 0.3:
                # The same Pod again, finished: only its phase moves, and its node frees up.
                finished = copy.deepcopy(pod)
                finished["status"]["phase"] = "Failed"
                events.append(("pods", "MODIFIED", finished))
    return events


@pytest.mark.parametrize("seed", range(3))
def test_every_watch_event_leaves_each_node_as_a_recount_finds_it(seed: int) -> None:
    draw = random.Random(seed)
    names = [f"node-{index}" for index in range(6)]
    view = ClusterView(extender_cost.CAPACITY, 100)
    trace_nodes = [extender_cost.TraceNode(name, 32000, 65536, 4, "T4") for name in names]
    view.replace("nodes", [extender_cost.node_manifest(node) for node in trace_nodes])
    view.replace("resourceslices", [extender_cost.slice_manifest(n, 100) for n in trace_nodes])
    asked = extender_cost.pod_manifest("asked", TraceTask("a", 1000, 1024, 1, 500, ()), "", None)
    asked["spec"]["resourceClaims"] = []
    for kind, event, item in _events(draw, names):
        view.apply(kind, event, item)
        assert [view.free(name) for name in names] == [view.recounted(name) for name in names]
        # Scores remembered before the event must not outlive it.
        typical = view.typical()
        cpu_only = dict(view.scores(asked, names))
        assert [cpu_only[name] for name in names] == [
            extender_score(
                free,
                PodShape(1000, 0, 0, (), GIB),
                typical,
                view.gpus_per_model(),
                rare=view.rare(),
            )
            if free
            else 0
            for free in (view.recounted(name) for name in names)
        ]
    # A fresh list of each kind recounts from scratch and agrees too.
    view.replace("pods", [])
    assert [view.free(name) for name in names] == [view.recounted(name) for name in names]
