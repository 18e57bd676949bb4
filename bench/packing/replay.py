"""One replay: the trace's nodes as fake nodes, its tasks as Pods through CastSlice, scored.

The cluster is the end-to-end suite's: the real kube-apiserver, controller-manager and
kube-scheduler, KWOK playing the kubelets, CastSlice served as in production (nginx TLS
in front of functions-framework) and registered as `castslice webhook` generates it.
Tasks are created in their order, a checkpoint's batch at once (`BATCHES`) or each only
once the scheduler has decided the one before (`ONE_AT_A_TIME`, as the FGD artefact's
simulator schedules); at each checkpoint of arrived GPU demand the replay waits until the
scheduler has decided every Pod (bound, or marked unschedulable) and counts what is placed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes.client
from prometheus_client.parser import text_string_to_metric_families

from castslice.backends.answers import Tools
from castslice.backends.tools import tools_for
from castslice.contract.definitions import OPTIMIZE, SLICE_RATIO
from castslice.environment import load_config
from castslice.inspect.plan import Task, estimate
from castslice.settings.config import Config
from tests.e2e import dra as dra_nodes
from tests.e2e import nodes as fake_nodes
from tests.e2e.castslice_server import CastSliceServer
from tests.e2e.cluster import KWOK_NODE_LABEL, LocalControlPlane
from tests.e2e.extender import PROFILE as EXTENDER_PROFILE
from tests.e2e.extender import ExtenderProcess, profile_for
from tests.e2e.pods import create_namespace
from tests.e2e.registration import register_and_wait
from tests.e2e.tools import KubeBinaries
from tests.procs import HarnessError, wait_until

from .trace import BATCHES, CREATIONS, MILLI, ONE_AT_A_TIME, TraceNode, TraceTask

REPO = Path(__file__).resolve().parents[2]
BIN_PACKING = REPO / "infra" / "scheduler" / "bin-packing.yaml"
# The shipped extender profile; its replay also runs `castslice extender` beside the cluster.
FGD_EXTENDER = "fgd-extender"
PROFILES: dict[str, Path | None] = {
    "default": None,
    "bin-packing": BIN_PACKING,
    FGD_EXTENDER: EXTENDER_PROFILE,
}
NAMESPACE = "trace"
# The node label a task's gpu_spec selects by: GPU Feature Discovery's product label.
MODEL_LABEL = "nvidia.com/gpu.product"
CHECKPOINTS = tuple(Fraction(n, 10) for n in (2, 4, 6, 8, 9, 10, 11, 12, 13))
# Pods created at once, a checkpoint's batch at a time.
_CREATORS = 12
# A Pod's claim not made yet, not seen by the scheduler yet, or still being allocated: the
# scheduler tries that Pod again once it is, so the Pod is not decided yet.
_NOT_YET = ("not created yet", "not found", "in the process of being allocated")
_DECIDE_TIMEOUT = 300.0
# One at a time, nothing is ever freed, so a Pod found unschedulable stays so: the
# scheduler's retries of them every five minutes (its default) would only put thousands
# of hopeless attempts ahead of each new Pod.
ONE_AT_A_TIME_SCHEDULER_FLAGS = ("--pod-max-in-unschedulable-pods-duration=24h",)
# The controller-manager makes each Pod's ResourceClaim and the scheduler binds it; at their
# default rates (20 and 50 requests a second) ten thousand Pods take a quarter of an hour.
_CLIENT_QPS = 300
_SETTLE_TIMEOUT = 1800.0
_READY_TIMEOUT = 600.0


@dataclass(frozen=True)
class Configuration:
    """A CastSlice configuration to replay: its CASTSLICE_* settings; `sharing` False opts
    no task in (the baseline)."""

    name: str
    settings: dict[str, str]
    sharing: bool = True

    # Read once: scoring asks for them for every placed Pod at every checkpoint.
    @functools.cached_property
    def config(self) -> Config:
        return load_config(self.settings)

    @functools.cached_property
    def backend(self) -> Tools:
        return tools_for(self.config)

    @functools.cached_property
    def claims(self) -> bool:
        """Whether Pods claim devices (DRA) rather than asking for a device plugin's resource."""
        return self.backend.claim_templates() is not None


@dataclass
class Result:
    configuration: str
    profile: str
    seed: int
    every: int
    nodes: int
    gpus: int
    tasks: int
    # (arrived GPU demand / cluster GPUs, GPUs the placed tasks get / cluster GPUs, Pods
    # Pending, Pods placed with less than they asked for: `honoured`)
    curve: list[tuple[float, float, int, int]] = field(default_factory=list)
    seconds: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)
    # The tasks' order: the trace's arrival order, or shuffled as the FGD artefact runs it.
    order: str = "arrival"
    # How the Pods were created: one of CREATIONS.
    creation: str = BATCHES
    # With the extender: its prioritize calls, seconds spent in them, CPU seconds, peak RSS.
    extender: dict[str, float] = field(default_factory=dict)
    # kube-scheduler's own: CPU seconds, peak RSS, and its attempts that scheduled a Pod
    # (how many, mean seconds, and the histogram bucket bound that holds 99 % of them),
    # extender calls included.
    scheduler: dict[str, float] = field(default_factory=dict)
    # Each Pod's node at the end ("": Pending), in the tasks' order: not recorded (run
    # writes it to --placements), for comparing with the in-process harness Pod by Pod.
    placements: list[str] = field(default_factory=list)


def slice_ratio(config: Config, task: TraceTask) -> int:
    """The slices a task's share rounds up to: ceil(gpu_milli x S / 1000), at least 1."""
    return max(1, math.ceil(Fraction(task.num_gpu * task.gpu_milli, MILLI) * config.slices_per_gpu))


def opts_in(configuration: Configuration, task: TraceTask) -> bool:
    """A fractional task opts in; a whole-GPU task too where Pods claim devices, since DRA
    nodes offer no device plugin resource to ask for instead."""
    if not configuration.sharing or not task.num_gpu:
        return False
    return task.fractional or configuration.claims


def pod_manifest(configuration: Configuration, index: int, task: TraceTask) -> dict[str, Any]:
    config = configuration.config
    resources: dict[str, Any] = {
        "requests": {"cpu": f"{task.cpu_milli}m", "memory": f"{task.memory_mib}Mi"}
    }
    if task.num_gpu:
        resources["limits"] = {config.gpu_resource: str(task.num_gpu)}
    metadata: dict[str, Any] = {"name": f"task-{index:05d}", "labels": {"trace": "openb"}}
    if opts_in(configuration, task):
        metadata["annotations"] = {OPTIMIZE: "true", SLICE_RATIO: str(slice_ratio(config, task))}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "task", "image": "registry.invalid/task:1", "resources": resources}
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if task.gpu_spec:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": MODEL_LABEL,
                                    "operator": "In",
                                    "values": list(task.gpu_spec),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def honoured(configuration: Configuration, task: TraceTask, labels: dict[str, str]) -> Fraction:
    """The GPUs a placed task gets, on the node with `labels`.

    A task that did not opt in asks for whole GPUs of the GPU resource; where a node's
    sharing keeps that resource with one unit per client (GKE's sharing pools), the
    scheduler may place it there and it gets a client's share of each GPU, not the GPU.
    """
    if not task.num_gpu or opts_in(configuration, task):
        return task.demand
    config = configuration.config
    units = configuration.backend.gpu_units(config.gpu_resource, labels) or 1
    return min(task.demand, Fraction(task.num_gpu, units))


def plan_tasks(configuration: Configuration, tasks: Sequence[TraceTask]) -> list[Task]:
    return [
        Task(task.demand, opts_in(configuration, task) and task.fractional, task.name)
        for task in tasks
    ]


def node_pools(
    configuration: Configuration, nodes: Sequence[TraceNode], tasks: Sequence[TraceTask]
) -> list[int | None]:
    """Each node's sharing (clients or slices per GPU; None: whole GPUs), in the shares of
    GPUs `castslice plan`'s arithmetic gives each pool for this workload."""
    config = configuration.config
    if not configuration.sharing:
        return [None] * len(nodes)
    pools = estimate(config, plan_tasks(configuration, tasks), configuration.name).pools
    total = sum(pool.gpus for pool in pools) or 1
    targets: dict[int | None, float] = {}
    for pool in pools:
        sharing = pool.degree if pool.degree else (None if pool.label == "whole GPUs" else 0)
        key = config.slices_per_gpu if sharing == 0 else sharing
        targets[key] = targets.get(key, 0.0) + pool.gpus / total
    cluster = sum(node.gpus for node in nodes)
    given = dict.fromkeys(targets, 0)
    chosen: list[int | None] = []
    for node in nodes:
        # The pool furthest below its share of the cluster's GPUs takes the next node.
        key = max(targets, key=lambda k: targets[k] * cluster - given[k])
        given[key] += node.gpus
        chosen.append(key)
    return chosen


def node_manifest(
    configuration: Configuration, trace: TraceNode, sharing: int | None
) -> dict[str, Any]:
    backend = configuration.config.backend if configuration.sharing else "resource"
    pool = fake_nodes.Pool(trace.name, sharing, gpus_per_node=trace.gpus)
    manifest = fake_nodes.node_manifest(
        "dra" if configuration.claims else backend, pool, trace.name
    )
    manifest["metadata"]["labels"][MODEL_LABEL] = trace.model
    for field_name in ("capacity", "allocatable"):
        manifest["status"][field_name].update(
            {"cpu": f"{trace.cpu_milli}m", "memory": f"{trace.memory_mib}Mi", "pods": "1000"}
        )
    return manifest


def _slice(config: Config, node: str, uid: str, gpus: int) -> dict[str, Any]:
    """The node's ResourceSlice as the NVIDIA DRA driver publishes it with
    --consumable-shares=S (tests/e2e/dra.py's, with this S)."""
    manifest = dra_nodes.resource_slice(node, uid, gpus)
    for device in manifest["spec"]["devices"]:
        shares = device["capacity"]["shares"]
        shares["value"] = str(config.slices_per_gpu)
        shares["requestPolicy"]["validRange"]["max"] = str(config.slices_per_gpu)
    return manifest


def create_cluster_nodes(
    api: kubernetes.client.ApiClient,
    configuration: Configuration,
    nodes: Sequence[TraceNode],
    pools: Sequence[int | None],
) -> None:
    core = kubernetes.client.CoreV1Api(api)
    resource = kubernetes.client.ResourceV1Api(api)
    if configuration.claims:
        dra_nodes.ensure_device_class(api)

    def create(item: tuple[TraceNode, int | None]) -> None:
        trace, sharing = item
        created = core.create_node(node_manifest(configuration, trace, sharing))
        if configuration.claims:
            body = _slice(configuration.config, trace.name, created.metadata.uid, trace.gpus)
            resource.create_resource_slice(body)

    with ThreadPoolExecutor(_CREATORS) as pool:
        list(pool.map(create, zip(nodes, pools, strict=True)))
    key, value = KWOK_NODE_LABEL

    def ready() -> bool:
        listed = core.list_node(label_selector=f"{key}={value}").items
        return len(listed) == len(nodes) and all(
            not node.spec.taints
            and any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
            for node in listed
        )

    wait_until(ready, timeout=_READY_TIMEOUT, what="the trace's nodes to be Ready", interval=1.0)


def apply_claim_templates(
    api: kubernetes.client.ApiClient, configuration: Configuration, tasks: Sequence[TraceTask]
) -> None:
    """The templates `castslice claim-templates --slices ...` renders for the counts used."""
    config = configuration.config
    templates = configuration.backend.claim_templates()
    assert templates is not None
    asked = {slice_ratio(config, task) for task in tasks if opts_in(configuration, task)}
    counts = templates.chosen_counts(asked)
    resource = kubernetes.client.ResourceV1Api(api)
    for manifest in templates.manifests([NAMESPACE], counts):
        resource.create_namespaced_resource_claim_template(NAMESPACE, manifest)


def decided(pod: dict[str, Any]) -> bool:
    """Bound, or found unschedulable for want of room rather than of its claim."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        and not any(words in (c.get("message") or "") for words in _NOT_YET)
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def read_pod(core: kubernetes.client.CoreV1Api, name: str) -> dict[str, Any]:
    """Pod `name` of the replay's namespace, as JSON."""
    answer = core.read_namespaced_pod(name, NAMESPACE, _preload_content=False)
    pod: dict[str, Any] = json.loads(read_body(answer))
    return pod


def until_decided(core: kubernetes.client.CoreV1Api, name: str) -> None:
    """Wait until the scheduler has decided Pod `name`: bound, or found unschedulable."""
    wait_until(
        lambda: decided(read_pod(core, name)),
        timeout=_DECIDE_TIMEOUT,
        what=f"the scheduler to decide Pod {name}",
        interval=0.02,
    )


def settle(core: kubernetes.client.CoreV1Api, expected: int) -> list[dict[str, Any]]:
    """Every Pod once the scheduler has tried each: bound, or found unschedulable.

    While waiting only the Pods not yet bound are listed (the API server's cache indexes
    Pods by node): a list of all of them took the API server 4 to 5 s of CPU at 6700 Pods,
    and listed every second it took a core from the scheduling it waited for. Lists are
    read as JSON, not as the client's models: building ten thousand Pod models takes the
    client longer than the API server takes.
    """

    def unbound_decided() -> bool:
        return all(decided(pod) for pod in _pods(core, field_selector="spec.nodeName="))

    wait_until(
        unbound_decided, timeout=_SETTLE_TIMEOUT, what="the scheduler to settle", interval=1.0
    )
    pods = _pods(core)
    if len(pods) != expected:
        raise HarnessError(f"{len(pods)} of the {expected} Pods created are listed")
    return pods


def _pods(core: kubernetes.client.CoreV1Api, **selectors: str) -> list[dict[str, Any]]:
    answer = core.list_namespaced_pod(
        NAMESPACE, label_selector="trace=openb", _preload_content=False, **selectors
    )
    items: list[dict[str, Any]] = json.loads(read_body(answer))["items"]
    return items


def read_body(answer: Any) -> bytes:
    """A raw answer's body, read to its end so that its connection can serve the next call."""
    data = answer.data
    answer.release_conn()
    return data


@dataclass
class Cluster:
    """A running cluster with the trace's nodes, CastSlice registered and, for the extender's
    profile, the extender beside it."""

    plane: LocalControlPlane
    core: kubernetes.client.CoreV1Api
    labels: dict[str, dict[str, str]]
    extender: ExtenderProcess | None


@contextlib.contextmanager
def running(
    configuration: Configuration,
    profile: str,
    nodes: Sequence[TraceNode],
    tasks: Sequence[TraceTask],
    binaries: KubeBinaries,
    nginx: Path,
    scheduler_flags: Sequence[str] = (),
) -> Iterator[Cluster]:
    """The control plane under `profile`, CastSlice serving, the nodes (in the pools
    `node_pools` gives `tasks`) Ready and the claim templates the tasks use applied."""
    pools = node_pools(configuration, nodes, tasks)
    labels = {
        trace.name: node_manifest(configuration, trace, sharing)["metadata"]["labels"]
        for trace, sharing in zip(nodes, pools, strict=True)
    }
    scheduler_config = PROFILES[profile]
    extender = None
    with contextlib.ExitStack() as stack:
        if profile == FGD_EXTENDER:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fgd-")))
            extender = ExtenderProcess(configuration.settings, workdir)
            stack.callback(extender.stop)
            scheduler_config = profile_for(extender.url, workdir)
        plane = stack.enter_context(
            LocalControlPlane(
                binaries, scheduler_config=scheduler_config, client_qps=_CLIENT_QPS,
                scheduler_flags=tuple(scheduler_flags),
            )
        )  # fmt: skip
        server = stack.enter_context(CastSliceServer(nginx, configuration.settings))
        if extender is not None:
            extender.start(plane.kubeconfig)
        api = plane.api_client()
        register_and_wait(api, server)
        create_namespace(api, NAMESPACE)
        create_cluster_nodes(api, configuration, nodes, pools)
        if configuration.claims:
            apply_claim_templates(api, configuration, tasks)
        yield Cluster(plane, kubernetes.client.CoreV1Api(api), labels, extender)


def costs(cluster: Cluster, result: Result, log: Callable[[str], None]) -> None:
    """kube-scheduler's and the extender's cost so far, into `result` and the log."""
    result.scheduler = scheduler_cost(cluster.plane)
    log(f"  kube-scheduler: {result.scheduler['attempts']:.0f} Pods scheduled, "
        f"mean {result.scheduler['attempt_mean'] * 1000:.1f} ms, "
        f"p99 {result.scheduler['attempt_p99'] * 1000:.0f} ms, "
        f"{result.scheduler['cpu_seconds']:.1f} s CPU")  # fmt: skip
    extender = cluster.extender
    if extender is not None:
        account = extender.state()
        cpu, peak = extender.usage()
        result.extender = {
            "calls": account["calls"], "seconds": account["seconds"],
            "cpu_seconds": cpu, "peak_rss": peak, "expectations": account["expectations"],
        }  # fmt: skip
        log(f"  extender: {account['calls']} calls, {account['seconds']:.1f} s in them, "
            f"{cpu:.1f} s CPU, peak RSS {peak / 2**20:.0f} MiB; expected Pods: "
            f"{account['expectations']}")  # fmt: skip


def replay(
    configuration: Configuration,
    profile: str,
    seed: int,
    every: int,
    nodes: Sequence[TraceNode],
    tasks: Sequence[TraceTask],
    binaries: KubeBinaries,
    nginx: Path,
    log: Callable[[str], None] = print,
    order: str = "arrival",
    creation: str = BATCHES,
) -> Result:
    if creation not in CREATIONS:
        raise ValueError(f"creation {creation!r}: one of {', '.join(CREATIONS)}")
    gpus = sum(node.gpus for node in nodes)
    result = Result(
        configuration.name, profile, seed, every, len(nodes), gpus, len(tasks),
        settings=configuration.settings, order=order, creation=creation,
    )  # fmt: skip
    started = time.monotonic()
    flags = ONE_AT_A_TIME_SCHEDULER_FLAGS if creation == ONE_AT_A_TIME else ()
    with running(configuration, profile, nodes, tasks, binaries, nginx, flags) as cluster:
        log(f"  {len(nodes)} nodes ready after {time.monotonic() - started:.0f} s")
        _replay(configuration, tasks, cluster, result, started, log)
        costs(cluster, result, log)
    result.seconds = time.monotonic() - started
    return result


def scheduler_cost(plane: LocalControlPlane) -> dict[str, float]:
    """kube-scheduler's CPU, peak memory and the attempts that scheduled a Pod so far, from
    its /proc entry and its scheduler_scheduling_attempt_duration_seconds histogram."""
    assert plane.scheduler is not None
    cpu, peak = plane.scheduler.usage()
    buckets: dict[float, float] = {}
    count = total = 0.0
    for family in text_string_to_metric_families(plane.scheduler_metrics()):
        if family.name != "scheduler_scheduling_attempt_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("result") != "scheduled":
                continue
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
    p99 = next((bound for bound in sorted(buckets) if buckets[bound] >= 0.99 * count), 0.0)
    return {
        "cpu_seconds": cpu, "peak_rss": peak, "attempts": count,
        "attempt_mean": total / count if count else 0.0, "attempt_p99": p99,
    }  # fmt: skip


def batch_ends(tasks: Sequence[TraceTask], gpus: int) -> list[int]:
    """How many of `tasks` are created once each checkpoint's batch is: those that keep
    the demand arrived within the checkpoint's share of `gpus`, and every task left at the
    last checkpoint."""
    ends, submitted, arrived = [], 0, Fraction(0)
    for checkpoint in CHECKPOINTS:
        while submitted < len(tasks) and arrived + tasks[submitted].demand <= checkpoint * gpus:
            arrived += tasks[submitted].demand
            submitted += 1
        ends.append(submitted if checkpoint != CHECKPOINTS[-1] else len(tasks))
    return ends


def _replay(
    configuration: Configuration,
    tasks: Sequence[TraceTask],
    cluster: Cluster,
    result: Result,
    started: float,
    log: Callable[[str], None],
) -> None:
    gpus = result.gpus
    core, labels = cluster.core, cluster.labels
    by_name = {f"task-{i:05d}": task for i, task in enumerate(tasks)}
    arrived, submitted = Fraction(0), 0
    manifests = [pod_manifest(configuration, i, task) for i, task in enumerate(tasks)]

    def create(body: dict[str, Any]) -> None:
        read_body(core.create_namespaced_pod(NAMESPACE, body, _preload_content=False))

    with ThreadPoolExecutor(_CREATORS) as creators:
        for end in batch_ends(tasks, gpus):
            batch = manifests[submitted:end]
            arrived += sum((task.demand for task in tasks[submitted:end]), Fraction(0))
            submitted = end
            if result.creation == ONE_AT_A_TIME:
                for body in batch:
                    create(body)
                    until_decided(core, body["metadata"]["name"])
            else:
                list(creators.map(create, batch))
            pods = settle(core, submitted)
            placed_on = {
                pod["metadata"]["name"]: pod["spec"]["nodeName"]
                for pod in pods
                if pod["spec"].get("nodeName")
            }
            got = {
                name: honoured(configuration, by_name[name], labels[node])
                for name, node in placed_on.items()
            }
            placed = sum(got.values(), Fraction(0))
            short = sum(got[name] < by_name[name].demand for name in got)
            pending = len(pods) - len(placed_on)
            point = (float(arrived / gpus), float(placed / gpus), pending, short)
            result.curve.append(point)
            log(
                f"  arrived {point[0]:6.1%}  allocated {point[1]:6.1%}  pending {pending}"
                f"  placed with less than asked {short}"
                f"  ({time.monotonic() - started:.0f} s)"
            )
    if not pods:
        raise HarnessError("no Pod was created")
    result.placements = [placed_on.get(f"task-{i:05d}", "") for i in range(len(tasks))]
