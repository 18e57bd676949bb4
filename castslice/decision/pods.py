"""The Pod decision: one Pod's AdmissionRequest in, one Outcome out.

Enrolment decides whether the Pod is in, the slice resolution how many slices it
gets, the backend turns them into resources and placement, the patch builder
writes the operations; this module only puts them in order, each a step below it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from fractions import Fraction

from castslice.backends import LeftAlone, Placement, Placer
from castslice.contract.definitions import APPLIED, DecisionRecord
from castslice.contract.gpu_memory import MemoryCap, memory_cap, memory_env_operations
from castslice.contract.kube import DEFAULT_SCHEDULER, ObjectMeta, Pod, PodSpec
from castslice.contract.patch import (
    GpuContainer,
    PatchOperation,
    annotation_operations,
    asked_quantity,
    gpu_containers,
    scheduler_operations,
)
from castslice.contract.review import POD_KIND, AdmissionRequest, allowed, patched
from castslice.decision.enrolment import by_annotation, decide, rule_decision
from castslice.decision.outcome import Outcome
from castslice.decision.slices import (
    SliceDecision,
    clip,
    is_mirror_pod,
    resolve_burst,
    resolve_slices,
    share_text,
    shorten,
)
from castslice.settings.config import Config
from castslice.settings.rules import Rule


class PodDecision:
    """Decides on reviews of Pods for one configuration and backend; safe to share between
    threads."""

    def __init__(self, config: Config, backend: Placer) -> None:
        self.config = config
        self.backend = backend
        # A placement depends on the slice count alone: worked out once per count.
        self._place = functools.lru_cache(maxsize=64)(self.backend.place)

    def review(self, request: AdmissionRequest[Pod]) -> Outcome:
        """Never denies; patches only opted-in Pods being created."""
        uid = request["uid"]
        pod: Pod = request.get("object") or {}
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        config, backend = self.config, self.backend
        rule, reason, source = self._enrolment(request, metadata, annotations)
        if reason:
            return Outcome(allowed(uid), "skipped", reason, source=source, backend=backend.name)

        decision = resolve_slices(annotations, config, rule_decision(rule))
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
        left_alone = backend.left_alone(spec) or _own_scheduler(spec, config.scheduler_name)
        if left_alone:
            warnings.append(clip(f"{left_alone.detail}; castslice left the Pod unchanged"))
            return Outcome(
                allowed(uid, warnings),
                "unchanged",
                left_alone.reason,
                slices=decision.slices,
                source=decision.source,
                backend=backend.name,
            )

        operations, audit = self._rewrite(metadata, spec, containers, decision, warnings)
        return Outcome(
            patched(uid, operations, warnings, audit),
            "mutated",
            slices=decision.slices,
            source=decision.source,
            backend=backend.name,
            containers_changed=len(containers),
        )

    def _enrolment(
        self, request: AdmissionRequest[Pod], metadata: ObjectMeta, annotations: Mapping[str, str]
    ) -> tuple[Rule | None, str | None, str | None]:
        """The rule that enrols the Pod, why it is not rewritten (None: it is), and the
        source of the rule that excluded it."""
        reason = _not_a_pod_create(request)
        if reason is not None:
            return None, reason, None
        policy = self.config.policy
        # Without a policy the namespace and labels are never read.
        enrolment = (
            by_annotation(annotations)
            if policy is None
            else decide(
                policy,
                annotations,
                request.get("namespace") or metadata.get("namespace") or "",
                metadata.get("labels") or {},
            )
        )
        rule, reason = enrolment.rule, enrolment.reason
        source = rule.source if reason is not None and rule is not None else None
        return rule, reason or _excluded(annotations), source

    def _rewrite(
        self,
        metadata: ObjectMeta,
        spec: PodSpec,
        containers: list[GpuContainer],
        decision: SliceDecision,
        warnings: list[str],
    ) -> tuple[list[PatchOperation], dict[str, str]]:
        """The operations that rewrite an opted-in Pod, and the audit annotations that say
        so; what the Pod should hear of it added to `warnings`."""
        config, backend = self.config, self.backend
        annotations = metadata.get("annotations") or {}
        placement = self._place(decision.slices)
        original = _original(containers, placement, config.gpu_resource, warnings)
        warnings += backend.notes(placement)
        operations = backend.pod_operations(spec, containers, placement)
        cap, memory = self._memory(annotations, placement, warnings)
        if cap is not None:
            operations += [
                operation
                for container in containers
                for operation in memory_env_operations(container.path, container.manifest, cap)
            ]
        if config.scheduler_name:
            operations += scheduler_operations(spec, config.scheduler_name)
        record = DecisionRecord(
            decision.slices, decision.source, backend.name, original, placement.instance, memory
        )
        operations += annotation_operations(metadata, {APPLIED: record.encode()})
        audit = {
            "slices": str(decision.slices),
            "slice-source": decision.source,
            "backend": backend.name,
        }
        if placement.instance:
            audit["instance"] = placement.instance
        if memory:
            audit["gpu-memory"] = memory
        if config.scheduler_name:
            audit["scheduler"] = config.scheduler_name
        return operations, audit

    def _memory(
        self, annotations: Mapping[str, str], placement: Placement, warnings: list[str]
    ) -> tuple[MemoryCap | None, str | None]:
        """The GPU memory cap of each GPU container and what is said of it, or (None, None)
        where there is none to write; a warning on either added to `warnings`."""
        gpu_memory = self.config.gpu_memory
        if gpu_memory is None or placement.memory_share is None:
            return None, None
        burst, burst_warnings = resolve_burst(annotations, self.config)
        warnings += burst_warnings
        cap = memory_cap(placement.memory_share, gpu_memory, burst)
        if cap is None:
            return None, None
        memory = self.backend.memory_statement(cap, placement)
        warnings.append(clip(f"{self.backend.name}: {memory}"))
        return cap, memory


def _original(
    containers: list[GpuContainer], placement: Placement, gpu: str, warnings: list[str]
) -> dict[str, str]:
    """Each container's name and the GPU quantity it asked for; a warning added for each one
    that gets less than it asked."""
    original: dict[str, str] = {}
    for container in containers:
        asked = asked_quantity(container, gpu)
        original[container.name] = asked
        warning = _less_than_asked(container, asked, placement, gpu)
        if warning:
            warnings.append(warning)
    return original


def _not_a_pod_create(request: AdmissionRequest) -> str | None:
    if request.get("operation") != "CREATE":
        return "not a CREATE"
    if request.get("kind") != POD_KIND or request.get("subResource"):
        return "not a core/v1 Pod"
    return None


def _excluded(annotations: Mapping[str, str]) -> str | None:
    if is_mirror_pod(annotations):
        return "mirror pod"
    if APPLIED in annotations:
        return "already applied"
    return None


def _own_scheduler(spec: PodSpec, scheduler: str | None) -> LeftAlone | None:
    """A Pod that names a scheduler of its own keeps it, and keeps what it asked for: its
    scheduler is not the one CastSlice's shared devices are kept to, and two schedulers
    allocating the same devices can hand out one share twice."""
    named = spec.get("schedulerName")
    if scheduler is None or named in (None, "", DEFAULT_SCHEDULER, scheduler):
        return None
    return LeftAlone(
        "names its own scheduler",
        f"spec.schedulerName is {shorten(str(named))}, not {shorten(scheduler)}",
    )


def _less_than_asked(
    container: GpuContainer, asked: str, placement: Placement, gpu: str
) -> str | None:
    # Only ASCII digits are compared, as the CEL twin's '^[0-9]+$': the API server refuses
    # "1.5" anyway, and "¹" (a digit to str.isdigit(), none to int() or to the API server)
    # is no quantity at all.
    if not (asked.isascii() and asked.isdigit()) or int(asked) <= 1 or placement.gpus >= int(asked):
        return None
    return less_than_asked_text(container.name, asked, placement.gpus, gpu)


def less_than_asked_text(container: str, asked: str, gpus: Fraction, gpu: str) -> str:
    """The warning for a container CastSlice gives less than the GPUs it asked for."""
    return clip(
        f"container {shorten(container)} asked for {asked} {gpu}; "
        f"castslice gives it {share_text(gpus)}"
    )
