"""What the scheduler counts: a Pod's request of a resource, a node's allocatable, and its
own message for a Pod it cannot place. Read from a live cluster's plain JSON."""

from __future__ import annotations

import math

from castslice.contract import Manifest

# A field selector for the Pods that still hold their resources on a node.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def allocatable(node: Manifest, resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    return count(value)


def pod_request(pod: Manifest, resource: str) -> int:
    """What the scheduler reserves of `resource` for `pod`.

    The larger of the app containers plus sidecars and each init container
    (plus the sidecars started before it), as kube-scheduler computes it.
    """
    spec = pod.get("spec") or {}
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers") or []:
        asked = _container_request(container, resource)
        if container.get("restartPolicy") == "Always":
            sidecars += asked
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + asked)
    running = sidecars + sum(
        _container_request(container, resource) for container in spec.get("containers") or []
    )
    overhead = count((spec.get("overhead") or {}).get(resource))
    return max(running, init_peak) + overhead


def unschedulable_message(pod: Manifest) -> str | None:
    """The scheduler's own words for a Pod it could not place (PodScheduled), else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "")
    return None


def _container_request(container: Manifest, resource: str) -> int:
    resources = container.get("resources") or {}
    # Extended resources cannot be overcommitted: a limit alone is also the request.
    value = (resources.get("requests") or {}).get(resource)
    if value is None:
        value = (resources.get("limits") or {}).get(resource)
    return count(value)


def count(value: object) -> int:
    """A quantity as a whole number, rounded up; 0 when absent or unreadable."""
    if value is None:
        return 0
    # Imported by the reports that read a cluster alone: the webhook loads this module with
    # the backends, and the client's import would double its start.
    from kubernetes.utils import parse_quantity

    try:
        return math.ceil(parse_quantity(value))
    except ValueError:
        return 0
