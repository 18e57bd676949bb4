"""Workload warnings: what a Deployment, Job, CronJob… will do to its Pods, told at apply time.

Warnings on the Pods a controller creates go to the controller, not to the
person who applied the workload. So workloads are reviewed too, and never
patched (GitOps tools would see drift): the Pod their template would produce
goes through the same Pod decision as every Pod, its warnings are passed on,
and a few about the workload itself are added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from .kube import WORKLOAD_TEMPLATES, ObjectMeta, Pod, PodTemplateSpec, Workload
from .operator_kinds import (
    OperatorKind,
    OperatorResource,
    TemplateSite,
    operator_kind,
    template_of,
    templates,
)
from .patch import gpu_containers
from .review import POD_KIND, AdmissionRequest, GroupVersionKind
from .slices import OPTIMIZE, SLICE_RATIO, WORKLOAD_TYPE, clip, is_opted_in, shorten

if TYPE_CHECKING:
    # Only a type here: admission imports this module to route workload reviews.
    from .admission import Outcome

PREFIX = "castops.io/"
_KNOWN_KEYS = frozenset((OPTIMIZE, WORKLOAD_TYPE, SLICE_RATIO))


class WorkloadCheck(NamedTuple):
    """The warnings for one workload review and what its Pods will get."""

    warnings: list[str]
    # Bounded: it becomes a metrics label.
    reason: str
    # The decision on the Pod the template would produce; None when there is none.
    pods: Outcome | None = None


def operator_kind_of(kind: GroupVersionKind | None) -> OperatorKind | None:
    """The operator's kind `kind` is (PyTorchJob, RayCluster…), or None."""
    if kind is None:
        return None
    return operator_kind(kind.get("group"), kind.get("version"), kind.get("kind"))


def template_path(kind: GroupVersionKind | None) -> tuple[str, ...] | None:
    """Where the Pod template of `kind` sits, or None when `kind` is not a workload."""
    if kind is None:
        return None
    return WORKLOAD_TEMPLATES.get((kind.get("group"), kind.get("version"), kind.get("kind")))


def pod_template(workload: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The Pod template at `path` in `workload` (typed or plain data), or None when absent."""
    found: Any = workload
    for key in path:
        found = found.get(key) if isinstance(found, Mapping) else None
    return found if isinstance(found, Mapping) else None


def templated_pod(template: Mapping[str, Any]) -> Pod:
    """The Pod a controller would create from `template`, before admission."""
    # Always with metadata: a created Pod has some, and the patch adds to it.
    return {"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}}


def check_workload(
    request: AdmissionRequest[Workload],
    review_pod: Callable[[AdmissionRequest[Pod]], Outcome],
    gpu_resource: str,
) -> WorkloadCheck:
    """Warn about what stops the workload's Pods from being sliced as its annotations ask."""
    if request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
        return WorkloadCheck([], "not a CREATE or UPDATE")
    kind = request.get("kind")
    operator = operator_kind_of(kind)
    if operator is not None:
        return _check_operator_resource(request, operator, review_pod, gpu_resource)
    path = template_path(kind)
    workload: Workload = request.get("object") or {}
    template = pod_template(workload, path) if path else None
    if path is None or template is None:
        return WorkloadCheck([], "no Pod template")

    pod = templated_pod(template)
    annotations = (pod["metadata"] or {}).get("annotations") or {}
    warnings = _misplaced(workload, (kind or {}).get("kind", ""), path, annotations)
    pods = _review_template(request, pod, review_pod)
    warnings += _template_warnings(pods, pod, gpu_resource)
    return WorkloadCheck([clip(warning) for warning in warnings], _reason(pods), pods)


def _review_template(
    request: AdmissionRequest[Any], pod: Pod, review_pod: Callable[[AdmissionRequest[Pod]], Outcome]
) -> Outcome:
    return review_pod(
        {
            "uid": request["uid"],
            "kind": POD_KIND,
            "operation": "CREATE",
            "namespace": request.get("namespace"),
            "object": pod,
        }
    )


def _template_warnings(pods: Outcome, pod: Pod, gpu_resource: str, label: str = "") -> list[str]:
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


def _misplaced(
    workload: Workload,
    kind: str,
    path: tuple[str, ...],
    template_annotations: Mapping[str, str],
) -> list[str]:
    # Annotations on the workload (or on a CronJob's jobTemplate) never reach its Pods.
    places: list[tuple[str, ObjectMeta | None]] = [(f"the {kind}", workload.get("metadata"))]
    if len(path) > 2:
        job_template = (workload.get("spec") or {}).get("jobTemplate") or {}
        places.append(("the jobTemplate", job_template.get("metadata")))
    destination = ".".join((*path, "metadata", "annotations"))
    return [
        f"{_key(key)} on {where} is ignored; move it to {destination}"
        for where, metadata in places
        for key in ((metadata or {}).get("annotations") or {})
        if key.startswith(PREFIX) and key not in template_annotations
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
    ours = [key for key in annotations if key.startswith(PREFIX)]
    if not ours:
        return []
    return [f'{_key(ours[0])} is set but {OPTIMIZE} is not "true"; the Pods are not sliced']


def _key(key: str) -> str:
    return key if key in _KNOWN_KEYS else shorten(key)


def _reason(pods: Outcome) -> str:
    return f"pod template: {pods.reason or pods.decision}"


# Operators' resources: several templates, found by the walker -----------------------------


class OperatorTemplate(NamedTuple):
    """One template of an operator's resource, as a Pod, or why it cannot be read as one."""

    site: TemplateSite
    pod: Pod | None
    problem: str | None = None


def operator_templates(
    operator: OperatorKind, resource: Mapping[str, Any]
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
    operator: OperatorKind,
    review_pod: Callable[[AdmissionRequest[Pod]], Outcome],
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
        pods = _review_template(request, template.pod, review_pod)
        if chosen is None or (pods.decision == "mutated" and chosen.decision != "mutated"):
            chosen = pods
        annotations = (template.pod["metadata"] or {}).get("annotations") or {}
        if not operator.copies_template_annotations and is_opted_in(annotations):
            warnings.append(
                f"{prefix}the {operator.kind} operator does not copy template annotations onto "
                "its Pods; castslice cannot slice them"
            )
            continue
        warnings += _template_warnings(pods, template.pod, gpu_resource, template.site.label)
    if chosen is None:
        return WorkloadCheck([clip(warning) for warning in warnings], "no Pod template")
    return WorkloadCheck([clip(warning) for warning in warnings], _reason(chosen), chosen)


def _ignored_on_resource(
    resource: OperatorResource, operator: OperatorKind, template_keys: set[str]
) -> list[str]:
    annotations = (resource.get("metadata") or {}).get("annotations") or {}
    ours = [key for key in annotations if key.startswith(PREFIX) and key not in template_keys]
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
