"""Workload warnings: what a Deployment, Job, CronJob… will do to its Pods, told at apply time.

Warnings on the Pods a controller creates go to the controller, not to the
person who applied the workload. So workloads are reviewed too, and never
patched (GitOps tools would see drift): the Pod their template would produce
goes through the same Pod decision as every Pod, its warnings are passed on,
and a few about the workload itself are added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

from castslice.contract.definitions import (
    ANNOTATION_PREFIX,
    OPTIMIZE,
    USER_ANNOTATIONS,
    TemplateLocation,
    TemplateSite,
    WorkloadKind,
    sites_at,
    templates,
    workload_kind,
)
from castslice.contract.kube import Pod, PodTemplateSpec, Workload
from castslice.contract.patch import gpu_containers
from castslice.contract.review import POD_KIND, AdmissionRequest, GroupVersionKind
from castslice.decision.outcome import Outcome
from castslice.decision.pods import PodDecision
from castslice.decision.slices import clip, is_opted_in, shorten


class WorkloadCheck(NamedTuple):
    """The warnings for one workload review and what its Pods will get."""

    warnings: list[str]
    # Bounded: it becomes a metrics label.
    reason: str
    # The decision on the Pod the (first) template would produce; None when there is none.
    pods: Outcome | None = None


def kind_of(kind: GroupVersionKind | None) -> WorkloadKind | None:
    """The workload table's row for `kind`, or None when `kind` is not a workload."""
    if kind is None:
        return None
    return workload_kind(kind.get("group"), kind.get("version"), kind.get("kind"))


def is_workload(kind: GroupVersionKind | None) -> bool:
    return kind_of(kind) is not None


def templated_pod(template: PodTemplateSpec) -> Pod:
    """The Pod a controller would create from `template`, before admission."""
    # Always with metadata: a created Pod has some, and the patch adds to it.
    return {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}


class TemplateRead(NamedTuple):
    """One Pod template of a workload, as the Pod its operator creates from it, or why it
    cannot be read as one."""

    site: TemplateSite
    pod: Pod | None
    # Where containers the workload does not hold come from, when the Pod gets some.
    unseen: str | None = None
    problem: str | None = None

    @property
    def annotations(self) -> Mapping[str, str]:
        return ((self.pod or {}).get("metadata") or {}).get("annotations") or {}


def own_annotations(kind: WorkloadKind, workload: Mapping[str, Any]) -> Mapping[str, str] | None:
    """The workload's own annotations when its operator puts them on its Pods too."""
    if not kind.own_annotations_reach_pods:
        return None
    metadata = workload.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else None


def read_templates(kind: WorkloadKind, workload: Mapping[str, Any]) -> list[TemplateRead]:
    """Each Pod template of `workload`, read as the Pod decision reads a Pod."""
    own = own_annotations(kind, workload)
    found = []
    for site in templates(kind, workload):
        made = site.location.shape.pod(site.node, own)
        try:
            template = msgspec.convert(made.template, PodTemplateSpec, from_attributes=False)
        except msgspec.ValidationError as error:
            detail = str(error).replace("`$.", "`", 1)
            found.append(TemplateRead(site, None, problem=f"unreadable Pod template: {detail}"))
            continue
        found.append(TemplateRead(site, templated_pod(template), made.unseen))
    return found


def check_workload(
    request: AdmissionRequest[Workload],
    pod_decision: PodDecision,
    gpu_resource: str,
) -> WorkloadCheck:
    """Warn about what stops the workload's Pods from being sliced as its annotations ask."""
    if request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
        return WorkloadCheck([], "not a CREATE or UPDATE")
    kind = kind_of(request.get("kind"))
    if kind is None:
        return WorkloadCheck([], "no Pod template")
    workload: Mapping[str, Any] = request.get("object") or {}
    found = read_templates(kind, workload)
    warnings = _misplaced(workload, kind, found)
    # Unless a template opts in Pods whose containers come from elsewhere: those are the ones.
    opts_in_unseen = any(t.unseen and is_opted_in(t.annotations) for t in found)
    if (
        kind.outside_templates
        and not opts_in_unseen
        and _asks_outside_templates(workload, found, gpu_resource)
    ):
        warnings.append(kind.outside_templates)
    chosen: Outcome | None = None
    for template in found:
        prefix = _prefix(template.site, len(found))
        if template.pod is None:
            warnings.append(prefix + (template.problem or ""))
            continue
        if not kind.copies_template_annotations and is_opted_in(template.annotations):
            warnings.append(
                f"{prefix}the {kind.kind} operator does not copy template annotations onto "
                "its Pods; castslice cannot slice them"
            )
            continue
        pods = pod_decision.review(
            {
                "uid": request["uid"],
                "kind": POD_KIND,
                "operation": "CREATE",
                "namespace": request.get("namespace"),
                "object": template.pod,
            }
        )
        if chosen is None or (pods.decision == "mutated" and chosen.decision != "mutated"):
            chosen = pods
        warnings += _template_warnings(pods, template, gpu_resource, prefix)
    clipped = [clip(warning) for warning in warnings]
    if chosen is None:
        return WorkloadCheck(clipped, "no Pod template")
    return WorkloadCheck(clipped, _reason(chosen), chosen)


def _prefix(site: TemplateSite, templates_found: int) -> str:
    """How warnings name the template: its label, or its path when the kind has several."""
    if site.label:
        return f"{site.label}: "
    return f"{'.'.join(site.path)}: " if templates_found > 1 else ""


def _template_warnings(
    pods: Outcome, template: TemplateRead, gpu_resource: str, prefix: str
) -> list[str]:
    """What the template's Pods will get."""
    warnings = [prefix + warning for warning in pods.response.get("warnings", ())]
    if pods.decision == "skipped":
        return warnings + [
            prefix + warning for warning in _skipped(template.annotations, pods.reason)
        ]
    assert template.pod is not None
    if template.unseen is None and not gpu_containers(template.pod["spec"] or {}, gpu_resource):
        named = template.site.label or f"{prefix}the Pod template"
        warnings.append(
            f"{named} is opted in but no container asks for {clip(gpu_resource, 40)}; "
            "there is nothing to slice"
        )
    return warnings


def _misplaced(
    workload: Mapping[str, Any], kind: WorkloadKind, found: list[TemplateRead]
) -> list[str]:
    """CastSlice annotations on the workload (or on an object between it and its template,
    a CronJob's jobTemplate) that never reach its Pods."""
    if kind.own_annotations_reach_pods:
        return []
    if len(kind.templates) == 1 and not kind.templates[0].has_wildcards:
        # One template, always at the same place: name where each key belongs.
        return [
            warning
            for template in found
            if template.pod is not None
            for warning in _misplaced_at(workload, kind, template)
        ]
    template_keys = {key for template in found for key in template.annotations}
    ours = [
        key
        for key in _annotations_of(workload)
        if key.startswith(ANNOTATION_PREFIX) and key not in template_keys
    ]
    belong = kind.annotations_belong or (
        "its Pod templates' annotations" if kind.templates else None
    )
    if belong is None:
        return [
            f"{_key(key)} on the {kind.kind} is ignored; it never reaches the Pods" for key in ours
        ]
    return [f"{_key(key)} on the {kind.kind} is ignored; move it to {belong}" for key in ours]


def _misplaced_at(
    workload: Mapping[str, Any], kind: WorkloadKind, template: TemplateRead
) -> list[str]:
    location = template.site.location
    places: list[tuple[str, Mapping[str, Any]]] = [(f"the {kind.kind}", workload)]
    for name, between in location.between:
        found = next((site.node for site in sites_at(workload, TemplateLocation(between))), {})
        places.append((name, found))
    destination = ".".join((*template.site.path, *location.shape.annotations_fields))
    return [
        f"{_key(key)} on {where} is ignored; move it to {destination}"
        for where, holder in places
        for key in _annotations_of(holder)
        if key.startswith(ANNOTATION_PREFIX) and key not in template.annotations
    ]


def _annotations_of(holder: Mapping[str, Any]) -> Mapping[str, str]:
    metadata = holder.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _skipped(annotations: Mapping[str, str], reason: str | None) -> list[str]:
    if is_opted_in(annotations):
        # Opted in, yet skipped (a decision record copied from a live Pod…): say why.
        return [f"castslice leaves the Pods of this template unchanged: {reason}"]
    optimize = annotations.get(OPTIMIZE)
    if optimize == "false":
        return []
    if optimize is not None:
        return [f'{OPTIMIZE}={shorten(optimize)} is not "true"; the Pods are not sliced']
    ours = [key for key in annotations if key.startswith(ANNOTATION_PREFIX)]
    if not ours:
        return []
    return [f'{_key(ours[0])} is set but {OPTIMIZE} is not "true"; the Pods are not sliced']


def _key(key: str) -> str:
    return key if key in USER_ANNOTATIONS else shorten(key)


def _reason(pods: Outcome) -> str:
    return f"pod template: {pods.reason or pods.decision}"


def _asks_outside_templates(
    resource: Mapping[str, Any], found: list[TemplateRead], gpu_resource: str
) -> bool:
    """Whether `gpu_resource` is named anywhere in `resource` but in its Pod templates."""
    inside = {id(template.site.node) for template in found}
    pending: list[Any] = [resource.get("spec")]
    while pending:
        value = pending.pop()
        if id(value) in inside:
            continue
        if isinstance(value, Mapping):
            if gpu_resource in value:
                return True
            pending += value.values()
        elif isinstance(value, list):
            pending += value
    return False
