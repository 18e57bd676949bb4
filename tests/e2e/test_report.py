"""`castslice report` against the real scheduler's placements, on every backend.

A known mix goes in through `kubectl apply` as users write it: in one namespace a
Deployment of four dev notebooks and an inference Pod that finds no room; in another
two inference Pods, a StatefulSet's training Pod and a GPU Pod that did not opt in. The
report (`python -m castslice report -o json`, as a user runs it) must place each Pod
where the scheduler put it (its spec.nodeName; on dra the device of its claim's
allocation) and count the GPUs asked, occupied and saved as the test counts them from
those placements. The exporter (`castslice report --serve`) must serve the same figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from castslice.contract import Manifest

from ..procs import free_port, wait_until
from .castslice_server import StartServer
from .cluster import LocalControlPlane
from .dra import dra_nodes
from .exporter import run_exporter
from .kubectl import Kubectl
from .nodes import SEED_SHARED, FakeNode, Pool, gpu_nodes
from .pods import GPU, IMAGE, create_namespace, list_pods, running, unschedulable
from .registration import APPLIED, register_and_wait
from .tools import REPO_ROOT

SETTINGS = {
    "resource": {"CASTSLICE_BACKEND": "resource", "CASTSLICE_SHARED_RESOURCE": SEED_SHARED},
    "nvidia": {"CASTSLICE_BACKEND": "nvidia", "CASTSLICE_SHARING_DEGREES": "2,4"},
    "gke": {"CASTSLICE_BACKEND": "gke", "CASTSLICE_SHARING_DEGREES": "2,4"},
    "dra": {"CASTSLICE_BACKEND": "dra"},
}
# Room for exactly the Pods that run, one GPU per node where the GPU is not visible, so the
# late inference Pod waits: four dev quarters, two inference halves, one training GPU.
POOLS = {
    "resource": (Pool("shared-4", 4, nodes=3), Pool("plain", None)),
    # The training Pod and the Pod that did not opt in share a node of two whole GPUs.
    "nvidia": (Pool("shared-4", 4), Pool("shared-2", 2), Pool("plain", None, gpus_per_node=2)),
    "gke": (Pool("shared-4", 4), Pool("shared-2", 2), Pool("plain", None, gpus_per_node=2)),
}
DRA_GPUS = [3]
SHARES_PER_DEVICE = 4
LABEL = "castslice-e2e/report"
_TIMEOUT = 60.0


@pytest.fixture(
    scope="module",
    params=["resource", "nvidia", "gke", pytest.param("dra", marks=pytest.mark.kubernetes("1.36"))],
)
def backend(
    request: pytest.FixtureRequest, module_castslice: StartServer, api: kubernetes.client.ApiClient
) -> str:
    name: str = request.param
    register_and_wait(api, module_castslice(SETTINGS[name]))
    return name


def castslice(backend: str, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CASTSLICE_")}
    return subprocess.run(
        [sys.executable, "-m", "castslice", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**environ, **SETTINGS[backend], "PYTHONIOENCODING": "utf-8"},
        timeout=120,
        check=False,
        **options,
    )


@dataclass(frozen=True)
class Mix:
    run: str
    team_a: str
    team_b: str
    nodes: dict[str, FakeNode]


@pytest.fixture
def mix(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    backend: str,
    namespace: str,
) -> Iterator[Mix]:
    """Nodes for `backend` and the known mix on them, applied in an order that fills them."""
    # A label value, so never all digits and an exponent ("123e45"), which kubectl's YAML
    # reads as a number where PyYAML writes it unquoted.
    run = f"run-{uuid.uuid4().hex[:6]}"
    team_b = create_namespace(api, f"{namespace}-b")
    try:
        with _nodes(api, backend, namespace) as nodes:
            if backend == "dra":
                for ns in (namespace, team_b):
                    templates = castslice(backend, "claim-templates", "-n", ns, "--slices", "1,2,4")
                    kubectl_user.run("apply", "-f", "-", stdin=templates.stdout)
            steps = [
                (team_b, [workload("StatefulSet", "trainer", "training", 1, run)], 1),
                (team_b, [gpu_pod(f"vllm-{i}", "inference", run) for i in range(2)], 3),
                (namespace, [workload("Deployment", "notebook", "dev", 4, run)], 4),
                (team_b, [gpu_pod("plain", None, run)], 4),
                (namespace, [gpu_pod("vllm-late", "inference", run)], 5),
            ]
            for ns, manifests, count in steps:
                kubectl_user.apply(ns, yaml.safe_dump_all(manifests))
                _settle(api, ns, count)
            yield Mix(run, namespace, team_b, nodes)
    finally:
        kubernetes.client.CoreV1Api(api).delete_namespace(team_b)


@contextmanager
def _nodes(api: kubernetes.client.ApiClient, backend: str, namespace: str) -> Iterator[dict]:
    if backend == "dra":
        with dra_nodes(api, DRA_GPUS, namespace) as names:
            yield {name: FakeNode(name, Pool("dra", None, gpus_per_node=3)) for name in names}
    else:
        with gpu_nodes(api, backend, POOLS[backend], namespace) as created:
            yield {node.name: node for node in created}


# The scheduler's words for a Pod no node has room for; a Pod whose claim the controller
# has not created yet is also Unschedulable, for a moment, and is not decided.
_NO_ROOM = ("Insufficient", "cannot allocate all claims")
# How long every Pod must keep its node (or its refusal) to count as decided: a Pod refused
# while another's claim was still being allocated is tried again, and bound, within it.
_STEADY_S = 2.0


def _settle(api: kubernetes.client.ApiClient, namespace: str, count: int) -> None:
    def refused(pod: Manifest) -> bool:
        message = unschedulable(pod) or ""
        return any(phrase in message for phrase in _NO_ROOM)

    def placements() -> list[tuple[str, str]] | None:
        pods = list_pods(api, namespace, "")
        if len(pods) != count or not all(running(p) or refused(p) for p in pods):
            return None
        return sorted((p["metadata"]["name"], p["spec"].get("nodeName") or "") for p in pods)

    seen: list[Any] = [None, 0.0]

    def steady() -> bool:
        now = placements()
        if now is None or now != seen[0]:
            seen[:] = [now, time.monotonic()]
            return False
        return time.monotonic() - seen[1] >= _STEADY_S

    wait_until(steady, timeout=_TIMEOUT, what=f"{count} Pods in {namespace} placed", interval=0.2)


def _metadata(name: str, workload_type: str | None, run: str) -> Manifest:
    metadata: Manifest = {"name": name, "labels": {LABEL: run, "app": name}}
    if workload_type:
        metadata["annotations"] = {
            "castops.io/optimize": "true",
            "castops.io/workload-type": workload_type,
        }
    return metadata


def _spec() -> Manifest:
    return {"containers": [{"name": "app", "image": IMAGE, "resources": {"limits": {GPU: 1}}}]}


def gpu_pod(name: str, workload_type: str | None, run: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(name, workload_type, run),
        "spec": _spec(),
    }


def _template(name: str, workload_type: str, run: str) -> Manifest:
    metadata = _metadata(name, workload_type, run)
    del metadata["name"]
    return {"metadata": metadata, "spec": _spec()}


def workload(kind: str, name: str, workload_type: str, replicas: int, run: str) -> Manifest:
    """A Deployment or StatefulSet whose Pod template opts in, as users write them."""
    spec: Manifest = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": _template(name, workload_type, run),
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


# --- What the test counts from the placements, without CastSlice's code ---------------


@dataclass(frozen=True)
class Holding:
    gpu: tuple[str, str | None]  # (node, device or None where only the node is known)
    share: Fraction
    units: int


def holdings(
    api: kubernetes.client.ApiClient, backend: str, mix: Mix, pod: Manifest
) -> list[Holding]:
    """Where the scheduler put `pod`'s GPU: its claim's device on dra, else its node."""
    node_name = pod["spec"]["nodeName"]
    if backend == "dra":
        found = []
        for status in pod["status"].get("resourceClaimStatuses", []):
            response = kubernetes.client.ResourceV1Api(api).read_namespaced_resource_claim(
                status["resourceClaimName"], pod["metadata"]["namespace"], _preload_content=False
            )
            claim = json.loads(response.data)
            for result in claim["status"]["allocation"]["devices"]["results"]:
                shares = int(result["consumedCapacity"]["shares"])
                share = Fraction(shares, SHARES_PER_DEVICE)
                found.append(Holding((node_name, result["device"]), share, shares))
        return found
    pool = mix.nodes[node_name].pool
    [app] = pod["spec"]["containers"]
    [(_, quantity)] = app["resources"]["limits"].items()
    # Units of one GPU: the pool's clients per GPU (slices on `resource`), 1 where none share.
    per_gpu = pool.sharing or 1
    return [Holding((node_name, None), Fraction(int(quantity), per_gpu), int(quantity))]


def gpus_held(holds: list[Holding], nodes: Mapping[str, FakeNode]) -> int:
    """GPUs these holdings are on, each once: a device or a one-GPU node once; a node of
    several GPUs by the whole GPUs held there (the only kind the mix puts on one)."""
    by_gpu: dict[tuple[str, str | None], list[Holding]] = {}
    for hold in holds:
        by_gpu.setdefault(hold.gpu, []).append(hold)
    total = 0
    for (node, device), on_it in by_gpu.items():
        several = device is None and nodes[node].pool.gpus_per_node > 1
        total += sum(int(h.share) for h in on_it) if several else 1
    return total


def expected_saving(holds: list[Holding], asked: int, nodes: Mapping[str, FakeNode]) -> dict:
    occupied = gpus_held(holds, nodes)
    return {"asked": asked, "occupied": occupied, "saved": asked - occupied}


def report_json(backend: str, kubeconfig: Path, *args: str) -> Manifest:
    done = castslice(backend, "report", "--kubeconfig", str(kubeconfig), "-o", "json", *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_report_places_each_pod_where_the_scheduler_put_it_and_the_exporter_agrees(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    backend: str,
    mix: Mix,
) -> None:
    pods = list_pods(api, mix.team_a, "") + list_pods(api, mix.team_b, "")
    rewritten = [p for p in pods if APPLIED in p["metadata"].get("annotations", {})]
    placed = [p for p in rewritten if p["spec"].get("nodeName")]
    [late] = [p for p in rewritten if not p["spec"].get("nodeName")]
    [plain] = [p for p in pods if APPLIED not in p["metadata"].get("annotations", {})]
    held = {p["metadata"]["name"]: holdings(api, backend, mix, p) for p in placed}
    bound = [p for p in pods if p["spec"].get("nodeName")]
    on_gpu: dict[tuple[str, str | None], set[tuple[str, str, bool]]] = {}
    for pod in bound:
        for hold in held.get(pod["metadata"]["name"]) or holdings(api, backend, mix, pod):
            on_gpu.setdefault(hold.gpu, set()).add(
                (pod["metadata"]["namespace"], pod["metadata"]["name"], pod in placed)
            )

    report = report_json(backend, control_plane.kubeconfig, "--selector", f"{LABEL}={mix.run}")

    # Each GPU: its node (and device on dra), every Pod on it, and which of them opted in.
    visible = backend == "dra"
    assert {
        (gpu["node"], gpu["gpu"]): {
            (h["namespace"], h["pod"], h["optedIn"]) for h in gpu["holders"]
        }
        for gpu in report["gpus"]
    } == {gpu: holders for gpu, holders in on_gpu.items() if any(h[2] for h in holders)}
    assert {gpu["gpuVisible"] for gpu in report["gpus"]} == {visible}
    # Each rewritten Pod's share of its GPU, as the scheduler's placement gives it.
    shares = {
        (h["namespace"], h["pod"]): h["share"] for gpu in report["gpus"] for h in gpu["holders"]
    }
    for pod in placed:
        [hold] = held[pod["metadata"]["name"]]
        assert shares[(pod["metadata"]["namespace"], pod["metadata"]["name"])] == str(hold.share)
    # Free shares: what the GPU offers less what every Pod on it holds.
    for gpu in report["gpus"]:
        taken = sum(
            hold.units
            for pod in bound
            for hold in held.get(pod["metadata"]["name"]) or holdings(api, backend, mix, pod)
            if hold.gpu == (gpu["node"], gpu["gpu"])
        )
        assert gpu["free"] == gpu["units"] - taken
    # The Pod that did not opt in counts nowhere; where it shares a node, it is named there.
    assert plain["metadata"]["name"] not in {p["pod"] for p in report["pending"]}
    # The saving: every Pod asked for one GPU.
    all_holds = [hold for holds in held.values() for hold in holds]
    assert report["totals"] == {**expected_saving(all_holds, len(placed), mix.nodes), "pending": 1}
    for ns in (mix.team_a, mix.team_b):
        mine = [p for p in placed if p["metadata"]["namespace"] == ns]
        holds = [hold for p in mine for hold in held[p["metadata"]["name"]]]
        assert report["namespaces"][ns] == {
            **expected_saving(holds, len(mine), mix.nodes),
            "pending": int(ns == mix.team_a),
        }
    owners = {(o["namespace"], o["owner"]): o for o in report["owners"]}
    notebooks = [hold for p in placed if p["metadata"]["name"].startswith("notebook-")
                 for hold in held[p["metadata"]["name"]]]  # fmt: skip
    assert {k: v for k, v in owners[(mix.team_a, "Deployment/notebook")].items() if k in (
        "asked", "occupied", "saved")} == expected_saving(notebooks, 4, mix.nodes)  # fmt: skip
    assert owners[(mix.team_b, "StatefulSet/trainer")]["occupied"] == 1
    # The Pod that waits, with the scheduler's own words.
    assert report["pending"] == [
        {
            "namespace": mix.team_a,
            "pod": "vllm-late",
            "owner": None,
            "slices": 2,
            "asked": 1,
            "reason": unschedulable(late),
        }
    ]

    only_a = report_json(
        backend, control_plane.kubeconfig, "-n", mix.team_a, "-l", f"{LABEL}={mix.run}"
    )
    assert only_a["totals"] == report["namespaces"][mix.team_a]

    text = castslice(
        backend, "report", "--kubeconfig", str(control_plane.kubeconfig), "-l", f"{LABEL}={mix.run}"
    )
    assert text.returncode == 0, text.stderr
    assert max(len(line) for line in text.stdout.splitlines()) <= 100
    assert ("GPU not visible; node only" in text.stdout) is not visible
    print(text.stdout)

    # The exporter's gauges, scraped from the same cluster, are the report's figures.
    selector = f"{LABEL}={mix.run}"
    port = free_port()
    argv = [sys.executable, "-m", "castslice", "report", "--kubeconfig",
            str(control_plane.kubeconfig), "-l", selector, "--serve", str(port)]  # fmt: skip
    samples, _, stderr = run_exporter(argv, SETTINGS[backend], port)
    assert "Traceback" not in stderr

    assert samples[("castslice_report_up", None)] == 1
    for figure in ("asked", "occupied", "saved"):
        assert samples[(f"castslice_cluster_gpus_{figure}", None)] == report["totals"][figure]
        for ns, saving in report["namespaces"].items():
            assert samples[(f"castslice_gpus_{figure}", ns)] == saving[figure]
    assert samples[("castslice_cluster_pods_pending", None)] == report["totals"]["pending"]
    assert {ns for _, ns in samples if ns} == {mix.team_a, mix.team_b}
