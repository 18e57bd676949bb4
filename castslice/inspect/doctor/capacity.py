"""Check: nodes offer what the configured backend places Pods on, and how many fit now.

Every slice count from 1 to CASTSLICE_SLICES_PER_GPU becomes some resource
on nodes with some labels (the backend's `place`); each of those needs a
Ready node. Room is the nodes' allocatable minus what the Pods bound to them
request, as the scheduler counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from castslice.backends import Placement
from castslice.backends.roles import NodeChecks
from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.findings import Result, failed, passed, warning
from castslice.contract.scheduling import BOUND_PODS, allocatable, pod_request
from castslice.settings.config import Config

CHECK = "nodes"


def check_nodes(cluster: Cluster, config: Config) -> Result:
    nodes = list(cluster.list("/api/v1/nodes"))
    pods = list(cluster.list("/api/v1/pods", [("fieldSelector", BOUND_PODS)]))
    return assess(config, nodes, pods)


def assess(config: Config, nodes: Sequence[Manifest], pods: Sequence[Manifest]) -> Result:
    """The check's result for these nodes and the Pods bound to them."""
    backend = node_checks_for(config)
    usable = [node for node in nodes if is_usable(node)]
    placements = needed_placements(config)
    missing = []
    offered = []
    for placement, counts in placements:
        serving = [node for node in usable if serves(backend, node, placement)]
        if serving:
            offered.append(f"{_describe(placement)} on {_plural(len(serving), 'node')}")
        else:
            missing.append(
                f"no Ready node offers {_describe(placement)} (for {_counts_text(counts)})"
                + _found_instead(usable, placement)
            )
    missing += backend.node_problems(usable)
    if missing:
        return failed(CHECK, "; ".join(missing), backend.setup_hint())
    rooms = [
        (name, room(backend, usable, pods, backend.place(slices)))
        for name, slices in sorted(config.presets.items(), key=lambda item: (item[1], item[0]))
    ]
    room_text = ", ".join(
        f"{name}: {_plural(count, 'Pod') if index == 0 else count}"
        for index, (name, count) in enumerate(rooms)
    )
    message = f"nodes offer {'; '.join(offered)}; room now for {room_text}"
    full = [name for name, count in rooms if count == 0]
    if full:
        return warning(
            CHECK,
            message,
            f"{', '.join(full)} Pods stay Pending until GPUs free up or nodes are added",
        )
    return passed(CHECK, message)


def needed_placements(config: Config) -> list[tuple[Placement, list[int]]]:
    """Each distinct (resource, node labels) the backend uses, with the slice counts using it."""
    backend = node_checks_for(config)
    found: dict[tuple[object, ...], tuple[Placement, list[int]]] = {}
    for slices in range(1, config.slices_per_gpu + 1):
        placement = backend.place(slices)
        key = (
            placement.resource,
            tuple(sorted(placement.node_selector.items())),
            placement.labels_in,
            placement.absent_node_labels,
            placement.labels_at_least,
        )
        found.setdefault(key, (placement, []))[1].append(slices)
    return list(found.values())


def is_usable(node: Manifest) -> bool:
    """Ready and not cordoned: the scheduler may place new Pods there."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in (node.get("status") or {}).get("conditions") or []
    )


def serves(backend: NodeChecks, node: Manifest, placement: Placement) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not backend.serves(labels, placement):
        return False
    return allocatable(node, placement.resource) > 0


def room(
    backend: NodeChecks, nodes: Iterable[Manifest], pods: Iterable[Manifest], placement: Placement
) -> int:
    """How many more Pods placed as `placement` fit on `nodes` right now."""
    used: dict[str, int] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            used[node_name] = used.get(node_name, 0) + pod_request(pod, placement.resource)
    total = 0
    for node in nodes:
        if serves(backend, node, placement):
            free = allocatable(node, placement.resource) - used.get(node["metadata"]["name"], 0)
            total += max(free, 0) // placement.quantity
    return total


def _describe(placement: Placement) -> str:
    labels = [f"{key}={value}" for key, value in sorted(placement.node_selector.items())]
    labels += [f"{key} in ({', '.join(values)})" for key, values in placement.labels_in]
    labels += [f"{key} >= {least}" for key, least in placement.labels_at_least]
    if not labels:
        return placement.resource
    return f"{placement.resource} with {', '.join(labels)}"


def _counts_text(counts: list[int]) -> str:
    if len(counts) == 1:
        return f"Pods of {_plural(counts[0], 'slice')}"
    return f"Pods of {counts[0]}-{counts[-1]} slices"


def _found_instead(nodes: Sequence[Manifest], placement: Placement) -> str:
    """What nodes offering the resource are labelled instead, when labels are the problem."""
    if not placement.node_selector:
        return ""
    seen = []
    for node in nodes:
        if allocatable(node, placement.resource) <= 0:
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not any(key in labels for key in placement.node_selector):
            continue  # a GPU node outside every sharing pool; nothing to compare
        found = ", ".join(
            f"{key}={labels.get(key, '(none)')}" for key in sorted(placement.node_selector)
        )
        if found not in seen:
            seen.append(found)
    if not seen:
        return ""
    return f"; nodes with {placement.resource} have {' / '.join(seen[:3])}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
