"""A small cluster the extender tests place trace tasks on one at a time: the real
kube-scheduler (under the shipped extender profile when an extender runs), KWOK nodes made
as the packing replay makes them, and Pods rewritten by CastSlice as served in production."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client

from bench.packing.replay import (
    NAMESPACE,
    Configuration,
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

# Thousandths of a GPU the cluster's bound Pods (or allocated claims) hold.
HeldMilli = Callable[[kubernetes.client.ApiClient], int]


@dataclass
class PlacingCluster:
    api: kubernetes.client.ApiClient
    configuration: Configuration
    held_milli: HeldMilli
    extender: ExtenderProcess | None
    created: int = 0
    deleted: int = 0

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
        manifest = pod_manifest(self.configuration, index, task)
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
        pods = settle(kubernetes.client.CoreV1Api(self.api), self.created - self.deleted)
        (pod,) = [item for item in pods if item["metadata"]["name"] == f"task-{index:05d}"]
        return pod["spec"].get("nodeName")

    def delete_last(self) -> None:
        """Delete the last Pod placed; return once no claim holds a GPU and the extender
        (if any) has seen it go."""
        name = f"task-{self.created - 1:05d}"
        core = kubernetes.client.CoreV1Api(self.api)
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        self.deleted += 1
        wait_until(lambda: not self.held_milli(self.api), timeout=60, what=f"{name}'s GPUs freed")
        if self.extender is not None:
            wait_until(self._seen, timeout=60, what=f"the extender to see {name} go")

    def _seen(self) -> bool:
        """The GPU the extender's view holds taken is what the cluster holds."""
        assert self.extender is not None
        view = self.extender.state()["nodes"]
        taken = sum(1000 - free for node in view.values() for free in node["gpuMilli"])
        return self.held_milli(self.api) == taken


@contextlib.contextmanager
def placing_cluster(
    nginx: Path,
    configuration: Configuration,
    nodes: list[TraceNode],
    pools: Sequence[int | None],
    held_milli: HeldMilli,
    with_extender: bool,
    claim_tasks: Sequence[TraceTask] = (),
) -> Iterator[PlacingCluster]:
    binaries = tools.kube_binaries()
    with tempfile.TemporaryDirectory(prefix="castslice-extender-") as workdir:
        extender = ExtenderProcess(configuration.settings, Path(workdir)) if with_extender else None
        profile = profile_for(extender.url, Path(workdir)) if extender else None
        with (
            LocalControlPlane(binaries, scheduler_config=profile) as plane,
            CastSliceServer(nginx, configuration.settings) as server,
        ):
            api = plane.api_client()
            register_and_wait(api, server)
            create_namespace(api, NAMESPACE)
            create_cluster_nodes(api, configuration, nodes, list(pools))
            if claim_tasks:
                apply_claim_templates(api, configuration, list(claim_tasks))
            try:
                if extender is not None:
                    extender.start(plane.kubeconfig)
                yield PlacingCluster(api, configuration, held_milli, extender)
            finally:
                if extender is not None:
                    extender.stop()
