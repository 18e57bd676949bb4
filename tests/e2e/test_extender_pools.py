"""The fragmentation-aware extender on a pool backend (`nvidia`, degree 4): the shipped
profile pointed at `castslice extender`, nodes labelled and sized as GPU Feature Discovery
and the device plugin leave them, Pods as the replay creates them through CastSlice."""

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
from bench.packing.replay import NAMESPACE, create_cluster_nodes, pod_manifest, settle
from bench.packing.trace import TraceNode, TraceTask
from castslice.contract.scheduling import pod_request
from tests.procs import wait_until

from . import tools
from .castslice_server import CastSliceServer
from .cluster import LocalControlPlane
from .extender import ExtenderProcess, profile_for
from .pods import create_namespace
from .registration import register_and_wait

NVIDIA_4 = next(item for item in configurations() if item.name == "nvidia-4")
ONE = TraceTask("one", 2000, 2048, 1, 1000, ())
TWO = TraceTask("two", 2000, 2048, 2, 1000, ())
# Thousandths of a GPU each unit of a resource is on this configuration's nodes.
_MILLI = {"nvidia.com/gpu": 1000, "nvidia.com/gpu.shared": 1000 // 4}


@dataclass
class Cluster:
    api: kubernetes.client.ApiClient
    extender: ExtenderProcess | None
    created: int = 0

    def place(self, task: TraceTask, away_from: str | None = None) -> str | None:
        """Create the task's Pod once the extender (if any) has seen every earlier placement;
        the node it is bound to, or None if the scheduler found it unschedulable."""
        if self.extender is not None:
            wait_until(self._seen, timeout=60, what="the extender to see every placement",
                       interval=0.2)  # fmt: skip
        index = self.created
        manifest = pod_manifest(NVIDIA_4, index, task)
        if away_from is not None:
            # The pull of the scheduler's own spreading made certain: the extender must
            # outweigh it.
            away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [away_from]}
            manifest["spec"]["affinity"] = {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [away]}}]}}  # fmt: skip
        kubernetes.client.CoreV1Api(self.api).create_namespaced_pod(NAMESPACE, manifest)
        self.created += 1
        pods = settle(kubernetes.client.CoreV1Api(self.api), self.created)
        (pod,) = [item for item in pods if item["metadata"]["name"] == f"task-{index:05d}"]
        return pod["spec"].get("nodeName")

    def _seen(self) -> bool:
        """The GPU the extender's view holds taken is what the bound Pods ask for."""
        assert self.extender is not None
        answer = kubernetes.client.CoreV1Api(self.api).list_namespaced_pod(
            NAMESPACE, _preload_content=False
        )
        pods = json.loads(answer.data)["items"]
        held = sum(
            pod_request(pod, resource) * milli
            for pod in pods
            if (pod.get("spec") or {}).get("nodeName")
            for resource, milli in _MILLI.items()
        )
        view = self.extender.state()["nodes"]
        return held == sum(1000 - free for node in view.values() for free in node["gpuMilli"])


@contextlib.contextmanager
def cluster(nginx: Path, with_extender: bool) -> Iterator[Cluster]:
    """Two whole-GPU nodes of two GPUs and a sharing node of degree 4."""
    nodes = [TraceNode(f"gpu-{index}", 16000, 65536, 2, "T4") for index in range(3)]
    binaries = tools.kube_binaries()
    with tempfile.TemporaryDirectory(prefix="castslice-extender-") as workdir:
        extender = ExtenderProcess(NVIDIA_4.settings, Path(workdir)) if with_extender else None
        profile = profile_for(extender.url, Path(workdir)) if extender else None
        with (
            LocalControlPlane(binaries, scheduler_config=profile) as plane,
            CastSliceServer(nginx, NVIDIA_4.settings) as server,
        ):
            api = plane.api_client()
            register_and_wait(api, server)
            create_namespace(api, NAMESPACE)
            create_cluster_nodes(api, NVIDIA_4, nodes, [None, None, 4])
            try:
                if extender is not None:
                    extender.start(plane.kubeconfig)
                yield Cluster(api, extender)
            finally:
                if extender is not None:
                    extender.stop()


@pytest.mark.parametrize("with_extender", [False, True], ids=["default-profile", "extender"])
def test_the_extender_keeps_two_gpus_together_for_a_two_gpu_pod(
    nginx: Path, with_extender: bool
) -> None:
    """Two one-GPU Pods, the second pulled (weight 100) away from the first's node, then a
    two-GPU Pod. Default scoring spreads them, and the last finds no node with two GPUs
    free; the extender puts the second beside the first (its packing key: FGD is level),
    and the last runs. The sharing node never takes a whole-GPU Pod: it offers only the
    shared resource."""
    with cluster(nginx, with_extender) as made:
        first = made.place(ONE)
        second = made.place(ONE, away_from=first)
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
