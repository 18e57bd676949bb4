"""End to end: what CastSlice adds to Pod creation through a real kube-apiserver.

`python -m bench.e2e_latency` starts the end-to-end suite's control plane
(etcd, kube-apiserver, kube-controller-manager) and CastSlice behind nginx TLS,
then creates the same Pods over and over, in rounds that alternate between the
webhook registered and not registered, timing each create from the client.
The difference between the two is what an admission call to CastSlice costs a
user. Needs what the end-to-end suite needs (Go for the first build, nginx).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client

from tests.e2e import tools
from tests.e2e.castslice_server import CastSliceServer
from tests.e2e.cluster import LocalControlPlane
from tests.e2e.pods import create_namespace
from tests.e2e.registration import deregister_and_wait, register_and_wait

from . import bodies
from .report import Spread, load_average
from .servers import REPO

DEFAULT_OUTPUT = REPO / "bench" / "results" / "e2e-latest.md"
SHARED_MARKER = bodies.SHARED.encode()
# The shapes CastSlice rewrites; the others must come back unchanged.
PATCHED = ("typical", "large")
# Untimed creates after each (de)registration: the API server's first call to a
# webhook opens its TLS connection, which is not what a steady cluster pays.
WARMUP_PODS = 5


@dataclass
class Samples:
    """Create latencies in seconds, per Pod shape, with and without the webhook."""

    without: dict[str, list[float]] = field(default_factory=dict)
    with_webhook: dict[str, list[float]] = field(default_factory=dict)
    # Per round and shape: median with minus median without, for the spread.
    round_differences: dict[str, list[float]] = field(default_factory=dict)


def pod_manifests(namespace: str) -> dict[str, dict[str, Any]]:
    """The benchmark's Pods as a user would submit them: no owner, a fixed namespace.

    `large-no-gpu` is the large Pod with nothing to rewrite: CastSlice is called and
    answers without a patch, which separates the cost of the call from the cost of
    the API server applying a patch to a large object.
    """
    pods = {
        "typical": bodies.typical_pod(),
        "not-opted-in": bodies.typical_pod(opted_in=False),
        "large": bodies.large_pod(),
        "large-no-gpu": bodies.large_pod(),
    }
    for container in pods["large-no-gpu"]["spec"]["containers"]:
        for quantities in container["resources"].values():
            quantities.pop(bodies.GPU, None)
    for pod in pods.values():
        metadata = pod["metadata"]
        metadata.pop("ownerReferences", None)
        metadata.pop("generateName", None)
        metadata["namespace"] = namespace
        pod.pop("status", None)
    return pods


class PodCreator:
    """Creates Pods with pre-serialized bodies, so the client's own work stays constant."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self._url = f"{api.configuration.host}/api/v1/namespaces/{namespace}/pods"
        self._pool = api.rest_client.pool_manager

    def create(self, manifest: dict[str, Any], expect_patch: bool) -> float:
        pod = copy.deepcopy(manifest)
        pod["metadata"]["name"] = f"bench-{uuid.uuid4().hex[:12]}"
        payload = json.dumps(pod, separators=(",", ":")).encode()
        started = time.perf_counter()
        response = self._pool.request(
            "POST",
            self._url,
            body=payload,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        elapsed = time.perf_counter() - started
        if response.status != 201:
            raise RuntimeError(f"create answered {response.status}: {response.data[:300]!r}")
        if (SHARED_MARKER in response.data) != expect_patch:
            state = "rewritten" if not expect_patch else "not rewritten"
            raise RuntimeError(f"a Pod came back {state}: the registration is not as expected")
        return elapsed

    def delete_all(self) -> None:
        # Pods never scheduled to a node are deleted at once, without a grace period.
        core = kubernetes.client.CoreV1Api(self.api)
        core.delete_collection_namespaced_pod(self.namespace)


def measure(
    creator: PodCreator,
    api: kubernetes.client.ApiClient,
    server: CastSliceServer,
    pods: dict[str, dict[str, Any]],
    rounds: int,
    count: int,
) -> Samples:
    samples = Samples()
    for round_index in range(rounds):
        # Alternating which side goes first keeps drift from favouring either.
        order = [False, True] if round_index % 2 == 0 else [True, False]
        medians: dict[tuple[str, bool], float] = {}
        for registered in order:
            if registered:
                register_and_wait(api, server)
            else:
                deregister_and_wait(api)
            for name, manifest in pods.items():
                expect_patch = registered and name in PATCHED
                for _ in range(WARMUP_PODS):
                    creator.create(manifest, expect_patch)
                timings = [creator.create(manifest, expect_patch) for _ in range(count)]
                target = samples.with_webhook if registered else samples.without
                target.setdefault(name, []).extend(timings)
                medians[name, registered] = statistics.median(timings)
                creator.delete_all()
                _progress(
                    f"round {round_index + 1}/{rounds} {name:>12} "
                    f"{'with' if registered else 'without':>7} webhook: "
                    f"median {medians[name, registered] * 1000:.2f} ms"
                )
        for name in pods:
            difference = medians[name, True] - medians[name, False]
            samples.round_differences.setdefault(name, []).append(difference)
    return samples


def render(samples: Samples, rounds: int, count: int, command: str, load: tuple[str, str]) -> str:
    rows = []
    for name in samples.without:
        without, with_webhook = samples.without[name], samples.with_webhook[name]
        spread = Spread.of([value * 1000 for value in samples.round_differences[name]])
        median_without, median_with = statistics.median(without), statistics.median(with_webhook)
        rows.append(
            f"| {name} | {_ms(median_without)} | {_ms(median_with)} "
            f"| **{_ms(median_with - median_without)}** "
            f"({spread.low:+.2f} to {spread.high:+.2f}) "
            f"| {_ms(percentile(without, 99))} | {_ms(percentile(with_webhook, 99))} "
            f"| **{_ms(percentile(with_webhook, 99) - percentile(without, 99))}** |"
        )
    return "\n".join(
        [
            "# CastSlice end to end: Pod creation latency",
            "",
            f"`{command}`: {count} creates per Pod shape per round, {rounds} rounds "
            "alternating webhook registered / not registered; latency is the client's "
            "create call (sequential, keep-alive) against kube-apiserver on 127.0.0.1, "
            "CastSlice behind nginx TLS as the end-to-end suite serves it. "
            f"Load average at start {load[0]}, at end {load[1]}.",
            "",
            "| Pod | median without | median with | added median (per-round range) "
            "| p99 without | p99 with | added p99 |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "All figures in milliseconds. *not-opted-in* Pods never reach CastSlice: the "
            "registration's matchConditions leave them out, so their difference is the API "
            "server's own work to decide that the webhook does not apply. "
            "*large-no-gpu* is the large Pod without GPU requests: CastSlice is called but "
            "has nothing to patch.",
            "",
        ]
    )


def percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))
    return ordered[index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_latency", description=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument("--pods", type=int, default=50, help="timed creates per shape and round")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    arguments = parser.parse_args(argv)
    command = " ".join(["python -m bench.e2e_latency", *(sys.argv[1:] if argv is None else argv)])

    try:
        nginx, binaries = tools.nginx(), tools.kube_binaries()
    except tools.MissingTool as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    load_start = load_average()
    with LocalControlPlane(binaries) as plane, CastSliceServer(nginx) as server:
        api = plane.api_client()
        namespace = create_namespace(api, "castslice-bench")
        creator = PodCreator(api, namespace)
        samples = measure(
            creator, api, server, pod_manifests(namespace), arguments.rounds, arguments.pods
        )
    report = render(
        samples, arguments.rounds, arguments.pods, command, (load_start, load_average())
    )
    print(report)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(report)
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
