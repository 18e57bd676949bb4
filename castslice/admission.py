"""The admission decision: one AdmissionRequest in, one AdmissionResponse out."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from .config import Config
from .kube import Pod
from .patch import patch_by_container
from .policy import is_mirror_pod, is_opted_in, resolve_slices
from .review import AdmissionRequest, AdmissionResponse, allowed, patched

_POD = {"group": "", "version": "v1", "kind": "Pod"}


# A Struct, not a NamedTuple: one is built per review, and a Struct is built in C.
class Outcome(msgspec.Struct, frozen=True):
    """A response and what the log line says about it."""

    response: AdmissionResponse
    decision: str
    reason: str | None = None
    slices: int | None = None
    source: str | None = None
    containers_changed: int = 0


def review_pod(request: AdmissionRequest, config: Config) -> Outcome:
    """Decide on one request; never denies, and patches only opted-in Pods being created."""
    uid = request["uid"]
    pod: Pod = request.get("object") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    reason = _skip_reason(request, annotations)
    if reason:
        return Outcome(allowed(uid), "skipped", reason)

    decision = resolve_slices(annotations, config)
    per_container = patch_by_container(
        pod.get("spec") or {}, decision.slices, config.gpu_resource, config.shared_resource
    )
    operations = [operation for group in per_container for operation in group]
    warnings = list(decision.warnings)
    if not operations:
        return Outcome(allowed(uid, warnings), "unchanged", "no GPU request to rewrite")
    audit = {"slices": str(decision.slices), "slice-source": decision.source}
    return Outcome(
        patched(uid, operations, warnings, audit),
        "mutated",
        slices=decision.slices,
        source=decision.source,
        containers_changed=len(per_container),
    )


def _skip_reason(request: AdmissionRequest, annotations: Mapping[str, str]) -> str | None:
    if request.get("operation") != "CREATE":
        return "not a CREATE"
    if request.get("kind") != _POD or request.get("subResource"):
        return "not a core/v1 Pod"
    if not is_opted_in(annotations):
        return "not opted in"
    if is_mirror_pod(annotations):
        return "mirror pod"
    return None
