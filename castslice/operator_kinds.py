"""Operators' custom resources that create Pods from templates, and where those templates sit.

A PyTorchJob, a RayCluster or a LeaderWorkerSet keeps one Pod template per
replica type or group, and its operator creates the Pods from them; those Pods
are rewritten at admission like any other. This table lets the workload
warnings and `castslice preview` find every template of such a resource, so
they can say what its Pods will get. It is data only: the decision on each
template is the Pod decision, run on the Pod the template would produce.

Template paths are dotted field names, with two wildcards:
  `name.*`        every value of the map `name`, labelled by its key
                  (`spec.pytorchReplicaSpecs.*.template`: Master, Worker);
  `name[field]`   every item of the list `name`, labelled by the item's `field`,
                  or by its index when that is unset
                  (`spec.workerGroupSpecs[groupName].template`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypedDict

from .kube import ObjectMeta

# template: a PodTemplateSpec (metadata + spec), as most operators keep it.
# pod-spec: a PodSpec with `annotations` and `labels` beside its containers (KServe's components).
# container: a step with `metadata`, one `container` or `script`, `nodeSelector`... (Argo).
Shape = Literal["template", "pod-spec", "container"]


class OperatorResource(TypedDict, total=False):
    """An operator's resource as reviewed: its templates are found, and checked, by the walker."""

    metadata: ObjectMeta | None
    spec: dict[str, Any] | None


@dataclass(frozen=True)
class TemplateLocation:
    path: str
    # What warnings call the Pods of this template; `{}` stands for the wildcards' labels.
    label: str = ""
    shape: Shape = "template"


@dataclass(frozen=True)
class OperatorKind:
    group: str
    versions: tuple[str, ...]
    kind: str
    # The plural the webhook registration's rules name.
    resource: str
    templates: tuple[TemplateLocation, ...]
    # The operator copies each template's annotations onto the Pods it creates from it.
    copies_template_annotations: bool = True
    # The operator also puts the resource's own annotations on its Pods (KServe does).
    own_annotations_reach_pods: bool = False
    # Said when the resource asks for GPUs outside any Pod template, where CastSlice cannot
    # see or slice them.
    outside_templates: str | None = None
    cluster_scoped: bool = False


def _replica_specs(field: str) -> tuple[TemplateLocation, ...]:
    return (TemplateLocation(f"spec.{field}.*.template", "{}"),)


def _ray_cluster(prefix: str) -> tuple[TemplateLocation, ...]:
    return (
        TemplateLocation(f"{prefix}.headGroupSpec.template", "headGroupSpec"),
        TemplateLocation(f"{prefix}.workerGroupSpecs[groupName].template", "workerGroupSpecs[{}]"),
    )


_KUBEFLOW = "kubeflow.org"
_TRAINER = "trainer.kubeflow.org"
_RUNTIME_JOBS = (
    TemplateLocation(
        "spec.template.spec.replicatedJobs[name].template.spec.template", "replicatedJobs[{}]"
    ),
)
_KSERVE_COMPONENTS = tuple(
    TemplateLocation(f"spec.{component}", component, "pod-spec")
    for component in ("predictor", "transformer", "explainer")
)
_ARGO_STEPS = (TemplateLocation("spec.templates[name]", "templates[{}]", "container"),)

OPERATOR_KINDS: tuple[OperatorKind, ...] = (
    # Kubeflow's training operator (v1) and MPI operator (v2beta1).
    OperatorKind(
        _KUBEFLOW, ("v1",), "PyTorchJob", "pytorchjobs", _replica_specs("pytorchReplicaSpecs")
    ),
    OperatorKind(_KUBEFLOW, ("v1",), "TFJob", "tfjobs", _replica_specs("tfReplicaSpecs")),
    OperatorKind(
        _KUBEFLOW, ("v1", "v2beta1"), "MPIJob", "mpijobs", _replica_specs("mpiReplicaSpecs")
    ),
    OperatorKind(
        _KUBEFLOW, ("v1",), "PaddleJob", "paddlejobs", _replica_specs("paddleReplicaSpecs")
    ),
    OperatorKind(
        _KUBEFLOW, ("v1",), "XGBoostJob", "xgboostjobs", _replica_specs("xgbReplicaSpecs")
    ),
    OperatorKind(_KUBEFLOW, ("v1",), "JAXJob", "jaxjobs", _replica_specs("jaxReplicaSpecs")),
    OperatorKind(_KUBEFLOW, ("v1",), "MXJob", "mxjobs", _replica_specs("mxReplicaSpecs")),
    # Kubeflow Trainer (v2): the runtimes hold JobSet templates; a TrainJob names a runtime.
    OperatorKind(_TRAINER, ("v1alpha1",), "TrainingRuntime", "trainingruntimes", _RUNTIME_JOBS),
    OperatorKind(
        _TRAINER,
        ("v1alpha1",),
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        _RUNTIME_JOBS,
        cluster_scoped=True,
    ),
    OperatorKind(
        _TRAINER,
        ("v1alpha1",),
        "TrainJob",
        "trainjobs",
        (),
        copies_template_annotations=False,
        outside_templates=(
            "a TrainJob has no Pod template: its Pods come from the TrainingRuntime it names; "
            "opt in that runtime's templates"
        ),
    ),
    # KubeRay.
    OperatorKind("ray.io", ("v1",), "RayCluster", "rayclusters", _ray_cluster("spec")),
    OperatorKind(
        "ray.io",
        ("v1",),
        "RayJob",
        "rayjobs",
        (
            *_ray_cluster("spec.rayClusterSpec"),
            TemplateLocation("spec.submitterPodTemplate", "submitterPodTemplate"),
        ),
    ),
    OperatorKind(
        "ray.io", ("v1",), "RayService", "rayservices", _ray_cluster("spec.rayClusterConfig")
    ),
    # Kubernetes SIGs.
    OperatorKind(
        "leaderworkerset.x-k8s.io",
        ("v1",),
        "LeaderWorkerSet",
        "leaderworkersets",
        (
            TemplateLocation("spec.leaderWorkerTemplate.leaderTemplate", "leaderTemplate"),
            TemplateLocation("spec.leaderWorkerTemplate.workerTemplate", "workerTemplate"),
        ),
    ),
    OperatorKind(
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "JobSet",
        "jobsets",
        (
            TemplateLocation(
                "spec.replicatedJobs[name].template.spec.template", "replicatedJobs[{}]"
            ),
        ),
    ),
    # Volcano.
    OperatorKind(
        "batch.volcano.sh",
        ("v1alpha1",),
        "Job",
        "jobs",
        (TemplateLocation("spec.tasks[name].template", "tasks[{}]"),),
    ),
    # KServe: each component is a PodSpec whose `annotations` the controller puts on its Pods,
    # as it does the InferenceService's own annotations.
    OperatorKind(
        "serving.kserve.io",
        ("v1beta1",),
        "InferenceService",
        "inferenceservices",
        _KSERVE_COMPONENTS,
        own_annotations_reach_pods=True,
        outside_templates=(
            "GPUs in spec.predictor.model go to a container KServe adds; castslice slices it "
            "at admission but cannot preview it"
        ),
    ),
    # Knative Serving: the revision template's annotations are copied to the Pods.
    OperatorKind(
        "serving.knative.dev",
        ("v1",),
        "Service",
        "services",
        (TemplateLocation("spec.template"),),
    ),
    # Argo Workflows: each step's `metadata` is copied onto the Pod that runs it.
    OperatorKind("argoproj.io", ("v1alpha1",), "Workflow", "workflows", _ARGO_STEPS),
    OperatorKind(
        "argoproj.io", ("v1alpha1",), "WorkflowTemplate", "workflowtemplates", _ARGO_STEPS
    ),
    OperatorKind(
        "argoproj.io",
        ("v1alpha1",),
        "ClusterWorkflowTemplate",
        "clusterworkflowtemplates",
        _ARGO_STEPS,
        cluster_scoped=True,
    ),
    OperatorKind(
        "argoproj.io",
        ("v1alpha1",),
        "CronWorkflow",
        "cronworkflows",
        (TemplateLocation("spec.workflowSpec.templates[name]", "templates[{}]", "container"),),
    ),
)

_BY_KIND: dict[tuple[str, str, str], OperatorKind] = {
    (entry.group, version, entry.kind): entry
    for entry in OPERATOR_KINDS
    for version in entry.versions
}
KIND_NAMES = frozenset(entry.kind for entry in OPERATOR_KINDS)
GROUPS = frozenset(entry.group for entry in OPERATOR_KINDS)


def operator_kind(group: str | None, version: str | None, kind: str | None) -> OperatorKind | None:
    return _BY_KIND.get((group or "", version or "", kind or ""))


# The template walker --------------------------------------------------------------------

_LIST = re.compile(r"(?P<field>[^.\[\]]+)\[(?P<key>[^.\[\]]+)\]")
Step = str | int


class TemplateSite(NamedTuple):
    """One Pod template found in a resource."""

    location: TemplateLocation
    # Keys and list indexes from the object's root to the template.
    steps: tuple[Step, ...]
    # What warnings call its Pods: "Worker", "workerGroupSpecs[gpu-group]"; "" for the only one.
    label: str
    node: Mapping[str, Any]

    @property
    def where(self) -> str:
        """The template's place in the manifest, for messages."""
        return ".".join(str(step) if isinstance(step, str) else f"[{step}]" for step in self.steps)


def templates(entry: OperatorKind, resource: Mapping[str, Any]) -> list[TemplateSite]:
    """Every Pod template of `resource`, in the order of the table and of the manifest."""
    found: list[TemplateSite] = []
    for location in entry.templates:
        for steps, labels, node in _walk(resource, location.path.split("."), (), ()):
            if location.shape == "container" and not _runs_a_container(node):
                continue  # an Argo steps/dag template: it creates no Pod of its own
            label = location.label.replace("{}", "/".join(labels)) if location.label else ""
            found.append(TemplateSite(location, steps, label, node))
    return found


def _walk(
    value: Any, segments: list[str], steps: tuple[Step, ...], labels: tuple[str, ...]
) -> Iterator[tuple[tuple[Step, ...], tuple[str, ...], Mapping[str, Any]]]:
    if not segments:
        if isinstance(value, Mapping):
            yield steps, labels, value
        return
    if not isinstance(value, Mapping):
        return
    segment, rest = segments[0], segments[1:]
    if rest and rest[0] == "*":
        children = value.get(segment)
        if isinstance(children, Mapping):
            for key, child in children.items():
                yield from _walk(child, rest[1:], (*steps, segment, str(key)), (*labels, str(key)))
        return
    listed = _LIST.fullmatch(segment)
    if listed is None:
        yield from _walk(value.get(segment), rest, (*steps, segment), labels)
        return
    items = value.get(listed["field"])
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        name = item.get(listed["key"]) if isinstance(item, Mapping) else None
        label = name if isinstance(name, str) and name else str(index)
        yield from _walk(item, rest, (*steps, listed["field"], index), (*labels, label))


def _runs_a_container(node: Mapping[str, Any]) -> bool:
    return isinstance(node.get("container"), Mapping) or isinstance(node.get("script"), Mapping)


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


def node_at(resource: dict[str, Any], steps: tuple[Step, ...]) -> dict[str, Any]:
    """The template at `steps` of `resource` (a copy being changed)."""
    found: Any = resource
    for step in steps:
        found = found[step]
    return found


def _picked(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: mapping[key] for key in keys if key in mapping}


def _without_none(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}
