"""`castslice plan`'s scheduler count for the `mig` backend, applied on the real scheduler:
each instance pool's nodes cut into that profile alone and the whole-GPU pool's MIG-disabled,
labelled and advertising as the NVIDIA device plugin and GPU Feature Discovery leave them
under the `mixed` strategy with mig-parted v0.15.0's layouts (tests/mig_nodes.py), the
Pods written as plan's tasks and rewritten by CastSlice on plan's settings, kube-scheduler's
default profile (no extender: it scores no MIG instances), and its MostAllocated count on
kube-scheduler configured with infra/scheduler/most-allocated.yaml."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import kubernetes.client

from castslice.extender.fragmentation import WHOLE
from tests.helpers import HEADER, run_plan
from tests.procs import wait_until

from ..mig_nodes import gpu_node_side
from . import tools
from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .mig_cluster import TIMEOUT, pod, start
from .nodes import clear_unscheduled_pods, create_shaped_nodes, delete_nodes, shaped_node
from .pods import create_namespace, create_pod, read_pod, unschedulable
from .registration import register_and_wait
from .tools import REPO_ROOT

__all__ = ["start"]

MODEL = "A100-80GB"
SLICES_PER_GPU = 8
# (name, GPUs, share of each in thousandths), in the order they arrive. Halves are 3g.40gb
# instances (two to a GPU), quarters 1g.20gb (four to a GPU); whole GPUs are not opted in.
TASKS = [("h0", 1, 500), ("q0", 1, 250), ("h1", 1, 500), ("w0", 1, 1000), ("q1", 1, 250),
         ("w1", 1, 1000), ("h2", 1, 500), ("d0", 2, 1000), ("q2", 1, 250)]  # fmt: skip
# What each task asks of a node beside its GPUs; the nodes' own CPU and memory are
# tests/e2e/nodes.py's (8 CPUs, 32 GiB), two GPUs each.
CPU_MILLI, MEMORY_MIB, GPUS_PER_NODE = 1000, 1024, 2


SETTINGS = {
    "CASTSLICE_BACKEND": "mig",
    "CASTSLICE_MIG_GPU_MODELS": MODEL,
    "CASTSLICE_SLICES_PER_GPU": str(SLICES_PER_GPU),
}
MOST_ALLOCATED = REPO_ROOT / "infra" / "scheduler" / "most-allocated.yaml"


def _plan(tmp_path: Path) -> dict[str, Any]:
    """`castslice plan` on TASKS and nodes of two GPUs, as JSON."""
    trace = tmp_path / "tasks.csv"
    trace.write_text(HEADER + "".join(
        f"{name},{CPU_MILLI},{MEMORY_MIB},{gpus},{milli},\n" for name, gpus, milli in TASKS
    ))  # fmt: skip
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(f"sn,cpu_milli,memory_mib,gpu,model\nn,8000,32768,{GPUS_PER_NODE},A100\n")
    done = run_plan("--trace", str(trace), "--nodes", str(nodes), "--backend", "mig",
                    "--mig-gpu-models", MODEL, "--slices-per-gpu", str(SLICES_PER_GPU),
                    "-o", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _count(result: dict[str, Any], key: str, scored_by: str, whole_nodes: int) -> dict[str, Any]:
    """Plan's count `key`, checked: what ranked the nodes, one node for each instance pool
    and `whole_nodes` for whole GPUs."""
    count: dict[str, Any] = result[key]
    assert count["scoredBy"] == scored_by
    assert {part["pool"]: part["nodes"] for part in count["pools"]} == {
        "3g.40gb": 1, "1g.20gb": 1, WHOLE: whole_nodes
    }  # fmt: skip
    return count


def _check_counts(api: kubernetes.client.ApiClient, namespace: str, count: dict[str, Any]) -> None:
    """On the count's nodes every task runs; one node fewer in a pool leaves the task the
    count names for that pool Pending."""
    parts = {part["pool"]: part for part in count["pools"]}
    counts = {pool: part["nodes"] for pool, part in parts.items()}
    assert _first_pending(api, namespace, counts) is None
    for pool, part in parts.items():
        fewer = counts | {pool: counts[pool] - 1}
        assert _first_pending(api, namespace, fewer) == part["pendingWithOneNodeFewer"]


def test_plan_s_mig_pool_counts_applied_as_printed_place_every_task_and_a_node_fewer_does_not(
    api: kubernetes.client.ApiClient, namespace: str, start: Any, tmp_path: Path
) -> None:
    """On plan's counts every task runs; with one node fewer in a pool, the task plan names
    for that pool stays Pending. The whole-GPU pool needs three nodes: the scheduler's own
    scores spread the two one-GPU Pods over two nodes, and the two-GPU Pod needs a third."""
    result = _plan(tmp_path)
    scheduled = _count(result, "scheduled", "kube-scheduler", whole_nodes=3)
    start(SETTINGS | result["recommendation"]["environment"])
    _check_counts(api, namespace, scheduled)


def test_plan_s_most_allocated_count_holds_on_the_shipped_profile(
    nginx: Path, tmp_path: Path
) -> None:
    """The same tasks under infra/scheduler/most-allocated.yaml: the second one-GPU Pod goes
    beside the first, and the two-GPU Pod finds the other node empty: two whole-GPU nodes,
    as plan's MostAllocated count says."""
    result = _plan(tmp_path)
    packed = _count(result, "scheduledMostAllocated", "most-allocated", whole_nodes=2)
    settings = SETTINGS | result["recommendation"]["environment"]
    with (
        LocalControlPlane(tools.kube_binaries(), scheduler_config=MOST_ALLOCATED) as plane,
        CastSliceServer(nginx, settings) as server,
    ):
        api = plane.api_client()
        register_and_wait(api, server)
        namespace = create_namespace(api, f"mig-plan-{uuid.uuid4().hex[:6]}")
        _check_counts(api, namespace, packed)


def _first_pending(
    api: kubernetes.client.ApiClient, namespace: str, counts: dict[str, int]
) -> str | None:
    """The first task left Pending on `counts` nodes per pool, each Pod created once the one
    before it is bound or refused; the Pods and nodes deleted after."""
    clear_unscheduled_pods(api, namespace)
    run = uuid.uuid4().hex[:6]
    manifests = [
        shaped_node(
            f"mig-{pool.replace('.', '')}-{run}-{index}",
            *gpu_node_side(
                "mixed", MODEL, "all-disabled" if pool == WHOLE else f"all-{pool}", GPUS_PER_NODE
            ),
        )
        for pool, count in counts.items()
        for index in range(count)
    ]
    create_shaped_nodes(api, manifests)
    core = kubernetes.client.CoreV1Api(api)
    try:
        for name, gpus, milli in TASKS:
            slices = milli * SLICES_PER_GPU // 1000 if milli < 1000 else None
            manifest = pod(f"{name}-{run}", slices, gpus)
            resources = manifest["spec"]["containers"][0]["resources"]
            resources["limits"] = {key: str(value) for key, value in resources["limits"].items()}
            resources["requests"] = {
                "cpu": f"{CPU_MILLI}m",
                "memory": f"{MEMORY_MIB}Mi",
            }
            create_pod(api, namespace, manifest)

            def decided(pod_name: str = f"{name}-{run}") -> dict[str, Any] | None:
                stored = read_pod(api, namespace, pod_name)
                bound = stored["spec"].get("nodeName") or unschedulable(stored) is not None
                return stored if bound else None

            stored = wait_until(decided, timeout=TIMEOUT, what=f"{name} to be bound or refused")
            if not stored["spec"].get("nodeName"):
                return name
        return None
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        delete_nodes(api, [manifest["metadata"]["name"] for manifest in manifests])
