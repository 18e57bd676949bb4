"""The extender on the pool backends (nvidia, gke): each node's pool and free clients read
from the Nodes and Pods the API server stores, Pods written by the webhook itself scored on
their own pool's granularity, and the fast path still equal to the reference port."""

from __future__ import annotations

import random
from collections import Counter

import kubernetes.client
import pytest

from bench.packing import extender_cost
from castslice.backends.tools import tools_for
from castslice.contract.definitions import OPTIMIZE, SLICE_RATIO
from castslice.environment import load_config
from castslice.extender.cluster_view import ClusterView
from castslice.extender.fragmentation import MILLI, extender_score
from castslice.extender.free_view import spread_clients
from castslice.extender.server import Informers
from castslice.extender.watching import WHOLE, Pools
from castslice.settings.config import Config
from tests.e2e.nodes import Pool, node_manifest
from tests.helpers import run_cli
from tests.policy_comparison import webhook_result

POOL_BACKENDS = ("nvidia", "gke")


def _config(backend: str) -> Config:
    return load_config({"CASTSLICE_BACKEND": backend, "CASTSLICE_SHARING_DEGREES": "2,4"})


def _pod(config: Config, name: str, slices: int, node: str = "", cpu: str = "1") -> dict:
    """A Pod asking one GPU with `slices` of 4, as the webhook rewrites it; bound to `node`."""
    gpu = {config.gpu_resource: "1"}
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml",
                     "annotations": {OPTIMIZE: "true", SLICE_RATIO: str(slices)}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1", "resources": {
            "requests": {"cpu": cpu, "memory": "1Gi", **gpu}, "limits": gpu}}]},
    }  # fmt: skip
    stored, _, _ = webhook_result(config, manifest, "ml")
    stored["metadata"]["uid"] = name
    stored["status"] = {"phase": "Running" if node else "Pending"}
    if node:
        stored["spec"]["nodeName"] = node
    return stored


NODES = {
    # name: (clients per GPU or None for whole GPUs, GPUs)
    "quarters-a": (4, 2),
    "quarters-b": (4, 2),
    "halves": (2, 2),
    "whole": (None, 2),
}


def _view(backend: str, pods: list[dict]) -> ClusterView:
    config = _config(backend)
    view = ClusterView("shares", config.slices_per_gpu, config.gpu_resource,
                       Pools(tools_for(config)))  # fmt: skip
    view.replace("nodes", [
        node_manifest(backend, Pool(name, sharing, gpus_per_node=gpus), name)
        for name, (sharing, gpus) in NODES.items()
    ])  # fmt: skip
    view.replace("pods", pods)
    return view


def test_the_device_plugin_s_distributed_policy_is_what_the_view_assumes() -> None:
    # Each client to the GPU with the fewest (NVIDIA/k8s-device-plugin, internal/rm/
    # allocate.go, AllocationPolicyDistributed), one at a time as Pods arrive.
    for gpus, clients in ((1, 4), (2, 4), (3, 2), (8, 3)):
        taken = [0] * gpus
        for held in range(gpus * clients + 1):
            frees = sorted(((clients - used) * MILLI // clients for used in taken), reverse=True)
            assert spread_clients(gpus, clients, held) == tuple(frees)
            if held < gpus * clients:
                taken[taken.index(min(taken))] += 1
    # A view that counts more clients than the node offers (a stale node) frees nothing.
    assert spread_clients(2, 4, 11) == (0, 0)
    assert spread_clients(0, 4, 1) == ()


@pytest.mark.parametrize("backend", POOL_BACKENDS)
def test_each_node_s_pool_and_free_clients_come_from_its_labels_and_its_pods(
    backend: str,
) -> None:
    config = _config(backend)
    pods = [
        # Three quarter-GPU clients: spread over both GPUs, 2 and 1.
        *(_pod(config, f"q{index}", 1, "quarters-a") for index in range(3)),
        _pod(config, "h", 2, "halves"),
        _pod(config, "w", 4, "whole"),
        # Finished: holds nothing.
        {**_pod(config, "done", 1, "quarters-b"), "status": {"phase": "Succeeded"}},
        _pod(config, "pending", 1),
    ]
    view = _view(backend, pods)
    frees = {name: view.free(name) for name in NODES}
    assert {name: (free.pool, free.gpu_milli) for name, free in frees.items()} == {
        "quarters-a": ("4", (750, 500)),
        "quarters-b": ("4", (1000, 1000)),
        "halves": ("2", (1000, 500)),
        "whole": (WHOLE, (1000, 0)),
    }
    assert frees == {name: view.recounted(name) for name in NODES}
    # Every Pod seen is learnt, each with the pool its node selector asks for.
    shapes = Counter((shape.pool, shape.gpu_milli) for shape, _ in view.typical())
    assert shapes == Counter({("4", 250): 1, ("2", 500): 1, (WHOLE, MILLI): 1})


@pytest.mark.parametrize("backend", POOL_BACKENDS)
def test_a_client_goes_where_it_strands_no_other_client(backend: str) -> None:
    config = _config(backend)
    # quarters-b has GPU clients free but little CPU: one more 2-CPU client there leaves
    # 1 CPU, and its remaining clients can serve no typical Pod (all ask 2 CPUs).
    pods = [
        _pod(config, "small", 1, "quarters-a", cpu="2"),
        _pod(config, "hungry", 1, "quarters-b", cpu="5"),
        *(_pod(config, f"new{index}", 1, cpu="2") for index in range(6)),
    ]
    view = _view(backend, pods)
    scores = dict(view.scores(pods[-1], ["quarters-a", "quarters-b"]))
    assert scores["quarters-a"] > scores["quarters-b"]
    # Left to the packing key alone (the same GPUs free), quarters-b would have won: it
    # is the fuller node by CPU, not by GPU, so the FGD part decides.
    assert scores["quarters-a"] // 1000 > scores["quarters-b"] // 1000


@pytest.mark.parametrize("backend", POOL_BACKENDS)
def test_pool_scores_are_the_reference_port_s_after_any_binding(backend: str) -> None:
    config = _config(backend)
    draw = random.Random(7)
    pods = [_pod(config, f"p{index}", draw.choice((1, 1, 2, 4, 8)), cpu=str(draw.randint(1, 3)))
            for index in range(40)]  # fmt: skip
    view = _view(backend, pods)
    names = list(NODES)
    for pod in pods:
        typical = view.typical()
        shape = view.shape(pod)
        assert shape is not None
        scores = view.scores(pod, names)
        assert [score for _, score in scores] == [
            extender_score(free, shape, typical, view.gpus_per_model(), rare=view.rare())
            if free
            else 0
            for free in (view.recounted(name) for name in names)
        ]
        # Bound to its pool's first node with a client free, as the scheduler would.
        for name in names:
            free = view.free(name)
            fitting = sum(1 for left in free.gpu_milli if left >= shape.gpu_milli) if free else 0
            if free and free.pool == shape.pool and fitting >= shape.gpus:
                view.apply("pods", "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": name},
                                                "status": {"phase": "Running"}})  # fmt: skip
                break
        assert [view.free(name) for name in names] == [view.recounted(name) for name in names]


@pytest.mark.parametrize("backend", ["resource", "mig"])
def test_the_command_refuses_a_backend_whose_gpus_it_cannot_see(
    backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    status, _, err = run_cli(["extender"], monkeypatch, capsys, {"CASTSLICE_BACKEND": backend})
    assert status == 2
    assert (
        "the extender scores GPUs shared as DRA devices or by sharing node pools "
        f"(CASTSLICE_BACKEND=dra|gke|nvidia); the {backend} backend's GPUs are not tracked"
    ) in err
    assert "Traceback" not in err


def test_on_a_pool_backend_it_watches_only_nodes_and_pods() -> None:
    # A cluster sharing by node pools may serve no resource.k8s.io: a watch of slices or
    # claims there would never sync, and the extender would never be ready.
    pools = Informers(kubernetes.client.ApiClient(), _view("nvidia", []))
    assert set(pools.kinds) == {"nodes", "pods"}
    devices = Informers(kubernetes.client.ApiClient(), ClusterView("shares", 100))
    assert set(devices.kinds) == {"nodes", "pods", "resourceslices", "resourceclaims"}


@pytest.mark.parametrize("configuration", ["nvidia-plan", "gke-4"])
def test_a_pool_trace_sample_is_scored_as_the_reference_while_it_fills(configuration: str) -> None:
    view, names, pending = extender_cost.build_pools(configuration, every=20)
    pools = Counter(view.free(name).pool for name in names)
    # Every node is in one of the configuration's pools; some share, some hold whole GPUs.
    assert "" not in pools and WHOLE in pools and len(pools) >= 2
    placed = 0
    for pod in pending[:40]:
        typical, shape = view.typical(), view.shape(pod)
        assert shape is not None
        scores = view.scores(pod, names)
        assert [score for _, score in scores] == [
            extender_score(free, shape, typical, view.gpus_per_model(), rare=view.rare())
            if free
            else 0
            for free in (view.recounted(name) for name in names)
        ]
        placed += extender_cost.bind_pool(view, pod, scores) is not None
    assert placed >= 20
    assert [view.free(name) for name in names] == [view.recounted(name) for name in names]
