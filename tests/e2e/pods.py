"""Building GPU Pods and reading back exactly what the API server stored."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes.client

# The builders are tests/manifests.py's (shared with the unit suite), imported from here.
from ..manifests import (
    GPU as GPU,
)
from ..manifests import (
    IMAGE as IMAGE,
)
from ..manifests import (
    OPTIMIZE as OPTIMIZE,
)
from ..manifests import (
    SHARED as SHARED,
)
from ..manifests import (
    SLICE_RATIO as SLICE_RATIO,
)
from ..manifests import (
    WORKLOAD_TYPE as WORKLOAD_TYPE,
)
from ..manifests import (
    Manifest as Manifest,
)
from ..manifests import (
    container as container,
)
from ..manifests import (
    gpu_container as gpu_container,
)
from ..manifests import (
    opted_in as opted_in,
)
from ..manifests import (
    pod as pod,
)
from ..procs import HarnessError, wait_until


def gpu_pod(name: str, annotations: dict[str, str] | None, gpus: int = 1) -> Manifest:
    """A Pod of one container that limits `gpus` whole GPUs and asks nothing else."""
    metadata: Manifest = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    container = {"name": "app", "image": IMAGE, "resources": {"limits": {GPU: gpus}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container]},
    }


def create_pod(
    api: kubernetes.client.ApiClient, namespace: str, manifest: Manifest, *, dry_run: bool = False
) -> tuple[Manifest, list[str]]:
    """Create a Pod and return the object the API server answered with, and its warnings."""
    core = kubernetes.client.CoreV1Api(api)
    options: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    response = core.create_namespaced_pod(namespace, manifest, _preload_content=False, **options)
    return json.loads(response.data), _warnings(response.headers.getlist("Warning"))


def read_pod(api: kubernetes.client.ApiClient, namespace: str, name: str) -> Manifest:
    """The Pod as stored in etcd, as plain JSON (quantities exactly as persisted)."""
    core = kubernetes.client.CoreV1Api(api)
    response = core.read_namespaced_pod(name, namespace, _preload_content=False)
    return json.loads(response.data)


def list_pods(api: kubernetes.client.ApiClient, namespace: str, selector: str) -> list[Manifest]:
    core = kubernetes.client.CoreV1Api(api)
    response = core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
    return json.loads(response.data)["items"]


def pod_exists(api: kubernetes.client.ApiClient, namespace: str, name: str) -> bool:
    try:
        read_pod(api, namespace, name)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def resources_of(stored: Manifest) -> dict[str, Manifest]:
    """`{container name: resources}` over init and regular containers."""
    spec = stored["spec"]
    everything = spec.get("initContainers", []) + spec["containers"]
    return {item["name"]: item.get("resources", {}) for item in everything}


def with_resources(spec: Manifest, resources: dict[str, Manifest]) -> Manifest:
    """A copy of `spec` whose named containers carry the given resources instead."""
    expected = copy.deepcopy(spec)
    for item in expected.get("initContainers", []) + expected["containers"]:
        if item["name"] in resources:
            item["resources"] = resources[item["name"]]
    return expected


def shared(count: int, **requests: str) -> Manifest:
    """The resources CastSlice leaves behind: `count` shared slices in requests and limits."""
    return {
        "requests": {**requests, SHARED: str(count)},
        "limits": {SHARED: str(count)},
    }


def _warnings(headers: list[str]) -> list[str]:
    # RFC 7234 form, as the API server sends them: `299 - "text"`.
    texts = []
    for header in headers:
        code, _, rest = header.partition(" ")
        agent, _, text = rest.partition(" ")
        if code == "299" and agent == "-" and len(text) >= 2:
            texts.append(text[1:-1].replace('\\"', '"').replace("\\\\", "\\"))
        else:
            texts.append(header)
    return texts


def create_namespace(api: kubernetes.client.ApiClient, name: str) -> str:
    """Create `name` unless it exists, and wait until Pods can be created in it.

    The ServiceAccount admission plugin rejects Pods until the controller
    manager has made the namespace's default ServiceAccount.
    """
    core = kubernetes.client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": name}})
    except kubernetes.client.ApiException as error:
        if error.status != 409:
            raise
    wait_until(
        lambda: (
            core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
        ),
        timeout=30,
        what=f"the default ServiceAccount in {name}",
    )
    return name


def running(pod: Manifest) -> bool:
    return pod["status"].get("phase") == "Running"


def unschedulable(pod: Manifest) -> str | None:
    """The scheduler's message for a Pod it could not place, else None."""
    for condition in (pod.get("status") or {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return condition.get("message", "")
    return None


def settle(
    api: kubernetes.client.ApiClient,
    namespace: str,
    *,
    runs: int,
    waits: int,
    no_room: str | tuple[str, ...] = "Insufficient",
    timeout: float = 30.0,
) -> tuple[list[Manifest], list[Manifest]]:
    """The Pods once each of `runs + waits` runs or was refused for lack of room (the
    scheduler's message says `no_room`, or one of them), split so; fails, naming where
    each Pod went, unless there are `runs` and `waits`."""
    phrases = (no_room,) if isinstance(no_room, str) else no_room

    def refused(pod: Manifest) -> bool:
        # Only for lack of room: a node the scheduler has not seen Ready yet is retried.
        message = unschedulable(pod) or ""
        return any(phrase in message for phrase in phrases)

    def decided() -> list[Manifest] | None:
        pods = list_pods(api, namespace, "")
        if len(pods) == runs + waits and all(running(pod) or refused(pod) for pod in pods):
            return pods
        return None

    def where(pods: list[Manifest]) -> dict[str, str]:
        return {
            pod["metadata"]["name"]: pod["spec"].get("nodeName") or str(unschedulable(pod))
            for pod in pods
        }

    try:
        pods = wait_until(
            decided,
            timeout=timeout,
            what=f"{runs + waits} Pods in {namespace} to run or be refused for lack of room",
            interval=0.2,
        )
    except HarnessError as error:
        raise AssertionError(f"{error}: {where(list_pods(api, namespace, ''))}") from None
    up = [pod for pod in pods if running(pod)]
    left = [pod for pod in pods if not running(pod)]
    assert (len(up), len(left)) == (runs, waits), where(pods)
    return up, left
