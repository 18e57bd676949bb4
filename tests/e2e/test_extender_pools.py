"""The fragmentation-aware extender on a pool backend (`nvidia`, degree 4): the shipped
profile pointed at `castslice extender`, nodes labelled and sized as GPU Feature Discovery
and the device plugin leave them, Pods as the replay creates them through CastSlice."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import kubernetes.client
import pytest

from bench.packing.__main__ import configurations
from bench.packing.replay import NAMESPACE
from bench.packing.trace import TraceNode, TraceTask
from castslice.contract.scheduling import pod_request

from .placing import PlacingCluster, placing_cluster

NVIDIA_4 = next(item for item in configurations() if item.name == "nvidia-4")
ONE = TraceTask("one", 2000, 2048, 1, 1000, ())
TWO = TraceTask("two", 2000, 2048, 2, 1000, ())
# Thousandths of a GPU each unit of a resource is on this configuration's nodes.
_MILLI = {"nvidia.com/gpu": 1000, "nvidia.com/gpu.shared": 1000 // 4}


def _bound_milli(api: kubernetes.client.ApiClient) -> int:
    """The thousandths of a GPU the bound Pods ask for."""
    answer = kubernetes.client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, _preload_content=False)
    pods = json.loads(answer.data)["items"]
    return sum(
        pod_request(pod, resource) * milli
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName")
        for resource, milli in _MILLI.items()
    )


def cluster(nginx: Path, with_extender: bool) -> contextlib.AbstractContextManager[PlacingCluster]:
    """Two whole-GPU nodes of two GPUs and a sharing node of degree 4."""
    nodes = [TraceNode(f"gpu-{index}", 16000, 65536, 2, "T4") for index in range(3)]
    return placing_cluster(nginx, NVIDIA_4, nodes, [None, None, 4], _bound_milli, with_extender)


@pytest.mark.parametrize("with_extender", [False, True], ids=["default-profile", "extender"])
def test_the_extender_keeps_two_gpus_together_for_a_two_gpu_pod(
    nginx: Path, with_extender: bool
) -> None:
    """Two one-GPU Pods, then a two-GPU Pod. Default scoring spreads them, and the last
    finds no node with two GPUs free; the extender puts the second beside the first (FGD
    is level, and whole GPUs go to the lowest node name, as FGD's ties do), and the last
    runs. The sharing node never takes a whole-GPU Pod: it offers only the shared
    resource."""
    with cluster(nginx, with_extender) as made:
        first = made.place(ONE)
        second = made.place(ONE)
        last = made.place(TWO)
        if made.extender is not None:
            assert made.extender.state()["calls"] >= 2
    assert first in ("gpu-0", "gpu-1") and second in ("gpu-0", "gpu-1")
    if with_extender:
        assert second == first
        assert last is not None and last != first
    else:
        assert second != first
        assert last is None
