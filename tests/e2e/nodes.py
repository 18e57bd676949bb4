"""Fake GPU nodes, labelled and sized exactly as each backend's real nodes report themselves.

KWOK (started by cluster.py) plays their kubelet: it marks them Ready, renews
their leases and runs the Pods bound to them. What a node advertises and its
labels come from the device plugin (and GPU Feature Discovery, or GKE) on a
real node; here they are written once, at creation, as those components would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import kubernetes.client

from castslice.contract import Manifest

from ..procs import HarnessError, wait_until
from .cluster import KWOK_NODE_LABEL

BACKENDS = ("resource", "nvidia", "gke")
GPU = "nvidia.com/gpu"
# What CastSlice writes on the `resource` backend unless CASTSLICE_SHARED_RESOURCE says otherwise.
SEED_SHARED = "nvidia.com/gpu-shared"
# The NVIDIA device plugin's name for a shared GPU with `renameByDefault: true`: with it
# the node advertises `<resource>.shared` instead of `<resource>` (README, "With CUDA
# Time-Slicing": "80 nvidia.com/gpu.shared resources would be advertised ... instead of
# 8 nvidia.com/gpu"), https://github.com/NVIDIA/k8s-device-plugin#with-cuda-time-slicing
NVIDIA_SHARED = "nvidia.com/gpu.shared"
# The GKE labels CastSlice selects sharing pools by: "GKE then adds node labels that
# specify the maximum number of containers allowed to share each GPU on the node, and the
# sharing strategy to use", https://cloud.google.com/kubernetes-engine/docs/concepts/timesharing-gpus
GKE_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_POOL = "cloud.google.com/gke-nodepool"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
# GPU Feature Discovery's labels, on the full-GPU resource `nvidia.com/gpu` whether or not
# the shared one is renamed: `<resource>.replicas`, `.sharing-strategy`, `.product`,
# `.count`... (NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery/README.md "Generated
# labels", and internal/lm/resource.go, which writes them).
NVIDIA_REPLICAS = "nvidia.com/gpu.replicas"
NVIDIA_STRATEGY = "nvidia.com/gpu.sharing-strategy"

# A T4 as GFD and GKE name it: product and memory (MiB) as in GFD's README example,
# family and compute capability 7.5 as GFD derives them (internal/lm/resource.go).
_NVIDIA_GPU_LABELS = {
    "nvidia.com/gpu.product": "Tesla-T4",
    "nvidia.com/gpu.memory": "15360",
    "nvidia.com/gpu.family": "turing",
    "nvidia.com/gpu.compute.major": "7",
    "nvidia.com/gpu.compute.minor": "5",
    "nvidia.com/mig.capable": "false",
}
_GKE_ACCELERATOR = "nvidia-tesla-t4"
# Room for every Pod a test makes: only the GPU ever runs out.
_NODE_RESOURCES = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi", "pods": "110"}
_READY_TIMEOUT = 30.0
_GONE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Pool:
    """Nodes configured alike: `sharing` clients per GPU, or None for whole GPUs only.

    `sharing` is NVIDIA's `replicas` or GKE's `max-shared-clients-per-gpu`; on the
    `resource` backend it is how many slices of a GPU the device plugin advertises.
    `strategy` is spelled as the NVIDIA device plugin does (`time-slicing` or `mps`).
    """

    name: str
    sharing: int | None
    strategy: str = "time-slicing"
    nodes: int = 1
    gpus_per_node: int = 1
    # NVIDIA only: `renameByDefault: false` keeps the replicas under `nvidia.com/gpu`.
    renamed: bool = True


def standard_pools(backend: str) -> tuple[Pool, ...]:
    """A sharing pool of degree 4, one of degree 2 (not on `resource`: its slices are
    always quarters) and a plain GPU node, one GPU each."""
    if backend == "resource":
        return (Pool("shared-4", 4), Pool("plain", None))
    return (Pool("shared-4", 4), Pool("shared-2", 2), Pool("plain", None))


def node_manifest(backend: str, pool: Pool, name: str) -> Manifest:
    """The Node object a real node of `pool` would register, with its device plugin's
    capacity and the labels its GPU software puts on it."""
    labels, capacity = _gpu_side(backend, pool)
    return shaped_node(name, labels, capacity)


def shaped_node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> Manifest:
    """A KWOK node with `labels` and the extended resources `capacity`, as a real node's
    GPU software (device plugin, GPU Feature Discovery, GKE) would leave it."""
    key, value = KWOK_NODE_LABEL
    resources = {**_NODE_RESOURCES, **capacity}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # As KWOK's own example node, with its label `type: kwok`, which KWOK is told
            # to manage: https://kwok.sigs.k8s.io/docs/user/kwok-manage-nodes-and-pods/
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                key: value,
                **labels,
            },
        },
        # Taint-free, so any Pod that fits may land: GKE would taint GPU nodes
        # `nvidia.com/gpu=present:NoSchedule` and add the toleration to GPU Pods with its
        # ExtendedResourceToleration admission plugin, which changes nothing about placement.
        "spec": {},
        # KWOK's node-initialize stage keeps the capacity it finds and adds the conditions.
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def _gpu_side(backend: str, pool: Pool) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, extended resources) of one node of `pool` on `backend`."""
    gpus = pool.gpus_per_node
    if pool.strategy not in ("time-slicing", "mps"):
        raise HarnessError(f"unknown sharing strategy {pool.strategy!r}")
    if backend == "resource":
        # The device plugin CastSlice's seed expects: `sharing` slices per GPU under
        # one resource, no labels of its own.
        if pool.sharing is None:
            return {}, {GPU: str(gpus)}
        return {}, {SEED_SHARED: str(gpus * pool.sharing)}
    if backend == "dra":
        # Its GPUs are devices in a ResourceSlice (dra.py), not an extended resource.
        return {}, {}
    if backend == "nvidia":
        return _nvidia_side(pool, gpus)
    if backend == "gke":
        return _gke_side(pool, gpus)
    raise HarnessError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")


def _nvidia_side(pool: Pool, gpus: int) -> tuple[dict[str, str], dict[str, str]]:
    # GFD labels `count` with the physical GPUs, `replicas` with the per-GPU replicas of
    # the sharing config (1 without sharing) and `sharing-strategy` with `time-slicing`,
    # `mps` or `none` (internal/lm/resource.go, baseLabeler). With `renameByDefault:
    # true` the product keeps its plain name: `-SHARED` is appended only when the
    # resource is not renamed (README, "the SHARED annotation", and getProductName).
    labels = {**_NVIDIA_GPU_LABELS, "nvidia.com/gpu.count": str(gpus)}
    if pool.sharing is None:
        labels.update({NVIDIA_REPLICAS: "1", NVIDIA_STRATEGY: "none"})
        labels["nvidia.com/mps.capable"] = "false"
        return labels, {GPU: str(gpus)}
    labels.update({NVIDIA_REPLICAS: str(pool.sharing), NVIDIA_STRATEGY: pool.strategy})
    # README, "Catalog of Labels": whether the node's devices are configured for MPS.
    labels["nvidia.com/mps.capable"] = str(pool.strategy == "mps").lower()
    if not pool.renamed:
        labels["nvidia.com/gpu.product"] += "-SHARED"
        return labels, {GPU: str(gpus * pool.sharing)}
    return labels, {NVIDIA_SHARED: str(gpus * pool.sharing)}


def _gke_side(pool: Pool, gpus: int) -> tuple[dict[str, str], dict[str, str]]:
    # Every GKE node names its node pool; GPU nodes their accelerator, the label GKE's own
    # device-plugin DaemonSet selects (container-engine-accelerators,
    # cmd/nvidia_gpu/device-plugin.yaml).
    labels = {GKE_POOL: pool.name, GKE_ACCELERATOR: _GKE_ACCELERATOR}
    if pool.sharing is None:
        return labels, {GPU: str(gpus)}
    # GKE spells time-slicing `time-sharing`. Its device plugin keeps `nvidia.com/gpu` and
    # lists max-shared-clients virtual devices per physical GPU (`nvidia0/vgpu0`...), so
    # the node advertises GPUs x clients (container-engine-accelerators,
    # pkg/gpu/nvidia/manager.go, ListDevices).
    strategy = "time-sharing" if pool.strategy == "time-slicing" else "mps"
    labels.update({GKE_STRATEGY: strategy, GKE_CLIENTS: str(pool.sharing)})
    return labels, {GPU: str(gpus * pool.sharing)}


@dataclass(frozen=True)
class FakeNode:
    name: str
    pool: Pool


def create_nodes(
    api: kubernetes.client.ApiClient, backend: str, pools: Sequence[Pool]
) -> list[FakeNode]:
    """Create every node of `pools` and return once the scheduler may use them all."""
    run = uuid.uuid4().hex[:6]
    nodes = [
        FakeNode(f"{backend}-{pool.name}-{run}-{index}", pool)
        for pool in pools
        for index in range(pool.nodes)
    ]
    manifests = [node_manifest(backend, node.pool, node.name) for node in nodes]
    create_shaped_nodes(api, manifests)
    return nodes


def create_shaped_nodes(api: kubernetes.client.ApiClient, manifests: Sequence[Manifest]) -> None:
    """Create these nodes and return once the scheduler may use them all."""
    core = kubernetes.client.CoreV1Api(api)
    created: list[str] = []
    try:
        for manifest in manifests:
            core.create_node(manifest)
            created.append(manifest["metadata"]["name"])
        wait_until(
            lambda: all(_schedulable(core, name) for name in created),
            timeout=_READY_TIMEOUT,
            what="KWOK to make the fake nodes Ready and untainted",
            interval=0.2,
        )
    except BaseException:
        delete_nodes(api, created)
        raise


def _schedulable(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    ready = any(
        condition.type == "Ready" and condition.status == "True"
        for condition in node.status.conditions or []
    )
    # New nodes carry `node.kubernetes.io/not-ready` until the node lifecycle
    # controller sees them Ready; the scheduler would skip them until then.
    return ready and not node.spec.taints


def delete_nodes(api: kubernetes.client.ApiClient, names: Sequence[str]) -> None:
    core = kubernetes.client.CoreV1Api(api)
    for name in names:
        try:
            core.delete_node(name)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise


def clear_unscheduled_pods(api: kubernetes.client.ApiClient, keep_namespace: str) -> None:
    """Delete the Pods still waiting for a node outside `keep_namespace`.

    The scheduler retries Pending Pods as soon as a node appears, so a GPU Pod
    another test left behind would take the new nodes' GPUs first.
    """
    core = kubernetes.client.CoreV1Api(api)

    def waiting() -> list[tuple[str, str]]:
        pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items
        return [
            (pod.metadata.namespace, pod.metadata.name)
            for pod in pods
            if pod.metadata.namespace != keep_namespace
        ]

    def cleared() -> bool:
        left = waiting()
        for namespace, name in left:
            try:
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
        return not left

    # A controller recreates what it owns until its namespace is deleted: waiting
    # lets the teardown of earlier tests finish.
    wait_until(
        cleared, timeout=_GONE_TIMEOUT, what="Pending Pods of other tests to go", interval=0.2
    )


@contextmanager
def gpu_nodes(
    api: kubernetes.client.ApiClient, backend: str, pools: Sequence[Pool], namespace: str
) -> Iterator[list[FakeNode]]:
    """Fake GPU nodes for one test whose Pods live in `namespace`, deleted afterwards."""
    clear_unscheduled_pods(api, namespace)
    nodes = create_nodes(api, backend, pools)
    try:
        yield nodes
    finally:
        delete_nodes(api, [node.name for node in nodes])
