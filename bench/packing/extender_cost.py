"""`python -m bench.packing.extender_cost`: the extender's `prioritize` cost on the whole trace,
in process, without a cluster.

The view is built from the objects the API server would hold: the trace's 1213 nodes, each
with a ResourceSlice of its GPUs (`dra` at S shares per GPU), and the workload's Pods (130 %
of the GPUs, the artefact's shuffled order) with their ResourceClaims. The first Pods in
that order are placed until half the cluster's GPUs are taken (on a random node they fit,
on the first GPUs that fit, as the DRA allocator takes them); the rest stay Pending, as in a
replay where the scheduler is behind. Then the Pending Pods are scored against every node,
as kube-scheduler calls the extender with `percentageOfNodesToScore: 100`.

    python -m bench.packing.extender_cost --calls 200
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from castslice.contract import Manifest
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import NodeFree
from castslice.extender.watching import MODEL_LABEL

from .trace import MILLI, TraceNode, TraceTask, read_nodes, read_tasks, sample_nodes, workload

CAPACITY = "shares"
DRIVER = "gpu.nvidia.com"


@dataclass
class _Placed:
    cpu_milli: int
    memory_mib: int
    shares: list[int]


def node_manifest(node: TraceNode) -> Manifest:
    allocatable = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": "110"}
    return {
        "metadata": {"name": node.name, "labels": {MODEL_LABEL: node.model}},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def slice_manifest(node: TraceNode, shares: int) -> Manifest:
    devices = [
        {"name": f"gpu-{index}", "capacity": {CAPACITY: {"value": str(shares)}}}
        for index in range(node.gpus)
    ]
    return {
        "metadata": {"name": f"{node.name}-slice"},
        "spec": {"driver": DRIVER, "nodeName": node.name, "pool": {"name": node.name},
                 "devices": devices},
    }  # fmt: skip


def claim_shape(task: TraceTask, shares: int) -> tuple[int, int]:
    """(devices, shares of each) the `dra` backend claims for the task."""
    if task.fractional:
        return 1, max(1, math.ceil(task.gpu_milli * shares / MILLI))
    return task.num_gpu, shares


def claim_manifest(
    name: str, task: TraceTask, shares: int, allocated: list[tuple[str, str, int]] | None
) -> Manifest:
    devices, each = claim_shape(task, shares)
    claim: Manifest = {
        "metadata": {"name": name, "namespace": "trace"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER, "count": devices,
            "capacity": {"requests": {CAPACITY: str(each)}}}}]}},
    }  # fmt: skip
    if allocated:
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device,
             "consumedCapacity": {CAPACITY: str(consumed)}}
            for pool, device, consumed in allocated]}}}  # fmt: skip
    return claim


def pod_manifest(name: str, task: TraceTask, node: str, claim: str | None) -> Manifest:
    spec: Manifest = {"containers": [{"name": "task", "resources": {"requests": {
        "cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}}}]}  # fmt: skip
    status: Manifest = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if task.gpu_spec:
        models = {"key": MODEL_LABEL, "operator": "In", "values": list(task.gpu_spec)}
        required = {"nodeSelectorTerms": [{"matchExpressions": [models]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {"metadata": {"name": name, "namespace": "trace", "uid": name}, "spec": spec,
            "status": status}  # fmt: skip


def _place(
    task: TraceTask,
    nodes: list[TraceNode],
    state: dict[str, _Placed],
    shares: int,
    draw: random.Random,
) -> tuple[str, list[tuple[str, str, int]]] | None:
    devices, each = claim_shape(task, shares) if task.num_gpu else (0, 0)
    fitting = []
    for node in nodes:
        placed = state[node.name]
        if task.gpu_spec and node.model not in task.gpu_spec:
            continue
        if placed.cpu_milli < task.cpu_milli or placed.memory_mib < task.memory_mib:
            continue
        if sum(1 for left in placed.shares if left >= each) < devices:
            continue
        fitting.append(node)
    if not fitting:
        return None
    node = draw.choice(fitting)
    placed = state[node.name]
    placed.cpu_milli -= task.cpu_milli
    placed.memory_mib -= task.memory_mib
    taken = []
    for index, left in enumerate(placed.shares):
        if len(taken) == devices:
            break
        if left >= each:
            placed.shares[index] -= each
            taken.append((node.name, f"gpu-{index}", each))
    return node.name, taken


def build(
    every: int = 1, seed: int = 42, shares: int = 100, filled: float = 0.5
) -> tuple[ClusterView, list[str], list[tuple[Manifest, TraceTask]]]:
    """The view, the node names, and the Pending Pods to score with their tasks."""
    nodes = sample_nodes(read_nodes(), every)
    gpus = sum(node.gpus for node in nodes)
    tasks = workload(read_tasks(), gpus, seed, "shuffled")
    draw = random.Random(seed)
    state = {node.name: _Placed(node.cpu_milli, node.memory_mib, [shares] * node.gpus)
             for node in nodes}  # fmt: skip
    pods, claims = [], []
    pending: list[tuple[Manifest, TraceTask]] = []
    taken_gpus = 0.0
    for index, task in enumerate(tasks):
        name = f"task-{index:05d}"
        claim = f"{name}-gpu" if task.num_gpu else None
        where = None
        if taken_gpus < filled * gpus:
            where = _place(task, nodes, state, shares, draw)
        node, allocated = where if where is not None else ("", [])
        if where is not None:
            taken_gpus += float(task.demand)
        if claim is not None:
            claims.append(claim_manifest(claim, task, shares, allocated))
        pod = pod_manifest(name, task, node, claim)
        pods.append(pod)
        if not node:
            pending.append((pod, task))
    view = ClusterView(CAPACITY, shares)
    view.replace("nodes", [node_manifest(node) for node in nodes])
    view.replace("resourceslices", [slice_manifest(node, shares) for node in nodes if node.gpus])
    view.replace("resourceclaims", claims)
    view.replace("pods", pods)
    # The view reads the Pods' shapes a batch per call, as a real one would on its first
    # calls after listing them all: read them all before timing.
    for _ in range(len(pods) // 100 + 1):
        view.typical()
    return view, [node.name for node in nodes], pending


def fitting_gpus(free: NodeFree | None, task: TraceTask, shares: int) -> list[int] | None:
    """The GPUs the DRA allocator gives `task` on a node with `free` left (its first fit;
    none for a task without GPUs), or None where the task does not fit there: the
    scheduler's filters (CPU, memory, the GPU model asked for) and the allocator's."""
    if free is None or free.cpu_milli < task.cpu_milli or free.memory < task.memory_mib << 20:
        return None
    if task.gpu_spec and free.model not in task.gpu_spec:
        return None
    devices, each = claim_shape(task, shares) if task.num_gpu else (0, 0)
    lefts = [milli * shares // MILLI for milli in free.gpu_milli]
    chosen = [index for index, left in enumerate(lefts) if left >= each][:devices]
    return chosen if len(chosen) == devices else None


def feasible_nodes(
    view: ClusterView, task: TraceTask, names: Sequence[str], shares: int
) -> list[str]:
    """The nodes of `names` that pass the scheduler's filters for `task` on `view`."""
    return [name for name in names if fitting_gpus(view.free(name), task, shares) is not None]


def prioritized(view: ClusterView, pod: Manifest, feasible: Sequence[str]) -> list[tuple[str, int]]:
    """The extender's scores for `feasible`, asked as kube-scheduler asks: only when two or
    more nodes pass its filters ("When only one node after predicate, just use it",
    pkg/scheduler/schedule_one.go); a Pod that fits one node goes there unscored, and one
    that fits none is counted nowhere, the watch alone showing them to the extender."""
    if len(feasible) < 2:
        return [(name, 0) for name in feasible]
    return view.prioritize(pod, feasible)


def bind(
    view: ClusterView,
    pod: Manifest,
    task: TraceTask,
    scores: list[tuple[str, int]],
    shares: int,
    watch: Callable[[tuple[str, str, Manifest]], None] | None = None,
) -> str | None:
    """Place `pod` on the best-scored node it fits, as the scheduler and the DRA allocator
    would, and tell the view as the watches would: the claim allocated, the Pod bound.
    `watch`: told the same events, for a view that learns them later."""
    each = claim_shape(task, shares)[1] if task.num_gpu else 0
    for name, _ in sorted(scores, key=lambda scored: -scored[1]):
        chosen = fitting_gpus(view.free(name), task, shares)
        if chosen is None:
            continue
        claim_name = pod["status"].get("resourceClaimStatuses", [{}])[0].get("resourceClaimName")
        events = []
        if claim_name:
            allocated = [(name, f"gpu-{index}", each) for index in chosen]
            events.append(("resourceclaims", claim_manifest(claim_name, task, shares, allocated)))
        events.append(("pods", pod_manifest(pod["metadata"]["name"], task, name, claim_name)))
        for kind, item in events:
            view.apply(kind, "MODIFIED", item)
            if watch is not None:
                watch((kind, "MODIFIED", item))
        return name
    return None


def build_pools(
    configuration_name: str, every: int = 1, seed: int = 42, filled: float = 0.5
) -> tuple[ClusterView, list[str], list[Manifest]]:
    """The same on a pool backend (`nvidia-plan`, `gke-4`...): the replay's nodes and pools
    for that configuration, its Pods as the webhook rewrites them, placed on a random node
    of their pool with a client free until half the GPU demand of the cluster is placed."""
    import copy
    import json

    import jsonpatch

    from castslice.decision.admission import Admission
    from castslice.extender.watching import Pools

    from .__main__ import configurations
    from .replay import node_manifest as pool_node
    from .replay import node_pools
    from .replay import pod_manifest as replay_pod

    configuration = {item.name: item for item in configurations()}[configuration_name]
    config = configuration.config
    pools = Pools(configuration.backend)
    nodes = sample_nodes(read_nodes(), every)
    gpus = sum(node.gpus for node in nodes)
    tasks = workload(read_tasks(), gpus, seed, "shuffled")
    manifests = [
        pool_node(configuration, node, sharing)
        for node, sharing in zip(nodes, node_pools(configuration, nodes, tasks), strict=True)
    ]
    # name -> [pool, resource, free units, free CPU, free memory MiB, model]
    state: dict[str, list[Any]] = {}
    for node, manifest in zip(nodes, manifests, strict=True):
        pool, resource, node_gpus, clients = pools.node(manifest, manifest["metadata"]["labels"])
        state[node.name] = [pool, resource, node_gpus * clients, node.cpu_milli,
                            node.memory_mib, node.model]  # fmt: skip
    admission, draw = Admission(config), random.Random(seed)
    pods, pending, taken = [], [], 0.0
    for index, task in enumerate(tasks):
        manifest = replay_pod(configuration, index, task)
        manifest["metadata"]["namespace"] = "trace"
        request = {"uid": str(index), "operation": "CREATE", "namespace": "trace",
                   "kind": {"group": "", "version": "v1", "kind": "Pod"},
                   "object": copy.deepcopy(manifest)}  # fmt: skip
        answer = admission.review(request).response
        if "patch" in answer:
            manifest = jsonpatch.apply_patch(manifest, json.loads(answer["patch"]))
        manifest["metadata"]["uid"] = manifest["metadata"]["name"]
        pool, units = pools.pod(manifest)
        node_name = ""
        if taken < filled * gpus:
            fitting = [
                name for name, (node_pool, _, free, cpu, memory, model) in state.items()
                if cpu >= task.cpu_milli and memory >= task.memory_mib
                and (not units or (node_pool == pool and free >= units))
                and (not task.gpu_spec or model in task.gpu_spec)
            ]  # fmt: skip
            if fitting:
                node_name = draw.choice(fitting)
                entry = state[node_name]
                entry[2] -= units
                entry[3] -= task.cpu_milli
                entry[4] -= task.memory_mib
                taken += float(task.demand)
        manifest["status"] = {"phase": "Running" if node_name else "Pending"}
        if node_name:
            manifest["spec"]["nodeName"] = node_name
        else:
            pending.append(manifest)
        pods.append(manifest)
    view = ClusterView(CAPACITY, config.slices_per_gpu, config.gpu_resource, pools)
    view.replace("nodes", manifests)
    view.replace("pods", pods)
    for _ in range(len(pods) // 100 + 1):
        view.typical()
    return view, [node.name for node in nodes], pending


def bind_pool(view: ClusterView, pod: Manifest, scores: list[tuple[str, int]]) -> str | None:
    """Place `pod` on the best-scored node of its pool with what it asks free, and tell the
    view as the watch would: the Pod bound."""
    assert view.pools is not None
    pool, units = view.pools.pod(pod)
    shape = view.shape(pod)
    for name, _ in sorted(scores, key=lambda scored: -scored[1]):
        free = view.free(name)
        if free is None or shape is None or free.cpu_milli < shape.cpu_milli:
            continue
        if free.memory < shape.memory or (shape.models and free.model not in shape.models):
            continue
        if units and (
            free.pool != pool
            or sum(1 for left in free.gpu_milli if left >= shape.gpu_milli) < shape.gpus
        ):
            continue  # fmt: skip
        view.apply("pods", "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": name},
                                        "status": {"phase": "Running"}})  # fmt: skip
        return name
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packing.extender_cost",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--every", type=int, default=1, help="one trace node in N (1: all)")
    parser.add_argument("--calls", type=int, default=100, help="prioritize calls to time")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--shares", type=int, default=100, help="shares per GPU (S)")
    parser.add_argument(
        "--pools",
        metavar="CONFIGURATION",
        help="a pool backend's replay configuration instead of dra (nvidia-plan, gke-4...)",
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.pools:
        view, names, pods = build_pools(args.pools, args.every, args.seed)
        pending: list[tuple[Manifest, TraceTask | None]] = [(pod, None) for pod in pods]
    else:
        view, names, tasks = build(args.every, args.seed, args.shares)
        pending = list(tasks)
    built = time.perf_counter() - began
    typical = view.typical()
    print(f"{len(names)} nodes, {len(pending)} Pending Pods, {len(typical)} typical shapes; "
          f"built in {built:.1f} s", flush=True)  # fmt: skip
    # The Pending Pods in order, each bound where it scores best before the next is scored:
    # every call sees the cluster one placement on.
    # CPU time of this thread besides the wall clock: on a shared machine the wall clock
    # also counts the other processes' turns.
    walls, cpus, binds = [], [], []
    for pod, task in pending[: args.calls]:
        began, cpu = time.perf_counter(), time.thread_time()
        scores = view.scores(pod, names)
        walls.append(time.perf_counter() - began)
        cpus.append(time.thread_time() - cpu)
        began = time.perf_counter()
        if task is None:
            bind_pool(view, pod, scores)
        else:
            bind(view, pod, task, scores, args.shares)
        binds.append(time.perf_counter() - began)
    for what, times in (("wall clock", walls), ("CPU", cpus)):
        print(f"{len(times)} calls, {what}: median {statistics.median(times) * 1000:.2f} ms, "
              f"mean {statistics.fmean(times) * 1000:.2f} ms, first {times[0] * 1000:.2f} ms, "
              f"max {max(times) * 1000:.2f} ms")  # fmt: skip
    print(f"binding (the watch events and the harness's own fit check): "
          f"{statistics.fmean(binds) * 1000:.2f} ms a Pod")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
