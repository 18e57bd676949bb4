"""The fragmentation-aware extender on the real kube-scheduler: the shipped profile
(infra/scheduler/fgd-extender.yaml) pointed at `castslice extender`, GPUs as DRA devices
with 100 shares each, Pods rewritten by CastSlice as served in production."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest

from bench.packing.__main__ import configurations
from bench.packing.replay import (
    NAMESPACE,
    apply_claim_templates,
    create_cluster_nodes,
    pod_manifest,
    settle,
)
from bench.packing.trace import TraceNode, TraceTask
from tests.procs import wait_until

from . import tools
from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .extender import ExtenderProcess, profile_for
from .pods import create_namespace
from .registration import register_and_wait

DRA_100 = next(item for item in configurations() if item.name == "dra-100")
WHOLE = TraceTask("whole", 4000, 4096, 1, 1000, ())
HALF = TraceTask("half", 4000, 4096, 1, 500, ())


@dataclass
class Cluster:
    api: kubernetes.client.ApiClient
    extender: ExtenderProcess | None
    created: int = 0

    def place(self, task: TraceTask, away_from: str | None = None) -> str | None:
        """Create the task's Pod once the extender (if any) has seen every earlier placement;
        the node it is bound to, or None if the scheduler found it unschedulable."""
        if self.extender is not None:
            wait_until(
                self._seen,
                timeout=60,
                what="the extender to see every placement so far",
                interval=0.2,
            )
        index = self.created
        manifest = pod_manifest(DRA_100, index, task)
        if away_from is not None:
            # A pull of the scheduler's own scores towards the other nodes, as its default
            # spreading is: the extender must outweigh it.
            away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [away_from]}
            manifest["spec"]["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "preference": {"matchExpressions": [away]}}
                    ]
                }
            }
        kubernetes.client.CoreV1Api(self.api).create_namespaced_pod(NAMESPACE, manifest)
        self.created += 1
        pods = settle(kubernetes.client.CoreV1Api(self.api), self.created)
        (pod,) = [item for item in pods if item["metadata"]["name"] == f"task-{index:05d}"]
        return pod["spec"].get("nodeName")

    def _seen(self) -> bool:
        """The GPU shares the extender's view holds are those the allocated claims hold."""
        assert self.extender is not None
        answer = kubernetes.client.ResourceV1Api(self.api).list_namespaced_resource_claim(
            NAMESPACE, _preload_content=False
        )
        claims = json.loads(answer.data)["items"]
        held = sum(
            int(result["consumedCapacity"]["shares"]) * 1000 // 100
            for claim in claims
            for result in ((claim.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        )
        view = self.extender.state()["nodes"]
        return held == sum(1000 - free for node in view.values() for free in node["gpuMilli"])


@contextlib.contextmanager
def cluster(nginx: Path, nodes: list[TraceNode], with_extender: bool) -> Iterator[Cluster]:
    binaries = tools.kube_binaries()
    with tempfile.TemporaryDirectory(prefix="castslice-extender-") as workdir:
        extender = ExtenderProcess(DRA_100.settings, Path(workdir)) if with_extender else None
        profile = profile_for(extender.url, Path(workdir)) if extender else None
        with (
            LocalControlPlane(binaries, scheduler_config=profile) as plane,
            CastSliceServer(nginx, DRA_100.settings) as server,
        ):
            api = plane.api_client()
            register_and_wait(api, server)
            create_namespace(api, NAMESPACE)
            create_cluster_nodes(api, DRA_100, nodes, [100] * len(nodes))
            apply_claim_templates(api, DRA_100, [WHOLE, HALF])
            try:
                if extender is not None:
                    extender.start(plane.kubeconfig)
                yield Cluster(api, extender)
            finally:
                if extender is not None:
                    extender.stop()


def _nodes(count: int, gpus: int) -> list[TraceNode]:
    return [TraceNode(f"gpu-{index}", 16000, 65536, gpus, "T4") for index in range(count)]


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
    assert first_whole is not None and first_half is not None and second_half is not None
    if with_extender:
        assert second_half == first_half
        assert last_whole is not None
    else:
        assert second_half != first_half
        assert last_whole is None


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
