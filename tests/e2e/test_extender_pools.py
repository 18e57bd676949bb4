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
from bench.packing.replay import NAMESPACE, Configuration
from bench.packing.trace import TraceNode, TraceTask
from castslice.contract.scheduling import pod_request
from castslice.extender.fragmentation import WHOLE
from castslice.extender.placing import NodeKind, pooled_cluster
from tests.helpers import HEADER, run_plan

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


# Seven quarters, three halves and two whole GPUs, interleaved: pools of 4 and 2 clients
# per GPU need six GPUs, pools of 2 alone seven.
POOL_TASKS = [
    TraceTask(name, 1000, 1024, 1, milli, ())
    for name, milli in [("q1", 250), ("h1", 500), ("w1", 1000), ("q2", 250), ("q3", 250),
                        ("h2", 500), ("q4", 250), ("w2", 1000), ("h3", 500), ("q5", 250),
                        ("q6", 250), ("q7", 250)]
]  # fmt: skip


def test_plan_s_pool_counts_applied_as_printed_place_every_task_and_a_node_fewer_does_not(
    nginx: Path, tmp_path: Path
) -> None:
    """`castslice plan --backend nvidia` on nodes of one T4: its settings served by
    CastSlice, each pool's nodes made as the device plugin leaves them, the real scheduler
    with the extender. On plan's counts every task runs; with one node fewer in a pool, the
    task plan names for that pool stays Pending."""
    trace = tmp_path / "tasks.csv"
    trace.write_text(HEADER + "".join(
        f"{t.name},{t.cpu_milli},{t.memory_mib},{t.num_gpu},{t.gpu_milli},\n" for t in POOL_TASKS
    ))  # fmt: skip
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn,16000,65536,1,T4\n")
    done = run_plan("--trace", str(trace), "--nodes", str(nodes), "--backend", "nvidia",
                    "-o", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    configuration = Configuration(
        "plan", {"CASTSLICE_BACKEND": "nvidia"} | result["recommendation"]["environment"]
    )
    parts = {part["pool"]: part for part in result["scheduled"]["pools"]}
    counts = {pool: part["nodes"] for pool, part in parts.items()}
    assert counts == {"4": 2, "2": 2, WHOLE: 2}
    assert _pending(nginx, configuration, counts) is None
    for pool, part in parts.items():
        assert (
            _pending(nginx, configuration, counts | {pool: counts[pool] - 1})
            == part["pendingWithOneNodeFewer"]
        )


def _pending(nginx: Path, configuration: Configuration, counts: dict[str, int]) -> str | None:
    """The first of POOL_TASKS left Pending on plan's pools of `counts` nodes."""
    node = NodeKind("n", 16000, 65536, 1, "T4")
    made_nodes = pooled_cluster([node], counts)
    degrees = {made.name: None if made.pool == WHOLE else int(made.pool) for made in made_nodes}

    def held(api: kubernetes.client.ApiClient) -> int:
        answer = kubernetes.client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, _preload_content=False
        )
        return sum(
            pod_request(pod, resource) * (1000 // (degrees[pod["spec"]["nodeName"]] or 1))
            for pod in json.loads(answer.data)["items"]
            if (pod.get("spec") or {}).get("nodeName")
            for resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared")
        )

    trace_nodes = [
        TraceNode(made.name, made.cpu_milli, made.memory_mib, made.gpus, made.model)
        for made in made_nodes
    ]
    with placing_cluster(nginx, configuration, trace_nodes, list(degrees.values()), held,
                         with_extender=True) as made:  # fmt: skip
        for task in POOL_TASKS:
            if made.place(task) is None:
                return task.name
    return None
