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
from castslice.contract.kube import ObjectMeta, OperatorResource, Pod, PodTemplateSpec, Workload
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


def pod_templates(
    workload: Mapping[str, Any], kind: WorkloadKind
) -> list[tuple[TemplateLocation, tuple[str, ...], Mapping[str, Any]]]:
    """Every Pod template of `workload` (typed or plain data): its location in the table,
    its concrete path, and the template itself."""
    return [(site.location, site.path, site.node) for site in templates(kind, workload)]


def templated_pod(template: Mapping[str, Any]) -> Pod:
    """The Pod a controller would create from `template`, before admission."""
    # Always with metadata: a created Pod has some, and the patch adds to it.
    return {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}


def check_workload(
    request: AdmissionRequest[Workload],
    pod_decision: PodDecision,
    gpu_resource: str,
) -> WorkloadCheck:
    """Warn about what stops the workload's Pods from being sliced as its annotations ask."""
    if request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
        return WorkloadCheck([], "not a CREATE or UPDATE")
    kind = kind_of(request.get("kind"))
    if kind is not None and kind.custom_resource:
        return _check_operator_resource(request, kind, pod_decision, gpu_resource)
    workload: Workload = request.get("object") or {}
    found_templates = pod_templates(workload, kind) if kind else []
    if kind is None or not found_templates:
        return WorkloadCheck([], "no Pod template")

    warnings: list[str] = []
    first: Outcome | None = None
    for location, path, template in found_templates:
        found, pods = _check_template(
            request, workload, kind.kind, location, path, template, pod_decision, gpu_resource
        )
        if len(found_templates) > 1:
            found = [f"{'.'.join(path)}: {warning}" for warning in found]
        warnings += found
        first = first or pods
    assert first is not None
    return WorkloadCheck([clip(warning) for warning in warnings], _reason(first), first)


def _check_template(
    request: AdmissionRequest[Workload],
    workload: Workload,
    kind: str,
    location: TemplateLocation,
    path: tuple[str, ...],
    template: Mapping[str, Any],
    pod_decision: PodDecision,
    gpu_resource: str,
) -> tuple[list[str], Outcome]:
    pod = templated_pod(template)
    annotations = (pod["metadata"] or {}).get("annotations") or {}
    warnings = _misplaced(workload, kind, location, path, annotations)
    pods = pod_decision.review(
        {
            "uid": request["uid"],
            "kind": POD_KIND,
            "operation": "CREATE",
            "namespace": request.get("namespace"),
            "object": pod,
        }
    )
    warnings += pods.response.get("warnings", ())
    if pods.decision == "skipped":
        warnings += _skipped(annotations, pods.reason)
    elif not gpu_containers(pod["spec"] or {}, gpu_resource):
        warnings.append(
            f"the Pod template is opted in but no container asks for {clip(gpu_resource, 40)}; "
            "there is nothing to slice"
        )
    return warnings, pods


def _misplaced(
    workload: Workload,
    kind: str,
    location: TemplateLocation,
    path: tuple[str, ...],
    template_annotations: Mapping[str, str],
) -> list[str]:
    # Annotations on the workload (or on a CronJob's jobTemplate) never reach its Pods.
    places: list[tuple[str, ObjectMeta | None]] = [(f"the {kind}", workload.get("metadata"))]
    for name, between in location.between:
        found = next((site.node for site in sites_at(workload, TemplateLocation(between))), {})
        places.append((name, found.get("metadata")))
    destination = ".".join((*path, "metadata", "annotations"))
    return [
        f"{_key(key)} on {where} is ignored; move it to {destination}"
        for where, metadata in places
        for key in ((metadata or {}).get("annotations") or {})
        if key.startswith(ANNOTATION_PREFIX) and key not in template_annotations
    ]


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


def _review_operator_template(
    request: AdmissionRequest[Any], pod: Pod, pod_decision: PodDecision
) -> Outcome:
    return pod_decision.review(
        {
            "uid": request["uid"],
            "kind": POD_KIND,
            "operation": "CREATE",
            "namespace": request.get("namespace"),
            "object": pod,
        }
    )


def _operator_template_warnings(
    pods: Outcome, pod: Pod, gpu_resource: str, label: str = ""
) -> list[str]:
    """What the template's Pods will get; `label` names the template when there are several."""
    annotations = (pod["metadata"] or {}).get("annotations") or {}
    warnings = list(pods.response.get("warnings", ()))
    if pods.decision == "skipped":
        warnings += _skipped(annotations, pods.reason)
    elif not gpu_containers(pod["spec"] or {}, gpu_resource):
        return [
            *(f"{label}: {warning}" if label else warning for warning in warnings),
            f"{label or 'the Pod template'} is opted in but no container asks for "
            f"{clip(gpu_resource, 40)}; there is nothing to slice",
        ]
    return [f"{label}: {warning}" if label else warning for warning in warnings]


# Operators' resources: several templates, found by the walker -----------------------------


class OperatorTemplate(NamedTuple):
    """One template of an operator's resource, as a Pod, or why it cannot be read as one."""

    site: TemplateSite
    pod: Pod | None
    problem: str | None = None


def operator_templates(
    operator: WorkloadKind, resource: Mapping[str, Any]
) -> list[OperatorTemplate]:
    """Each Pod template of `resource`, read as the Pod decision reads a Pod."""
    own = (
        ((resource.get("metadata") or {}).get("annotations") or {})
        if (operator.own_annotations_reach_pods)
        else None
    )
    found = []
    for site in templates(operator, resource):
        try:
            template = msgspec.convert(
                template_of(site, own), PodTemplateSpec, from_attributes=False
            )
        except msgspec.ValidationError as error:
            detail = str(error).replace("`$.", "`", 1)
            found.append(OperatorTemplate(site, None, f"unreadable Pod template: {detail}"))
            continue
        found.append(OperatorTemplate(site, templated_pod(template)))
    return found


def _check_operator_resource(
    request: AdmissionRequest[OperatorResource],
    operator: WorkloadKind,
    pod_decision: PodDecision,
    gpu_resource: str,
) -> WorkloadCheck:
    resource: OperatorResource = request.get("object") or {}
    found = operator_templates(operator, resource)
    opted_in_keys = {
        key
        for template in found
        if template.pod is not None
        for key in ((template.pod["metadata"] or {}).get("annotations") or {})
    }
    warnings = (
        []
        if operator.own_annotations_reach_pods
        else _ignored_on_resource(resource, operator, opted_in_keys)
    )
    if operator.outside_templates and _asks_outside_templates(resource, found, gpu_resource):
        warnings.append(operator.outside_templates)
    chosen: Outcome | None = None
    for template in found:
        prefix = f"{template.site.label}: " if template.site.label else ""
        if template.pod is None:
            warnings.append(prefix + (template.problem or ""))
            continue
        pods = _review_operator_template(request, template.pod, pod_decision)
        if chosen is None or (pods.decision == "mutated" and chosen.decision != "mutated"):
            chosen = pods
        annotations = (template.pod["metadata"] or {}).get("annotations") or {}
        if not operator.copies_template_annotations and is_opted_in(annotations):
            warnings.append(
                f"{prefix}the {operator.kind} operator does not copy template annotations onto "
                "its Pods; castslice cannot slice them"
            )
            continue
        warnings += _operator_template_warnings(
            pods, template.pod, gpu_resource, template.site.label
        )
    if chosen is None:
        return WorkloadCheck([clip(warning) for warning in warnings], "no Pod template")
    return WorkloadCheck([clip(warning) for warning in warnings], _reason(chosen), chosen)


def _ignored_on_resource(
    resource: OperatorResource, operator: WorkloadKind, template_keys: set[str]
) -> list[str]:
    annotations = (resource.get("metadata") or {}).get("annotations") or {}
    ours = [
        key for key in annotations if key.startswith(ANNOTATION_PREFIX) and key not in template_keys
    ]
    if not ours:
        return []
    if not operator.templates:
        return [
            f"{_key(key)} on the {operator.kind} is ignored; it never reaches the Pods"
            for key in ours
        ]
    return [
        f"{_key(key)} on the {operator.kind} is ignored; move it to its Pod templates' annotations"
        for key in ours
    ]


def _asks_outside_templates(
    resource: Mapping[str, Any], found: list[OperatorTemplate], gpu_resource: str
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


def template_of(site: TemplateSite, own_annotations: Mapping[str, str] | None) -> dict[str, Any]:
    """The PodTemplateSpec (metadata, spec) the operator creates the site's Pods from."""
    node = site.node
    shape = site.location.shape
    if shape == "template":
        return {"metadata": node.get("metadata"), "spec": node.get("spec")}
    if shape == "pod-spec":
        annotations = node.get("annotations")
        if own_annotations and (annotations is None or isinstance(annotations, Mapping)):
            annotations = {**own_annotations, **(annotations or {})}
        metadata = {"annotations": annotations, "labels": node.get("labels")}
        spec = {key: value for key, value in node.items() if key not in ("annotations", "labels")}
        return {"metadata": _without_none(metadata), "spec": spec}
    container = node.get("container") if "container" in node else node.get("script")
    spec = {"containers": [container], **_picked(node, ("nodeSelector", "affinity"))}
    return {"metadata": node.get("metadata"), "spec": spec}


def write_back(node: dict[str, Any], site: TemplateSite, pod: Mapping[str, Any]) -> None:
    """Put `pod` (a Pod as CastSlice leaves one made from `site`) back into the template."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    shape = site.location.shape
    if shape == "template":
        if "metadata" not in node:
            items = list(node.items())
            node.clear()
            node.update({"metadata": None, **dict(items)})
        node["metadata"], node["spec"] = metadata, spec
        return
    if shape == "pod-spec":
        added = {
            key: value
            for key, value in (metadata.get("annotations") or {}).items()
            if (node.get("annotations") or {}).get(key) != value
        }
        node.update(spec)
        if added:
            node["annotations"] = {**(node.get("annotations") or {}), **added}
        return
    node["metadata"] = metadata
    node["container" if "container" in node else "script"] = spec["containers"][0]
    node.update(_picked(spec, ("nodeSelector", "affinity")))


def node_at(resource: dict[str, Any], site: TemplateSite) -> dict[str, Any]:
    """The template at `site` of `resource` (a copy being changed)."""
    found: Any = resource
    for step in site.steps:
        found = found[step]
    return found


def _picked(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: mapping[key] for key in keys if key in mapping}


def _without_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}
