"""Two real kube-schedulers on one API server never give out one GPU share twice (dra).

The cluster's own scheduler (default-scheduler) runs beside a second stock kube-scheduler
set up as the chart sets it up with `extender.scheduler.enabled`: its
KubeSchedulerConfiguration (own schedulerName, own lease) and its RBAC, rendered by the
real helm and applied as they are; it signs in as the chart's ServiceAccount, and calls
`castslice extender`. CastSlice runs with CASTSLICE_SCHEDULER_NAME, so every Pod it rewrites
names the second scheduler. The construction that keeps the two apart is the dra backend's
DeviceTaintRule: only claims from CastSlice's templates tolerate it, and only rewritten
Pods (the second scheduler's) hold those. Without it, the default scheduler allocates the
very devices the second one does, each unaware of the other's allocations in flight.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.utils
import pytest
import yaml

from castslice.contract import Manifest
from tests.helm import installed_objects, run_helm, template_args, values_file

from ..procs import wait_until
from .castslice_server import StartServer
from .cluster import LocalControlPlane
from .dra import delete_taint_rule, dra_nodes, ensure_taint_rule
from .extender import ExtenderProcess
from .kubectl import Kubectl
from .nodes import Pool, gpu_nodes
from .pods import GPU, IMAGE, create_namespace, list_pods, running, unschedulable
from .registration import APPLIED, register_and_wait
from .tools import run_castslice

pytestmark = pytest.mark.kubernetes("1.36")


SECOND = "castslice-scheduler"
RELEASE_NAMESPACE = f"second-{uuid.uuid4().hex[:8]}"
SETTINGS = {"CASTSLICE_BACKEND": "dra", "CASTSLICE_SCHEDULER_NAME": SECOND}
CHART_VALUES = {
    "backend": "dra",
    "schedulerName": SECOND,
    "extender": {"enabled": True, "scheduler": {"enabled": True}},
}
SHARES = 4
_NO_DEVICES = "cannot allocate all claims"
_SETTLE_TIMEOUT = 120.0


def chart_scheduler_objects(helm: Path, workdir: Path) -> list[Manifest]:
    """What the chart installs for the second scheduler (release castslice)."""
    args = template_args(
        values_file(workdir, CHART_VALUES), namespace=RELEASE_NAMESPACE, kube_version="1.37.2"
    )
    rendered = run_helm(helm, *args).stdout
    return [
        item
        for item in installed_objects(rendered)
        if item["metadata"]["name"].startswith("castslice-scheduler")
    ]


@pytest.fixture(scope="module")
def second_scheduler(
    helm: Path,
    control_plane: LocalControlPlane,
    api: kubernetes.client.ApiClient,
    module_castslice: StartServer,
) -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="castslice-second-") as workdir:
        objects = chart_scheduler_objects(helm, Path(workdir))
        kinds = {item["kind"] for item in objects}
        assert {"ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
                "Deployment"} <= kinds  # fmt: skip
        create_namespace(api, RELEASE_NAMESPACE)
        # Its rights exactly as the chart grants them; nothing else lets it act.
        rights = [item for item in objects if item["kind"] not in ("ConfigMap", "Deployment")]
        for item in rights:
            kubernetes.utils.create_from_dict(api, item, verbose=False)
        (config_map,) = [item for item in objects if item["kind"] == "ConfigMap"]
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        (account,) = [item for item in objects if item["kind"] == "ServiceAccount"]
        extender = ExtenderProcess({"CASTSLICE_BACKEND": "dra"}, Path(workdir))
        extender.start(control_plane.kubeconfig)
        # The one change: the extender's address here, for the Service's in-cluster name.
        (registration,) = config["extenders"]
        registration["urlPrefix"] = extender.url
        user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{account['metadata']['name']}"
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NAMESPACE}")
        process = control_plane.add_scheduler(SECOND, user, groups, config)
        try:
            ensure_taint_rule(api)
            register_and_wait(api, module_castslice(SETTINGS))
            yield
        finally:
            control_plane.retire(process)
            extender.stop()
            _delete(api, rights)
            kubernetes.client.CoreV1Api(api).delete_namespace(RELEASE_NAMESPACE)


def _delete(api: kubernetes.client.ApiClient, objects: list[Manifest]) -> None:
    """The cluster-wide and kube-system objects the fixture made, which outlive its namespace."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    for item in objects:
        name, namespace = item["metadata"]["name"], item["metadata"].get("namespace")
        if item["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(name)
        elif item["kind"] == "RoleBinding" and namespace == "kube-system":
            rbac.delete_namespaced_role_binding(name, namespace)


def castslice_templates(kubectl: Kubectl, namespace: str) -> None:
    templates = run_castslice(SETTINGS, "claim-templates", "-n", namespace).stdout
    kubectl.run("apply", "-f", "-", stdin=templates)


def gpu_pod(name: str, annotations: dict[str, str] | None) -> Manifest:
    container = {"name": "app", "image": IMAGE, "resources": {"limits": {GPU: "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [container]},
    }


def opted(workload_type: str) -> dict[str, str]:
    return {"castops.io/optimize": "true", "castops.io/workload-type": workload_type}


def create_all(api: kubernetes.client.ApiClient, namespace: str, pods: list[Manifest]) -> None:
    """Every Pod at once, from eight clients: both schedulers get them as fast as they come."""
    core = kubernetes.client.CoreV1Api(api)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda pod: core.create_namespaced_pod(namespace, pod), pods))


def settled(api: kubernetes.client.ApiClient, namespace: str, count: int) -> list[Manifest]:
    """The Pods once each runs or was refused by its scheduler for lack of room."""

    def decided() -> list[Manifest] | None:
        pods = list_pods(api, namespace, "")
        if len(pods) == count and all(
            running(pod) or any(reason in (unschedulable(pod) or "")
                                for reason in (_NO_DEVICES, "Insufficient"))
            for pod in pods
        ):  # fmt: skip
            return pods
        return None

    pods: list[Manifest] = wait_until(
        decided,
        timeout=_SETTLE_TIMEOUT,
        what=f"{count} Pods in {namespace} to run or be refused for lack of room",
        interval=0.5,
    )
    return pods


def allocations(api: kubernetes.client.ApiClient, namespace: str) -> list[tuple[str, Manifest]]:
    """(the Pod holding the claim, one allocation result) for every allocated claim."""
    answer = kubernetes.client.ResourceV1Api(api).list_namespaced_resource_claim(
        namespace, _preload_content=False
    )
    held = []
    for claim in json.loads(answer.data)["items"]:
        [owner] = claim["metadata"]["ownerReferences"]
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in allocation.get("devices", {}).get("results", []):
            held.append((owner["name"], result))
    return held


def schedulers_by_pod(
    api: kubernetes.client.ApiClient, namespace: str, bound: set[str]
) -> dict[str, str]:
    """Which scheduler bound each Pod of `bound`: the controller that reported its Scheduled
    event (written a moment after the binding)."""

    def reported() -> dict[str, str] | None:
        answer = kubernetes.client.EventsV1Api(api).list_namespaced_event(
            namespace, _preload_content=False
        )
        found = {
            event["regarding"]["name"]: event["reportingController"]
            for event in json.loads(answer.data)["items"]
            if event.get("reason") == "Scheduled"
        }
        return found if bound <= found.keys() else None

    found: dict[str, str] = wait_until(
        reported, timeout=30, what="a Scheduled event for every bound Pod", interval=0.5
    )
    return found


def test_a_burst_for_both_schedulers_never_books_a_device_past_its_shares(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    second_scheduler: None,
) -> None:
    """Three DRA nodes of two GPUs (24 shares) and a device-plugin node of two GPUs. At
    once: 16 quarter-GPU Pods and 3 whole-GPU Pods that opted in (28 shares: more than
    there is), and 4 plain one-GPU Pods. Every device holds at most its 4 shares, never a
    whole-GPU claim beside a share, never a claim of the default scheduler; every Pod
    left waiting has no room anywhere."""
    castslice_templates(kubectl_user, namespace)
    shares = [gpu_pod(f"dev-{i}", opted("dev")) for i in range(16)]
    wholes = [gpu_pod(f"training-{i}", opted("training")) for i in range(3)]
    plains = [gpu_pod(f"plain-{i}", None) for i in range(4)]
    # Interleaved, so that both schedulers work through the burst at the same time.
    burst = [pod for group in zip(shares[:4], plains, strict=True) for pod in group]
    burst += [*wholes, *shares[4:]]
    with (
        dra_nodes(api, [2, 2, 2], namespace) as dra_names,
        gpu_nodes(api, "resource", [Pool("plain", None, gpus_per_node=2)], namespace) as plain,
    ):
        create_all(api, namespace, burst)
        pods = settled(api, namespace, len(burst))
        held = allocations(api, namespace)
        bound_by = schedulers_by_pod(
            api, namespace, {pod["metadata"]["name"] for pod in pods if running(pod)}
        )

    by_name = {pod["metadata"]["name"]: pod for pod in pods}
    rewritten = {
        name
        for name, pod in by_name.items()
        if APPLIED in (pod["metadata"].get("annotations") or {})
    }
    assert rewritten == {pod["metadata"]["name"] for pod in [*shares, *wholes]}
    # Only the Pods CastSlice rewrote name the second scheduler, and it bound each that runs.
    for name, pod in by_name.items():
        assert pod["spec"]["schedulerName"] == (
            SECOND if name in rewritten else "default-scheduler"
        )
        if running(pod):
            assert bound_by[name] == pod["spec"]["schedulerName"], name

    per_device: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for owner, result in held:
        per_device[(result["pool"], result["device"])].append(
            (owner, int(result["consumedCapacity"]["shares"]))
        )
    for device, claims in per_device.items():
        assert sum(count for _, count in claims) <= SHARES, (device, claims)
        # A whole-GPU claim is alone on its device.
        assert all(count < SHARES for _, count in claims) or len(claims) == 1, (device, claims)
        # No Pod of the default scheduler holds any of the shared devices.
        assert {owner for owner, _ in claims} <= rewritten, (device, claims)
    assert {pool for pool, _ in per_device} <= set(dra_names)

    # Whatever order the burst took, nothing that fits waits: a waiting quarter finds no
    # device with a share free, a waiting whole-GPU Pod no device with all four.
    free = {
        (node, f"gpu-{index}"): SHARES
        - sum(c for _, c in per_device.get((node, f"gpu-{index}"), []))
        for node in dra_names
        for index in range(2)
    }
    waiting = [name for name, pod in by_name.items() if not running(pod)]
    for name in waiting:
        if name.startswith("dev-"):
            assert max(free.values()) < 1, (name, free)
        elif name.startswith("training-"):
            assert max(free.values()) < SHARES, (name, free)
    # The burst asked for more than there is: the schedulers did contend.
    assert [name for name in waiting if name in rewritten]
    # The plain Pods run on the device-plugin node (two GPUs) and nowhere else; the other
    # two wait: the shared devices' taint keeps them off.
    plain_running = [by_name[f"plain-{i}"] for i in range(4) if running(by_name[f"plain-{i}"])]
    assert len(plain_running) == 2
    assert {pod["spec"]["nodeName"] for pod in plain_running} == {plain[0].name}


def test_without_the_taint_rule_the_default_scheduler_allocates_the_second_schedulers_devices(
    api: kubernetes.client.ApiClient,
    kubectl_user: Kubectl,
    namespace: str,
    second_scheduler: None,
) -> None:
    """The negative: with the DeviceTaintRule gone, a plain one-GPU Pod is served by the
    default scheduler from the same device a quarter-GPU Pod holds through the second
    one. Each scheduler counts the device's shares from the claims it has seen allocated;
    what the other has allocated but not yet written is invisible to it, so only timing
    keeps two such claims from overbooking the device."""
    castslice_templates(kubectl_user, namespace)
    core = kubernetes.client.CoreV1Api(api)
    delete_taint_rule(api)
    try:
        with dra_nodes(api, [1], namespace) as [node]:
            core.create_namespaced_pod(namespace, gpu_pod("dev", opted("dev")))
            wait_until(lambda: running(_read(api, namespace, "dev")), timeout=60, what="dev to run")
            core.create_namespaced_pod(namespace, gpu_pod("plain", None))
            wait_until(
                lambda: running(_read(api, namespace, "plain")), timeout=60, what="plain to run"
            )
            held = allocations(api, namespace)
            bound_by = schedulers_by_pod(api, namespace, {"dev", "plain"})
    finally:
        ensure_taint_rule(api)
    assert bound_by == {"dev": SECOND, "plain": "default-scheduler"}
    assert sorted((owner, result["pool"], result["device"]) for owner, result in held) == [
        ("dev", node, "gpu-0"),
        ("plain", node, "gpu-0"),
    ]


def scheduler_check(control_plane: LocalControlPlane, name: str) -> dict[str, Any]:
    """What `castslice doctor` says of the scheduler `name` (CASTSLICE_SCHEDULER_NAME)."""
    settings = {**SETTINGS, "CASTSLICE_SCHEDULER_NAME": name}
    done = run_castslice(
        settings, "doctor", "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"
    )
    (check,) = [c for c in json.loads(done.stdout)["checks"] if c["check"] == "scheduler"]
    return check


def test_doctor_names_the_pods_of_a_scheduler_nobody_runs(
    api: kubernetes.client.ApiClient,
    control_plane: LocalControlPlane,
    namespace: str,
    second_scheduler: None,
) -> None:
    """A Pod for a scheduler name no scheduler answers to is never tried: after a minute
    doctor names it. A Pod the running second scheduler tried and could not place is not
    blamed on it."""
    core = kubernetes.client.CoreV1Api(api)
    created = time.monotonic()
    for pod_name, scheduler in (("orphan", "castslice-nobody"), ("tried", SECOND)):
        pod = gpu_pod(pod_name, None)
        pod["spec"]["schedulerName"] = scheduler
        # Nowhere to go, whatever nodes other tests left: tried, and left waiting.
        pod["spec"]["nodeSelector"] = {"castslice.castops.io/e2e-nowhere": "true"}
        core.create_namespaced_pod(namespace, pod)
    wait_until(
        lambda: unschedulable(_read(api, namespace, "tried")), timeout=60, what="tried to be tried"
    )
    assert scheduler_check(control_plane, "castslice-nobody")["status"] == "ok"
    time.sleep(max(0.0, 62 - (time.monotonic() - created)))

    orphaned = scheduler_check(control_plane, "castslice-nobody")
    running_one = scheduler_check(control_plane, SECOND)

    assert orphaned["status"] == "failed"
    assert orphaned["message"].startswith(
        "1 Pod for the scheduler castslice-nobody Pending over 60 s and never tried"
    )
    assert orphaned["message"].endswith(f": {namespace}/orphan")
    assert running_one == {
        "check": "scheduler", "ok": True, "status": "ok",
        "message": f"no Pod waits untried for the scheduler {SECOND}", "fix": "",
    }  # fmt: skip


def _read(api: kubernetes.client.ApiClient, namespace: str, name: str) -> Manifest:
    answer = kubernetes.client.CoreV1Api(api).read_namespaced_pod(
        name, namespace, _preload_content=False
    )
    pod: Manifest = json.loads(answer.data)
    return pod
