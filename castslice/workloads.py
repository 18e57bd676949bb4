"""Workload warnings: what a Deployment, Job, CronJob… will do to its Pods, told at apply time.

Warnings on the Pods a controller creates go to the controller, not to the
person who applied the workload. So workloads are reviewed too, and never
patched (GitOps tools would see drift): the Pod their template would produce
goes through the same Pod decision as every Pod, its warnings are passed on,
and a few about the workload itself are added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .contract import (
    ANNOTATION_PREFIX,
    OPTIMIZE,
    USER_ANNOTATIONS,
    TemplateLocation,
    WorkloadKind,
    templates_at,
    workload_kind,
)
from .kube import ObjectMeta, Pod, Workload
from .outcome import Outcome
from .patch import gpu_containers
from .review import POD_KIND, AdmissionRequest, GroupVersionKind
from .slices import clip, is_opted_in, shorten


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
    return [
        (location, path, template)
        for location in kind.templates
        for path, template in templates_at(workload, location)
    ]


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
    gvk = request.get("kind")
    kind = kind_of(gvk)
    workload: Workload = request.get("object") or {}
    templates = pod_templates(workload, kind) if kind else []
    if kind is None or not templates:
        return WorkloadCheck([], "no Pod template")

    warnings: list[str] = []
    first: Outcome | None = None
    for location, path, template in templates:
        found, pods = _check_template(
            request, workload, kind.kind, location, path, template, review_pod, gpu_resource
        )
        if len(templates) > 1:
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
    review_pod: Callable[[AdmissionRequest[Pod]], Outcome],
    gpu_resource: str,
) -> tuple[list[str], Outcome]:
    pod = templated_pod(template)
    annotations = (pod["metadata"] or {}).get("annotations") or {}
    warnings = _misplaced(workload, kind, location, path, annotations)
    pods = review_pod(
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
        found = next((value for _, value in templates_at(workload, TemplateLocation(between))), {})
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
