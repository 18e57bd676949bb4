"""The fragmentation-aware extender on the real kube-scheduler: the shipped profile
(infra/scheduler/fgd-extender.yaml) pointed at `castslice extender`, GPUs as DRA devices
with 100 shares each, Pods rewritten by CastSlice as served in production."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import kubernetes.client
import pytest

from bench.packing.__main__ import configurations
from bench.packing.replay import NAMESPACE
from bench.packing.trace import TraceNode, TraceTask

from .placing import PlacingCluster, placing_cluster

DRA_100 = next(item for item in configurations() if item.name == "dra-100")
WHOLE = TraceTask("whole", 4000, 4096, 1, 1000, ())
HALF = TraceTask("half", 4000, 4096, 1, 500, ())
# An eight-GPU task of 120 CPUs (the openb trace's largest).
LARGE = TraceTask("large", 120000, 65536, 8, 1000, ())
CLAIM_TASKS = [WHOLE, HALF, LARGE]


def _claimed_milli(api: kubernetes.client.ApiClient) -> int:
    """The thousandths of a GPU the allocated claims hold (100 shares a GPU)."""
    answer = kubernetes.client.ResourceV1Api(api).list_namespaced_resource_claim(
        NAMESPACE, _preload_content=False
    )
    claims = json.loads(answer.data)["items"]
    return sum(
        int(result["consumedCapacity"]["shares"]) * 1000 // 100
        for claim in claims
        for result in ((claim.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
    )


def cluster(
    nginx: Path, nodes: list[TraceNode], with_extender: bool
) -> contextlib.AbstractContextManager[PlacingCluster]:
    return placing_cluster(
        nginx, DRA_100, nodes, [100] * len(nodes), _claimed_milli, with_extender, CLAIM_TASKS
    )


def _nodes(count: int, gpus: int) -> list[TraceNode]:
    return [TraceNode(f"gpu-{index}", 16000, 65536, gpus, "T4") for index in range(count)]


def _expectations_settled(made: PlacingCluster) -> dict[str, int]:
    """The extender's account of where the Pods it scored went, once its watch has shown
    each of them bound (or after 30 s); empty without an extender."""
    if made.extender is None:
        return {}
    deadline = time.monotonic() + 30
    while True:
        state = made.extender.state()
        outcomes: dict[str, int] = state["expectations"]
        seen = outcomes["bound where expected"] + outcomes["bound elsewhere"]
        if seen >= state["calls"] or time.monotonic() > deadline:
            return outcomes
        time.sleep(0.2)


@pytest.mark.kubernetes("1.36")
@pytest.mark.parametrize("with_extender", [False, True], ids=["default-profile", "extender"])
def test_the_extender_keeps_a_whole_gpu_free_where_default_scoring_fragments_two(
    nginx: Path, with_extender: bool
) -> None:
    """Three one-GPU nodes. A whole-GPU Pod, then two half-GPU Pods, then another whole-GPU
    Pod. Default scoring spreads the halves over two GPUs by CPU (the second half also
    prefers, weight 100, any node but the first half's: the pull of the scheduler's own
    scores made certain), and the last Pod finds no whole GPU; the extender puts the
    second half beside the first (FGD: it removes the fragment the first left), and the
    last Pod runs."""
    with cluster(nginx, _nodes(3, 1), with_extender) as made:
        first_whole = made.place(WHOLE)
        first_half = made.place(HALF)
        second_half = made.place(HALF, away_from=first_half)
        last_whole = made.place(WHOLE)
        followed = _expectations_settled(made)
    assert first_whole is not None and first_half is not None and second_half is not None
    if with_extender:
        assert second_half == first_half
        assert last_whole is not None
        # Its own account agrees: every Pod it scored went to its best node, the half
        # against the weight-100 preference too, and every share to the GPU it predicted.
        assert followed["bound elsewhere"] == followed["lapsed"] == 0, followed
        assert followed["devices elsewhere"] == 0, followed
        assert followed["bound where expected"] >= 3, followed
    else:
        assert second_half != first_half
        assert last_whole is None


@pytest.mark.kubernetes("1.36")
@pytest.mark.parametrize("bigs", [1, 2], ids=["one-large-node", "two-large-nodes"])
def test_a_whole_gpu_pod_keeps_off_the_one_node_a_large_task_that_came_and_went_needs(
    nginx: Path, bigs: int
) -> None:
    """Nodes of eight GPUs: `bigs` with the 120 CPUs an eight-GPU task asks, twenty
    without. That task runs on `gpu-00`, the lowest name, and is deleted; a one-GPU Pod
    then finds every node empty, FGD scoring them alike. With one such node in 21 the
    task's shape, and the node's whole, are rare: the extender keeps `gpu-00` free. With
    two in 22 neither is, and the lowest name takes the Pod."""
    nodes = [TraceNode(f"gpu-{index:02d}", 128000, 786432, 8, "G3") for index in range(bigs)]
    nodes += [
        TraceNode(f"gpu-{index:02d}", 64000, 262144, 8, "G2") for index in range(bigs, bigs + 20)
    ]
    with cluster(nginx, nodes, with_extender=True) as made:
        assert made.place(LARGE) == "gpu-00"
        made.delete_last()
        one = made.place(WHOLE)
    assert one is not None
    assert (one != "gpu-00") == (bigs == 1)


@pytest.mark.kubernetes("1.36")
def test_with_the_extender_killed_mid_run_every_pod_that_fits_still_runs(nginx: Path) -> None:
    """Sixteen half-GPU Pods fit eight GPUs however they are placed. The extender scores
    the first eight, then is killed: the scheduler, told the extender is ignorable, places
    the other eight by its own scores."""
    with cluster(nginx, _nodes(4, 2), with_extender=True) as made:
        assert made.extender is not None
        placed = [made.place(HALF) for _ in range(8)]
        assert made.extender.state()["calls"] >= 8
        made.extender.stop()
        made.extender = None
        placed += [made.place(HALF) for _ in range(8)]
    assert None not in placed
