"""The admission decision: one AdmissionRequest in, one AdmissionResponse out.

The slice resolution decides how many slices a Pod gets, the backend turns
them into resources and placement, the patch builder writes the operations;
this module only puts them in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import msgspec

from .backends import Backend, Placement, backend_for
from .config import Config
from .kube import Pod
from .patch import (
    GpuContainer,
    PatchOperation,
    annotation_operations,
    asked_quantity,
    gpu_containers,
    node_selector_operations,
    resource_operations,
)
from .review import AdmissionRequest, AdmissionResponse, allowed, patched
from .slices import clip, is_mirror_pod, is_opted_in, resolve_slices, shorten

APPLIED = "castslice.castops.io/applied"
_POD = {"group": "", "version": "v1", "kind": "Pod"}
_record_encoder = msgspec.json.Encoder()


# A Struct, not a NamedTuple: one is built per review, and a Struct is built in C.
class Outcome(msgspec.Struct, frozen=True):
    """A response and what the log line says about it."""

    response: AdmissionResponse
    decision: str
    reason: str | None = None
    slices: int | None = None
    source: str | None = None
    backend: str | None = None
    containers_changed: int = 0


class PodAdmission:
    """Decides on Pod reviews for one configuration; safe to share between threads."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.backend: Backend = backend_for(config)

    def review(self, request: AdmissionRequest) -> Outcome:
        """Never denies; patches only opted-in Pods being created."""
        uid = request["uid"]
        pod: Pod = request.get("object") or {}
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        reason = _skip_reason(request, annotations)
        config, backend = self.config, self.backend
        if reason:
            return Outcome(allowed(uid), "skipped", reason, backend=backend.name)

        decision = resolve_slices(annotations, config)
        warnings = list(decision.warnings)
        spec = pod.get("spec") or {}
        containers = gpu_containers(spec, config.gpu_resource)
        if not containers:
            return Outcome(
                allowed(uid, warnings),
                "unchanged",
                "no GPU request to rewrite",
                backend=backend.name,
            )
        outcome = {"slices": decision.slices, "source": decision.source, "backend": backend.name}

        selector = spec.get("nodeSelector") or {}
        hand_placed = [key for key in backend.placement_keys if key in selector]
        if hand_placed:
            warnings.append(
                clip(f"nodeSelector {hand_placed[0]} set by hand; castslice left the Pod unchanged")
            )
            return Outcome(allowed(uid, warnings), "unchanged", "placed by hand", **outcome)

        placement = backend.place(decision.slices)
        operations: list[PatchOperation] = []
        original: dict[str, str] = {}
        for container in containers:
            asked = asked_quantity(container, config.gpu_resource)
            original[container.name] = asked
            warning = _less_than_asked(container, asked, placement, config.gpu_resource)
            if warning:
                warnings.append(warning)
            operations += resource_operations(
                container, config.gpu_resource, placement.resource, placement.quantity
            )
        operations += node_selector_operations(spec, placement.node_selector)
        record = _record_encoder.encode({**outcome, "original": original}).decode()
        operations += annotation_operations(metadata, {APPLIED: record})
        audit = {
            "slices": str(decision.slices),
            "slice-source": decision.source,
            "backend": backend.name,
        }
        return Outcome(
            patched(uid, operations, warnings, audit),
            "mutated",
            containers_changed=len(containers),
            **outcome,
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
    if APPLIED in annotations:
        return "already applied"
    return None


def _less_than_asked(
    container: GpuContainer, asked: str, placement: Placement, gpu: str
) -> str | None:
    # Quantities the API server would reject anyway ("1.5", "2Gi") are not compared.
    if not asked.isdigit() or int(asked) <= 1 or placement.gpus >= int(asked):
        return None
    return clip(
        f"container {shorten(container.name)} asked for {asked} {gpu}; "
        f"castslice gives it {_share(placement.gpus)}"
    )


def _share(gpus: Fraction) -> str:
    if gpus.denominator == 1:
        return f"{gpus.numerator} GPU" + ("s" if gpus > 1 else "")
    return f"{gpus.numerator}/{gpus.denominator} of a GPU"
