"""`python -m bench.packing.departures_live`: a sample of the departures replay on the real
scheduler, beside the same sample in process (`departures.replay`).

The first `--tasks` tasks of the trace by creation time, each arriving at its time and
leaving its lifetime after it is placed, on the first `--nodes` nodes of `departures.spread`
(the trace's mix of node shapes), `dra` at S = 100 with the extender's profile: the
end-to-end suite's cluster as `bench.packing.replay` runs it. Time is the trace's, played
one event at a time: a Pod is created and the replay waits until kube-scheduler has
decided it (bound, or Unschedulable); Pods leaving at one time are deleted together and
the replay waits until their claims are gone and the scheduler's queue is quiet, having
tried again the Pods that wait (its queueing hints move them back on the deletion), then
counts the ones bound since as placed at that time. Waits are in the trace's seconds, so
live and in process compare task by task.

    python -m bench.packing.departures_live --tasks 500 --nodes 8
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes.client
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import tools
from tests.procs import wait_until

from .departures import (
    Run,
    Stay,
    arrival_order,
    policy_for,
    read_stays,
    replay,
    spread,
    summary,
)
from .offline import head_commit
from .replay import (
    FGD_EXTENDER,
    NAMESPACE,
    ONE_AT_A_TIME_SCHEDULER_FLAGS,
    Cluster,
    Configuration,
    pod_manifest,
    read_body,
    read_pod,
    running,
    until_decided,
)
from .trace import read_nodes, task_list

RESULTS = Path(__file__).parent / "results" / "departures_live.jsonl"
CONFIGURATION = Configuration(
    "dra-100", {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SLICES_PER_GPU": "100"}
)
# The scheduler's queue read as quiet: this many seconds apart, no Pod queued or in back-off
# and no attempt made between two reads.
_QUIET = 0.2
_GONE_TIMEOUT = 120.0


def sample(stays: Sequence[Stay], count: int) -> list[Stay]:
    """The first `count` tasks by creation time (ties in the list's order)."""
    return [stays[index] for index in arrival_order(stays)[:count]]


def _queue(cluster: Cluster) -> tuple[float, float, float]:
    """Pods queued or backing off, attempts made so far, and those that scheduled a Pod."""
    queued = attempts = scheduled = 0.0
    for family in text_string_to_metric_families(cluster.plane.scheduler_metrics()):
        if family.name == "scheduler_pending_pods":
            queued += sum(
                sample.value
                for sample in family.samples
                if sample.labels.get("queue") in ("active", "backoff")
            )
        elif family.name == "scheduler_schedule_attempts":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    attempts += sample.value
                    if sample.labels.get("result") == "scheduled":
                        scheduled += sample.value
    return queued, attempts, scheduled


def _quiet(cluster: Cluster) -> float:
    """Wait until the scheduler's queue is quiet; the Pods it has scheduled so far."""
    last: list[float] = []
    scheduled = [0.0]

    def settled() -> bool:
        queued, attempts, scheduled[0] = _queue(cluster)
        done = not queued and last == [attempts]
        last[:] = [attempts]
        return done

    wait_until(settled, timeout=_GONE_TIMEOUT, what="the scheduler's queue", interval=_QUIET)
    return scheduled[0]


def _bound(
    core: kubernetes.client.CoreV1Api, waiting: Sequence[str], expected: float
) -> dict[str, dict[str, Any]]:
    """The Pods of `waiting` bound, once `expected` of them are: a Pod the scheduler has
    scheduled is bound only after its binding cycle (its claim's status, then the binding)."""
    bound: dict[str, dict[str, Any]] = {}

    def caught_up() -> bool:
        for name in waiting:
            if name not in bound:
                pod = read_pod(core, name)
                if pod["spec"].get("nodeName"):
                    bound[name] = pod
        return len(bound) >= expected

    wait_until(caught_up, timeout=_GONE_TIMEOUT, what="the Pods scheduled to be bound")
    return bound


def live(
    stays: Sequence[Stay],
    cluster: Cluster,
    gpus: int,
    log: Callable[[str], None] = print,
) -> tuple[Run, list[str]]:
    """The replay on `cluster`: each task's wait and the node it ran on ("": never)."""
    core = cluster.core
    resource = kubernetes.client.ResourceV1Api(cluster.plane.api_client())
    names = [f"task-{index:05d}" for index in range(len(stays))]
    manifests = [pod_manifest(CONFIGURATION, i, stay.task) for i, stay in enumerate(stays)]
    arrivals = arrival_order(stays)
    departures: list[tuple[int, int]] = []
    waits: list[int | None] = [None] * len(stays)
    where = [""] * len(stays)
    claims: dict[int, list[str]] = {}
    waiting: list[int] = []
    placed = Fraction(0)
    curve: list[tuple[int, float]] = []
    next_arrival = 0

    started: list[int] = []

    def start(index: int, pod: dict[str, Any], now: int) -> None:
        nonlocal placed
        started.append(index)
        where[index] = pod["spec"]["nodeName"]
        waits[index] = now - stays[index].arrival
        placed += stays[index].task.demand
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        claims[index] = [status["resourceClaimName"] for status in statuses]
        heapq.heappush(departures, (now + stays[index].lifetime, index))

    def gone(index: int) -> bool:
        for claim in claims[index]:
            try:
                resource.read_namespaced_resource_claim(claim, NAMESPACE, _preload_content=False)
            except kubernetes.client.ApiException as error:
                if error.status == 404:
                    continue
                raise
            return False
        return True

    while next_arrival < len(arrivals) or departures:
        now = min(
            stays[arrivals[next_arrival]].arrival if next_arrival < len(arrivals) else math.inf,
            departures[0][0] if departures else math.inf,
        )
        assert isinstance(now, int)
        leaving = []
        while departures and departures[0][0] == now:
            leaving.append(heapq.heappop(departures)[1])
        for index in leaving:
            core.delete_namespaced_pod(names[index], NAMESPACE, grace_period_seconds=0)
            placed -= stays[index].task.demand
        for index in leaving:
            wait_until(lambda i=index: gone(i), timeout=_GONE_TIMEOUT, what="a claim to go")
        if leaving and waiting:
            bound = _bound(
                core, [names[index] for index in waiting], _quiet(cluster) - len(started)
            )
            for index in waiting:
                if names[index] in bound:
                    start(index, bound[names[index]], now)
            waiting = [index for index in waiting if names[index] not in bound]
        while next_arrival < len(arrivals) and stays[arrivals[next_arrival]].arrival == now:
            index = arrivals[next_arrival]
            next_arrival += 1
            read_body(
                core.create_namespaced_pod(NAMESPACE, manifests[index], _preload_content=False)
            )
            until_decided(core, names[index])
            pod = read_pod(core, names[index])
            if pod["spec"].get("nodeName"):
                start(index, pod, now)
            else:
                waiting.append(index)
        curve.append((now, float(placed / gpus)))
        if len(curve) % 200 == 0:
            log(f"  {len(curve)} times, {len(waiting)} waiting, {float(placed / gpus):.1%} placed")
    return Run(waits, curve), where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.packing.departures_live",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--tasks", type=int, default=500, help="the first N tasks by creation")
    parser.add_argument("--nodes", type=int, default=8, help="the first N nodes, spread")
    parser.add_argument("--record", type=Path, help="a JSON Lines file the figures go to")
    args = parser.parse_args(argv)
    stays = sample(read_stays(task_list("default")), args.tasks)
    nodes = spread(read_nodes())[: args.nodes]
    gpus = sum(node.gpus for node in nodes)
    tasks = [stay.task for stay in stays]
    began = time.perf_counter()
    in_process = replay(stays, policy_for("extender", nodes, stays, 42), gpus)
    flags = ONE_AT_A_TIME_SCHEDULER_FLAGS
    with running(
        CONFIGURATION, FGD_EXTENDER, nodes, tasks, tools.kube_binaries(), tools.nginx(), flags
    ) as cluster:
        run, where = live(stays, cluster, gpus)
    seconds = time.perf_counter() - began
    same_wait = sum(a == b for a, b in zip(run.waits, in_process.waits, strict=True))
    line = {
        "tasks": len(stays), "nodes": len(nodes), "gpus": gpus, "seconds": round(seconds, 1),
        "live": {k: v for k, v in summary(run, stays).items() if k != "curve"},
        "in_process": {k: v for k, v in summary(in_process, stays).items() if k != "curve"},
        "same_wait": same_wait, "where": where, "waits": run.waits,
        "commit": head_commit() if args.record else "",
    }  # fmt: skip
    print(json.dumps({k: v for k, v in line.items() if k not in ("where", "waits")}), flush=True)
    if args.record:
        with args.record.open("a") as file:
            file.write(json.dumps(line) + "\n")
    return 0 if same_wait == len(stays) else 1


if __name__ == "__main__":
    sys.exit(main())
