"""CastSlice's contract as data: the annotations it reads and writes, the workloads whose Pod
templates it reviews, which namespaces are never touched, and the decision record.

The webhook, the registration's CEL, `castslice preview` and policy mode all read
these definitions; none of them spells a key, a kind or a template path itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import msgspec

from castslice.contract import paths
from castslice.contract.paths import EachValue, Field, Segment
from castslice.contract.shapes import (
    ARGO_STEP,
    KSERVE_COMPONENT,
    POD_TEMPLATE,
    PodMetadataPatch,
    TemplateShape,
)

# Annotations a user sets on a Pod (or a Pod template).
ANNOTATION_PREFIX = "castops.io/"
OPTIMIZE = "castops.io/optimize"
WORKLOAD_TYPE = "castops.io/workload-type"
SLICE_RATIO = "castops.io/slice-ratio"
# The most GPU memory a container may take beyond its share, in slices of a GPU.
GPU_MEMORY_BURST = "castops.io/gpu-memory-burst"
USER_ANNOTATIONS = (OPTIMIZE, WORKLOAD_TYPE, SLICE_RATIO, GPU_MEMORY_BURST)
# What CastSlice writes on a Pod it changed: the decision record.
APPLIED = "castslice.castops.io/applied"
# The policy a registration was generated from, as JSON: what the function must run with.
POLICY_ANNOTATION = "castslice.castops.io/policy"
# The kubelet owns mirror Pods; the API server refuses any change to them.
MIRROR = "kubernetes.io/config.mirror"
# The longest warning CastSlice gives: the API server shows warnings to users as they are,
# and kubectl prints one a line.
MAX_WARNING_LENGTH = 120

# Never sent to CastSlice, whatever the policy says: the cluster's own machinery.
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease")
# Where CastSlice itself runs in a cluster, unless told otherwise; also never sent.
DEFAULT_NAMESPACE = "castslice"

# Every kind of container a Pod has; a GPU in any of them is rewritten.
ContainerList = Literal["initContainers", "containers", "ephemeralContainers"]
CONTAINER_LISTS: tuple[ContainerList, ...] = ("initContainers", "containers", "ephemeralContainers")

Scope = Literal["Namespaced", "Cluster"]


@dataclass(frozen=True)
class TemplateLocation:
    """Where Pod templates sit in a workload, what shape they take, and how warnings name
    their Pods."""

    # In the grammar of castslice/contract/paths.py; refused when the table is built.
    path: str
    # What warnings call the Pods of this template; `{}` stands for the wildcards' labels.
    label: str = ""
    shape: TemplateShape = POD_TEMPLATE
    # (how a warning names it, its path) for each object between the workload and the
    # template whose own annotations never reach the Pods.
    between: tuple[tuple[str, str], ...] = ()
    segments: tuple[Segment, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", paths.parse(self.path))
        for _, between in self.between:
            paths.parse(between)

    @property
    def has_wildcards(self) -> bool:
        return paths.has_wildcards(self.segments)

    @property
    def annotations_segments(self) -> tuple[Segment, ...]:
        """The path of the annotations of the template's Pods in the workload."""
        return (*self.segments, *(Field(name) for name in self.shape.annotations_fields))

    @property
    def annotations_path(self) -> str:
        """Where the annotations of the template's Pods are written in the workload."""
        return ".".join((self.path, *self.shape.annotations_fields))


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
    # Where annotations on the resource itself belong, when not on its Pod templates.
    annotations_belong: str | None = None


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
    TemplateLocation(f"spec.{component}", component, KSERVE_COMPONENT)
    for component in ("predictor", "transformer", "explainer")
)
_ARGO_STEPS = TemplateLocation("spec.templates[name]", "templates[{}]", ARGO_STEP)
_FROM_THE_RUNTIME = PodMetadataPatch("the TrainingRuntime the TrainJob names")

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
        # v2.1's per-job overrides, labelled by index; v2.2's runtime patches, by manager
        # and replicated job.
        TemplateLocation(
            "spec.podTemplateOverrides[]", "podTemplateOverrides[{}]", _FROM_THE_RUNTIME
        ),
        TemplateLocation(
            "spec.runtimePatches[manager].trainingRuntimeSpec.template.spec"
            ".replicatedJobs[name].template.spec.template",
            "runtimePatches[{}]",
            _FROM_THE_RUNTIME,
        ),
        annotations_belong="spec.runtimePatches[]...template.metadata",
        outside_templates=(
            "GPUs in spec.trainer go to the runtime's Pods; opted in there or in runtimePatches, "
            "they are sliced at admission"
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
        TemplateLocation("spec.workflowSpec.templates[name]", "templates[{}]", ARGO_STEP),
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

    def node_in(self, workload: Any) -> Any:
        """The object at this site's place in `workload` (a copy of the walked one)."""
        found = workload
        for step in self.steps:
            found = found[step]
        return found

    @property
    def where(self) -> str:
        """The template's place in the manifest, for messages."""
        return ".".join(str(step) if isinstance(step, str) else f"[{step}]" for step in self.steps)


def templates(kind: WorkloadKind, workload: Mapping[str, Any]) -> list[TemplateSite]:
    """Every Pod template of `workload`, in the order of the table and of the manifest."""
    return [
        site
        for location in kind.templates
        for site in sites_at(workload, location)
        # An Argo steps or dag template creates no Pod of its own.
        if location.shape.creates_a_pod(site.node)
    ]


def sites_at(workload: Mapping[str, Any], location: TemplateLocation) -> list[TemplateSite]:
    """Every object at `location`'s path in `workload`, whatever it holds."""
    return [
        TemplateSite(
            location,
            steps,
            location.label.replace("{}", "/".join(labels)) if location.label else "",
            node,
        )
        for steps, labels, node in _walk(workload, location.segments, (), ())
    ]


def _walk(
    value: Any, segments: tuple[Segment, ...], steps: tuple[Step, ...], labels: tuple[str, ...]
) -> Iterator[tuple[tuple[Step, ...], tuple[str, ...], Mapping[str, Any]]]:
    if not segments:
        if isinstance(value, Mapping):
            yield steps, labels, value
        return
    if not isinstance(value, Mapping):
        return
    segment, rest = segments[0], segments[1:]
    if isinstance(segment, Field):
        yield from _walk(value.get(segment.name), rest, (*steps, segment.name), labels)
        return
    children = value.get(segment.name)
    if isinstance(segment, EachValue):
        if isinstance(children, Mapping):
            for key, child in children.items():
                yield from _walk(child, rest, (*steps, segment.name, str(key)), (*labels, str(key)))
        return
    if not isinstance(children, list):
        return
    for index, item in enumerate(children):
        name = item.get(segment.key) if segment.key and isinstance(item, Mapping) else None
        label = name if isinstance(name, str) and name else str(index)
        yield from _walk(item, rest, (*steps, segment.name, index), (*labels, label))


class DecisionRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """What CastSlice did to a Pod, written on it as APPLIED; a later review leaves it alone.

    The encoding is canonical (msgspec, fields in this order, no spaces), so policy mode's
    CEL writes the same text character for character.
    """

    slices: int
    source: str
    backend: str
    # Container name -> the GPU quantity it asked for before.
    original: dict[str, str]
    # What each GPU container really gets where the share alone does not say it (a MIG
    # instance's compute and memory); left out when None.
    instance: str | None = None
    # The GPU memory each GPU container was limited to, and where that holds; left out when
    # None.
    memory: str | None = None

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
