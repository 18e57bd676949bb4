"""CastSlice's contract as data: the annotations it reads and writes, the workloads whose Pod
templates it reviews, which namespaces are never touched, and the decision record.

The webhook, the registration's CEL, `castslice preview` and policy mode all read
these definitions; none of them spells a key, a kind or a template path itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import msgspec

# Annotations a user sets on a Pod (or a Pod template).
ANNOTATION_PREFIX = "castops.io/"
OPTIMIZE = "castops.io/optimize"
WORKLOAD_TYPE = "castops.io/workload-type"
SLICE_RATIO = "castops.io/slice-ratio"
USER_ANNOTATIONS = (OPTIMIZE, WORKLOAD_TYPE, SLICE_RATIO)
# What CastSlice writes on a Pod it changed: the decision record.
APPLIED = "castslice.castops.io/applied"
# The policy a registration was generated from, as JSON: what the function must run with.
POLICY_ANNOTATION = "castslice.castops.io/policy"
# The kubelet owns mirror Pods; the API server refuses any change to them.
MIRROR = "kubernetes.io/config.mirror"

# Never sent to CastSlice, whatever the policy says: the cluster's own machinery.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease")
# Where CastSlice itself runs in a cluster, unless told otherwise; also never sent.
DEFAULT_NAMESPACE = "castslice"

# Every kind of container a Pod has; a GPU in any of them is rewritten.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# Template paths are dotted field names, with two wildcards:
#   `name.*`        every value of the map `name`, labelled by its key
#                   (`spec.pytorchReplicaSpecs.*.template`: Master, Worker);
#   `name[field]`   every item of the list `name`, labelled by the item's `field`,
#                   or by its index when that is unset
#                   (`spec.workerGroupSpecs[groupName].template`).
EACH_VALUE = "*"
_LIST_SEGMENT = re.compile(r"(?P<field>[^.\[\]]+)\[(?P<key>[^.\[\]]+)\]")

# template: a PodTemplateSpec (metadata + spec), as controllers and most operators keep it.
# pod-spec: a PodSpec with `annotations` and `labels` beside its containers (KServe's components).
# container: a step with `metadata`, one `container` or `script`, `nodeSelector`... (Argo).
Shape = Literal["template", "pod-spec", "container"]
Scope = Literal["Namespaced", "Cluster"]


@dataclass(frozen=True)
class TemplateLocation:
    """Where Pod templates sit in a workload, and how warnings name their Pods."""

    path: str
    # What warnings call the Pods of this template; `{}` stands for the wildcards' labels.
    label: str = ""
    shape: Shape = "template"
    # (how a warning names it, its path) for each object between the workload and the
    # template whose own annotations never reach the Pods.
    between: tuple[tuple[str, str], ...] = ()

    @property
    def has_wildcards(self) -> bool:
        return EACH_VALUE in self.path.split(".") or "[" in self.path

    @property
    def annotations_path(self) -> str:
        """Where the annotations of the template's Pods are written in the workload."""
        return self.path + (".annotations" if self.shape == "pod-spec" else ".metadata.annotations")


@dataclass(frozen=True)
class WorkloadKind:
    group: str
    versions: tuple[str, ...]
    kind: str
    # The plural the registration's rules name.
    resource: str
    templates: tuple[TemplateLocation, ...]
    scope: Scope = "Namespaced"
    # An operator's custom resource: its CRD may not be installed, and its operator (not a
    # Kubernetes controller) decides what of its templates reaches the Pods.
    custom_resource: bool = False
    # The operator copies each template's annotations onto the Pods it creates from it.
    copies_template_annotations: bool = True
    # The operator also puts the resource's own annotations on its Pods (KServe does).
    own_annotations_reach_pods: bool = False
    # Said when the resource asks for GPUs outside any Pod template, where CastSlice cannot
    # see or slice them.
    outside_templates: str | None = None


def _kubernetes(group: str, kind: str, resource: str, path: str = "spec.template") -> WorkloadKind:
    between = (("the jobTemplate", "spec.jobTemplate"),) if kind == "CronJob" else ()
    return WorkloadKind(group, ("v1",), kind, resource, (TemplateLocation(path, between=between),))


def _operator(
    group: str,
    versions: tuple[str, ...],
    kind: str,
    resource: str,
    *templates: TemplateLocation,
    **facts: Any,
) -> WorkloadKind:
    return WorkloadKind(group, versions, kind, resource, templates, custom_resource=True, **facts)


def _replica_specs(field: str) -> TemplateLocation:
    return TemplateLocation(f"spec.{field}.*.template", "{}")


def _ray_cluster(prefix: str) -> tuple[TemplateLocation, ...]:
    return (
        TemplateLocation(f"{prefix}.headGroupSpec.template", "headGroupSpec"),
        TemplateLocation(f"{prefix}.workerGroupSpecs[groupName].template", "workerGroupSpecs[{}]"),
    )


_KUBEFLOW = "kubeflow.org"
_TRAINER = "trainer.kubeflow.org"
_RUNTIME_JOBS = TemplateLocation(
    "spec.template.spec.replicatedJobs[name].template.spec.template", "replicatedJobs[{}]"
)
_KSERVE_COMPONENTS = tuple(
    TemplateLocation(f"spec.{component}", component, "pod-spec")
    for component in ("predictor", "transformer", "explainer")
)
_ARGO_STEPS = TemplateLocation("spec.templates[name]", "templates[{}]", "container")

# Every kind whose objects create Pods from templates: Kubernetes' own first (the order of the
# registration's rules and matchConditions), then the operators' custom resources.
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    _kubernetes("apps", "Deployment", "deployments"),
    _kubernetes("apps", "StatefulSet", "statefulsets"),
    _kubernetes("apps", "DaemonSet", "daemonsets"),
    _kubernetes("apps", "ReplicaSet", "replicasets"),
    _kubernetes("batch", "Job", "jobs"),
    _kubernetes("batch", "CronJob", "cronjobs", "spec.jobTemplate.spec.template"),
    # Kubeflow's training operator (v1) and MPI operator (v2beta1).
    _operator(
        _KUBEFLOW, ("v1",), "PyTorchJob", "pytorchjobs", _replica_specs("pytorchReplicaSpecs")
    ),
    _operator(_KUBEFLOW, ("v1",), "TFJob", "tfjobs", _replica_specs("tfReplicaSpecs")),
    _operator(_KUBEFLOW, ("v1", "v2beta1"), "MPIJob", "mpijobs", _replica_specs("mpiReplicaSpecs")),
    _operator(_KUBEFLOW, ("v1",), "PaddleJob", "paddlejobs", _replica_specs("paddleReplicaSpecs")),
    _operator(_KUBEFLOW, ("v1",), "XGBoostJob", "xgboostjobs", _replica_specs("xgbReplicaSpecs")),
    _operator(_KUBEFLOW, ("v1",), "JAXJob", "jaxjobs", _replica_specs("jaxReplicaSpecs")),
    _operator(_KUBEFLOW, ("v1",), "MXJob", "mxjobs", _replica_specs("mxReplicaSpecs")),
    # Kubeflow Trainer (v2): the runtimes hold JobSet templates; a TrainJob names a runtime.
    _operator(_TRAINER, ("v1alpha1",), "TrainingRuntime", "trainingruntimes", _RUNTIME_JOBS),
    _operator(
        _TRAINER,
        ("v1alpha1",),
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        _RUNTIME_JOBS,
        scope="Cluster",
    ),
    _operator(
        _TRAINER,
        ("v1alpha1",),
        "TrainJob",
        "trainjobs",
        copies_template_annotations=False,
        outside_templates=(
            "a TrainJob has no Pod template: its Pods come from the TrainingRuntime it names; "
            "opt in that runtime's templates"
        ),
    ),
    # KubeRay.
    _operator("ray.io", ("v1",), "RayCluster", "rayclusters", *_ray_cluster("spec")),
    _operator(
        "ray.io",
        ("v1",),
        "RayJob",
        "rayjobs",
        *_ray_cluster("spec.rayClusterSpec"),
        TemplateLocation("spec.submitterPodTemplate", "submitterPodTemplate"),
    ),
    _operator(
        "ray.io", ("v1",), "RayService", "rayservices", *_ray_cluster("spec.rayClusterConfig")
    ),
    # Kubernetes SIGs.
    _operator(
        "leaderworkerset.x-k8s.io",
        ("v1",),
        "LeaderWorkerSet",
        "leaderworkersets",
        TemplateLocation("spec.leaderWorkerTemplate.leaderTemplate", "leaderTemplate"),
        TemplateLocation("spec.leaderWorkerTemplate.workerTemplate", "workerTemplate"),
    ),
    _operator(
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "JobSet",
        "jobsets",
        TemplateLocation("spec.replicatedJobs[name].template.spec.template", "replicatedJobs[{}]"),
    ),
    # Volcano.
    _operator(
        "batch.volcano.sh",
        ("v1alpha1",),
        "Job",
        "jobs",
        TemplateLocation("spec.tasks[name].template", "tasks[{}]"),
    ),
    # KServe: each component is a PodSpec whose `annotations` the controller puts on its Pods,
    # as it does the InferenceService's own annotations.
    _operator(
        "serving.kserve.io",
        ("v1beta1",),
        "InferenceService",
        "inferenceservices",
        *_KSERVE_COMPONENTS,
        own_annotations_reach_pods=True,
        outside_templates=(
            "GPUs in spec.predictor.model go to a container KServe adds; castslice slices it "
            "at admission but cannot preview it"
        ),
    ),
    # Knative Serving: the revision template's annotations are copied to the Pods.
    _operator(
        "serving.knative.dev", ("v1",), "Service", "services", TemplateLocation("spec.template")
    ),
    # Argo Workflows: each step's `metadata` is copied onto the Pod that runs it.
    _operator("argoproj.io", ("v1alpha1",), "Workflow", "workflows", _ARGO_STEPS),
    _operator("argoproj.io", ("v1alpha1",), "WorkflowTemplate", "workflowtemplates", _ARGO_STEPS),
    _operator(
        "argoproj.io",
        ("v1alpha1",),
        "ClusterWorkflowTemplate",
        "clusterworkflowtemplates",
        _ARGO_STEPS,
        scope="Cluster",
    ),
    _operator(
        "argoproj.io",
        ("v1alpha1",),
        "CronWorkflow",
        "cronworkflows",
        TemplateLocation("spec.workflowSpec.templates[name]", "templates[{}]", "container"),
    ),
)
WORKLOADS: dict[tuple[str, str, str], WorkloadKind] = {
    (kind.group, version, kind.kind): kind for kind in WORKLOAD_KINDS for version in kind.versions
}
WORKLOAD_KIND_NAMES = frozenset(kind.kind for kind in WORKLOAD_KINDS)


def workload_kind(group: str | None, version: str | None, kind: str | None) -> WorkloadKind | None:
    return WORKLOADS.get((group or "", version or "", kind or ""))


# The template walker ----------------------------------------------------------------------

Step = str | int


class TemplateSite(NamedTuple):
    """One Pod template found in a workload."""

    location: TemplateLocation
    # Keys and list indexes from the object's root to the template.
    steps: tuple[Step, ...]
    # What warnings call its Pods: "Worker", "workerGroupSpecs[gpu-group]"; "" for the only one.
    label: str
    node: Mapping[str, Any]

    @property
    def path(self) -> tuple[str, ...]:
        """The template's concrete path, list indexes as text."""
        return tuple(str(step) for step in self.steps)

    @property
    def where(self) -> str:
        """The template's place in the manifest, for messages."""
        return ".".join(str(step) if isinstance(step, str) else f"[{step}]" for step in self.steps)


def templates(kind: WorkloadKind, workload: Mapping[str, Any]) -> list[TemplateSite]:
    """Every Pod template of `workload`, in the order of the table and of the manifest."""
    found: list[TemplateSite] = []
    for location in kind.templates:
        for site in sites_at(workload, location):
            if location.shape == "container" and not _runs_a_container(site.node):
                continue  # an Argo steps/dag template: it creates no Pod of its own
            found.append(site)
    return found


def sites_at(workload: Mapping[str, Any], location: TemplateLocation) -> list[TemplateSite]:
    """Every object at `location`'s path in `workload`, whatever it holds."""
    return [
        TemplateSite(
            location,
            steps,
            location.label.replace("{}", "/".join(labels)) if location.label else "",
            node,
        )
        for steps, labels, node in _walk(workload, location.path.split("."), (), ())
    ]


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
    if rest and rest[0] == EACH_VALUE:
        children = value.get(segment)
        if isinstance(children, Mapping):
            for key, child in children.items():
                yield from _walk(child, rest[1:], (*steps, segment, str(key)), (*labels, str(key)))
        return
    listed = _LIST_SEGMENT.fullmatch(segment)
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


def list_segment(segment: str) -> str | None:
    """The list's field name when `segment` is `name[field]`, else None."""
    listed = _LIST_SEGMENT.fullmatch(segment)
    return listed["field"] if listed else None


class DecisionRecord(msgspec.Struct, frozen=True):
    """What CastSlice did to a Pod, written on it as APPLIED; a later review leaves it alone.

    The encoding is canonical (msgspec, fields in this order, no spaces), so policy mode's
    CEL writes the same text character for character.
    """

    slices: int
    source: str
    backend: str
    # Container name -> the GPU quantity it asked for before.
    original: dict[str, str]

    def encode(self) -> str:
        return _record_encoder.encode(self).decode()

    @classmethod
    def parse(cls, text: str) -> DecisionRecord | None:
        """The record in `text`, or None when it is not one (a hand-written or damaged value)."""
        try:
            return _record_decoder.decode(text)
        except msgspec.MsgspecError:
            return None


_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(DecisionRecord)


def json_string(text: str) -> str:
    """`text` as the decision record's encoding writes a string."""
    return _record_encoder.encode(text).decode()
