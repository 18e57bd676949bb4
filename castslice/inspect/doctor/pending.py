"""Check: Pods the scheduler cannot place for lack of what CastSlice made them ask for.

The scheduler records why in the Pod's PodScheduled condition (reason
Unschedulable), e.g. "0/3 nodes are available: 3 Insufficient
nvidia.com/gpu-shared. preemption: ...".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from castslice.backends.tools import node_checks_for
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.contract.definitions import APPLIED
from castslice.contract.findings import Result, failed, passed
from castslice.contract.scheduling import unschedulable_message
from castslice.inspect.doctor.capacity import needed_placements
from castslice.settings.config import Config

CHECK = "pending"
LISTED = 5
# The scheduler's NodeResourcesFit reason, one per lacking resource.
_INSUFFICIENT = re.compile(r"Insufficient (\S+)")
# Its NodeAffinity reason: no node carries the labels the nodeSelector asks for.
_NO_MATCHING_NODE = "didn't match Pod's node affinity/selector"
_NO_MATCHING_NODE_TEXT = "no node with the labels it selects"


def check_pending(cluster: Cluster, config: Config) -> Result:
    pods = cluster.list("/api/v1/pods", [("fieldSelector", "status.phase=Pending")])
    return assess(config, list(pods))


def assess(config: Config, pods: Sequence[Manifest]) -> Result:
    resources = {placement.resource for placement, _ in needed_placements(config)}
    shared = node_checks_for(config).shared_resource
    waiting: list[tuple[str, str]] = []
    for pod in pods:
        reason = waiting_reason(pod, resources, shared)
        if reason:
            metadata = pod.get("metadata") or {}
            waiting.append((f"{metadata.get('namespace')}/{metadata.get('name')}", reason))
    watched = ", ".join(sorted(resources))
    if not waiting:
        return passed(CHECK, f"no Pod is Pending for lack of {watched}")
    reasons = sorted({reason for _, reason in waiting})
    listed = ", ".join(name for name, _ in waiting[:LISTED])
    more = f" and {len(waiting) - LISTED} more" if len(waiting) > LISTED else ""
    return failed(
        CHECK,
        f"{len(waiting)} Pod{'s' if len(waiting) != 1 else ''} Pending "
        f"({'; '.join(reasons)}): {listed}{more}",
        "add GPU nodes or free some (see the nodes check); kubectl describe pod shows the "
        "scheduler's message",
    )


def insufficient(message: str) -> set[str]:
    """The resources a scheduler message says no node has enough of."""
    # Resource names end in a letter or digit; the sentence's punctuation follows them.
    return {name.rstrip(".,;") for name in _INSUFFICIENT.findall(message)}


def waiting_reason(pod: Manifest, resources: set[str], shared: str) -> str | None:
    """Why `pod` waits, when it is for lack of what CastSlice placed it on; else None.

    Any Pod short of the shared resource counts; short of the GPU resource or
    of matching nodes, only Pods CastSlice rewrote.
    """
    message = unschedulable_message(pod)
    if message is None:
        return None
    rewritten = APPLIED in ((pod.get("metadata") or {}).get("annotations") or {})
    lacking = insufficient(message) & resources
    if not rewritten:
        lacking &= {shared}
    if lacking:
        return "Insufficient " + ", ".join(sorted(lacking))
    if rewritten and _NO_MATCHING_NODE in message:
        return _NO_MATCHING_NODE_TEXT
    return None
