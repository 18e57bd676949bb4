"""A burst of opted-in Pods made by the controller-manager: a Deployment scaled out at once.

The Pods name a scheduler that does not exist, so they stay Pending: the burst is
about admission (every create goes through CastSlice), and neither the scheduler
nor KWOK's fake kubelets compete with the API server for the CPU meanwhile, or
slow down deleting the Pods afterwards.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes.client

from ..procs import wait_until
from .pods import Manifest, gpu_container, opted_in

APPLIED = "castslice.castops.io/applied"
UNSCHEDULED = "castslice-burst-unscheduled"
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def deployment(name: str, replicas: int) -> Manifest:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": opted_in(workload_type="inference")},
                "spec": {
                    "schedulerName": UNSCHEDULED,
                    "containers": [gpu_container()],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


def pods_in(
    api: kubernetes.client.ApiClient, namespace: str, *, metadata_only: bool = True
) -> list[dict[str, Any]]:
    """Every Pod in `namespace` as JSON, in one list call; only their metadata by default,
    which keeps polling a namespace of hundreds of Pods cheap for the API server."""
    response = api.rest_client.pool_manager.request(
        "GET",
        f"{api.configuration.host}/api/v1/namespaces/{namespace}/pods",
        headers={"Accept": _METADATA_ONLY if metadata_only else "application/json"},
    )
    if response.status != 200:
        raise RuntimeError(f"listing Pods answered {response.status}: {response.data[:300]!r}")
    return response.json()["items"] or []


def start_burst(api: kubernetes.client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    kubernetes.client.AppsV1Api(api).create_namespaced_deployment(
        namespace, deployment(name, replicas)
    )


def wait_for_pods(
    api: kubernetes.client.ApiClient, namespace: str, count: int, timeout: float = 120.0
) -> list[dict[str, Any]]:
    """Poll until `namespace` holds at least `count` Pods; their metadata-only objects."""
    return wait_until(
        lambda: found if len(found := pods_in(api, namespace)) >= count else None,
        timeout=timeout,
        what=f"{count} Pods in {namespace}",
        interval=0.2,
    )


def timed_burst(
    api: kubernetes.client.ApiClient, namespace: str, name: str, replicas: int
) -> tuple[float, list[dict[str, Any]]]:
    """Seconds from creating the Deployment until all its Pods exist, and those Pods."""
    started = time.monotonic()
    start_burst(api, namespace, name, replicas)
    pods = wait_for_pods(api, namespace, replicas)
    return time.monotonic() - started, pods


def remove_burst(api: kubernetes.client.ApiClient, namespace: str, name: str) -> None:
    """The Deployment first (nothing recreates Pods after), then every Pod in one call."""
    kubernetes.client.AppsV1Api(api).delete_namespaced_deployment(
        name, namespace, propagation_policy="Orphan"
    )
    kubernetes.client.AppsV1Api(api).delete_collection_namespaced_replica_set(
        namespace, propagation_policy="Orphan"
    )
    kubernetes.client.CoreV1Api(api).delete_collection_namespaced_pod(
        namespace, grace_period_seconds=0
    )


def mutated(pod: dict[str, Any]) -> bool:
    """Whether CastSlice's decision record is on the Pod (full or metadata-only object)."""
    return APPLIED in (pod["metadata"].get("annotations") or {})
