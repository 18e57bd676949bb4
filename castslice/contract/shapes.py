"""The shapes a Pod template takes inside a workload, one class each.

A shape knows three things about an object of its kind: the Pod its operator creates
from it (containers named as the operator names them), how to write a Pod as CastSlice
leaves it back into the object (what `castslice preview` shows), and where the Pod's
containers come from when the object does not hold them. The workload table names a
shape for each template location; a new shape is one class here.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple


class TemplatePod(NamedTuple):
    """The Pod an operator creates from a template: its `metadata` and `spec`."""

    template: dict[str, Any]
    # Where containers the object does not hold come from (a runtime, a ServingRuntime),
    # when the Pod gets some: CastSlice slices them at admission but cannot preview them.
    unseen: str | None = None


class TemplateShape(ABC):
    """One way a workload holds the Pods its operator creates."""

    # How docs/operators.md names the shape.
    name: ClassVar[str]
    # Below the template, where the annotations of its Pods are written.
    annotations_fields: ClassVar[tuple[str, ...]] = ("metadata", "annotations")

    def creates_a_pod(self, node: Mapping[str, Any]) -> bool:
        """Whether the object at a template path creates a Pod at all."""
        return True

    def annotations(self, node: Mapping[str, Any]) -> Any:
        """The annotations of the template's Pods, as written in the object (any type)."""
        holder: Any = node
        for field in self.annotations_fields:
            holder = holder.get(field) if isinstance(holder, Mapping) else None
        return holder

    @abstractmethod
    def pod(
        self, node: Mapping[str, Any], own_annotations: Mapping[str, str] | None
    ) -> TemplatePod:
        """The Pod the operator creates from `node`; `own_annotations` are the resource's own
        when its operator puts them on its Pods too."""

    @abstractmethod
    def write_back(
        self, node: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> str | None:
        """Write `after` (the Pod `before` as CastSlice leaves it) into `node`; None when
        done, else why the object has no place for the change (and `node` is unchanged)."""


def _metadata_written(node: dict[str, Any], after: Mapping[str, Any]) -> None:
    if "metadata" not in node:
        # `metadata` first, as manifests write it.
        items = list(node.items())
        node.clear()
        node.update({"metadata": None, **dict(items)})
    node["metadata"] = after.get("metadata")


class PodTemplate(TemplateShape):
    """A PodTemplateSpec (`metadata`, `spec`), as Kubernetes' controllers and most operators
    keep it."""

    name = "Pod template"

    def pod(
        self, node: Mapping[str, Any], own_annotations: Mapping[str, str] | None
    ) -> TemplatePod:
        return TemplatePod({"metadata": node.get("metadata"), "spec": node.get("spec")})

    def write_back(
        self, node: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> str | None:
        _metadata_written(node, after)
        node["spec"] = after.get("spec")
        return None


# KServe (kserve/kserve, pkg/apis/serving/v1beta1/predictor.go and explainer.go at
# v0.20.0-rc0-104-gaaac4e294): a component's implementation is a container spec beside the
# PodSpec. The defaulter (inference_service_defaults.go, setPredictorModelDefaults) turns
# each framework field into `model`; the predictor reconciler (controller/v1beta1/
# inferenceservice/components/predictor.go, buildPodSpec) merges `model` with the
# ServingRuntime's container into the Pod's first container, named
# constants.InferenceServiceContainerName, followed by the component's own `containers`.
# The explainer's `art` replaces its first container (components/explainer.go).
KSERVE_CONTAINER = "kserve-container"
KSERVE_PREDICTOR_IMPLEMENTATIONS = (
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
_KSERVE_REPLACES_FIRST = ("art",)
# Fields of an implementation (PredictorExtensionSpec, ModelSpec, ARTExplainerSpec) that are
# not the container's.
_KSERVE_EXTENSION_FIELDS = frozenset(
    (
        "storageUri",
        "storageUris",
        "runtimeVersion",
        "protocolVersion",
        "storage",
        "modelFormat",
        "runtime",
        "type",
        "config",
    )
)
# The component's fields that are neither the PodSpec's nor the Pod's metadata.
_KSERVE_COMPONENT_FIELDS = frozenset(
    (
        "annotations",
        "labels",
        "name",
        "workerSpec",
        "storageUris",
        "storageContainerName",
        *KSERVE_PREDICTOR_IMPLEMENTATIONS,
        *_KSERVE_REPLACES_FIRST,
    )
)


class KServeComponent(TemplateShape):
    """A KServe component (`predictor`, `transformer`, `explainer`): a PodSpec with the Pods'
    `annotations` and `labels` beside it, and maybe an implementation (`model`, a framework,
    `art`) that becomes the Pod's `kserve-container`."""

    name = "KServe component"
    annotations_fields = ("annotations",)

    def pod(
        self, node: Mapping[str, Any], own_annotations: Mapping[str, str] | None
    ) -> TemplatePod:
        annotations = node.get("annotations")
        if own_annotations and (annotations is None or isinstance(annotations, Mapping)):
            annotations = {**own_annotations, **(annotations or {})}
        metadata = {
            key: value
            for key, value in (("annotations", annotations), ("labels", node.get("labels")))
            if value is not None
        }
        spec = {key: value for key, value in node.items() if key not in _KSERVE_COMPONENT_FIELDS}
        field, implementation = _kserve_implementation(node)
        if implementation is None:
            return TemplatePod({"metadata": metadata, "spec": spec})
        container = {
            **{k: v for k, v in implementation.items() if k not in _KSERVE_EXTENSION_FIELDS},
            "name": KSERVE_CONTAINER,
        }
        own = list(node.get("containers") or ())
        if field in _KSERVE_REPLACES_FIRST:
            own = own[1:]
        spec["containers"] = [container, *own]
        unseen = None
        if field == "model" or field in KSERVE_PREDICTOR_IMPLEMENTATIONS:
            unseen = "the ServingRuntime KServe merges into kserve-container"
        return TemplatePod({"metadata": metadata, "spec": spec}, unseen)

    def write_back(
        self, node: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> str | None:
        before_spec, after_spec = before.get("spec") or {}, after.get("spec") or {}
        field, implementation = _kserve_implementation(node)
        containers = list(after_spec.get("containers") or ())
        if implementation is not None and field is not None:
            built, *containers = containers
            _changes_written(node[field], before_spec["containers"][0], built, ("name",))
            if field in _KSERVE_REPLACES_FIRST and node.get("containers"):
                containers = [node["containers"][0], *containers]
        for key, value in after_spec.items():
            if key == "containers":
                if containers or "containers" in node:
                    node["containers"] = containers
            elif before_spec.get(key) != value:
                node[key] = value
        # Only what CastSlice wrote: the resource's own annotations stay where they are.
        had = (before.get("metadata") or {}).get("annotations") or {}
        added = {
            key: value
            for key, value in ((after.get("metadata") or {}).get("annotations") or {}).items()
            if had.get(key) != value
        }
        if added:
            node["annotations"] = {**(node.get("annotations") or {}), **added}
        return None


def _kserve_implementation(node: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    for field in (*KSERVE_PREDICTOR_IMPLEMENTATIONS, *_KSERVE_REPLACES_FIRST):
        value = node.get(field)
        if isinstance(value, dict):
            return field, value
    return None, None


# Argo Workflows (argoproj/argo-workflows at v4.1.0-rc2-80-gf016ad89e):
# workflow/controller/workflowpod.go names a step's `container` or `script` container
# common.MainContainerName ("main"), and a `containerSet`'s containers by their own names
# ("main" when unnamed); addSidecars appends `sidecars` to the Pod's containers and
# addInitContainers puts `initContainers` after its own "init". A template has its own
# `metadata`, `nodeSelector`, `affinity` and `tolerations`
# (pkg/apis/workflow/v1alpha1/workflow_types.go), and no `resourceClaims`.
ARGO_MAIN_CONTAINER = "main"
_ARGO_SPEC_FIELDS = ("nodeSelector", "affinity", "tolerations")


class ArgoStep(TemplateShape):
    """An Argo template that runs a Pod: `container`, `script` or `containerSet`, with
    `sidecars`, `initContainers` and its own `metadata`; a steps or dag template runs none."""

    name = "Argo step"

    def creates_a_pod(self, node: Mapping[str, Any]) -> bool:
        return _argo_main(node) is not None

    def pod(
        self, node: Mapping[str, Any], own_annotations: Mapping[str, str] | None
    ) -> TemplatePod:
        main = _argo_main(node)
        assert main is not None
        field, value = main
        if field == "containerSet":
            containers = [
                {**item, "name": item.get("name") or ARGO_MAIN_CONTAINER}
                if isinstance(item, Mapping)
                else item
                for item in value.get("containers") or ()
            ]
        else:
            containers = [{**value, "name": ARGO_MAIN_CONTAINER}]
        spec: dict[str, Any] = {"containers": [*containers, *(node.get("sidecars") or ())]}
        if node.get("initContainers") is not None:
            spec["initContainers"] = node["initContainers"]
        spec.update({key: node[key] for key in _ARGO_SPEC_FIELDS if key in node})
        return TemplatePod({"metadata": node.get("metadata"), "spec": spec})

    def write_back(
        self, node: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> str | None:
        before_spec, after_spec = before.get("spec") or {}, after.get("spec") or {}
        homeless = sorted(
            key
            for key in {*before_spec, *after_spec}
            if key not in ("containers", "initContainers", *_ARGO_SPEC_FIELDS)
            and before_spec.get(key) != after_spec.get(key)
        )
        if homeless:
            return f"an Argo template has no {' or '.join(homeless)} field for what the Pod gets"
        main = _argo_main(node)
        assert main is not None
        field, value = main
        mains = 1 if field != "containerSet" else len(value.get("containers") or ())
        before_containers, after_containers = before_spec["containers"], after_spec["containers"]
        if field == "containerSet":
            for index in range(mains):
                keep = () if value["containers"][index].get("name") else ("name",)
                _changes_written(
                    value["containers"][index],
                    before_containers[index],
                    after_containers[index],
                    keep,
                )
        else:
            _changes_written(node[field], before_containers[0], after_containers[0], ("name",))
        if node.get("sidecars"):
            node["sidecars"] = after_containers[mains:]
        if "initContainers" in after_spec:
            node["initContainers"] = after_spec["initContainers"]
        for key in _ARGO_SPEC_FIELDS:
            if key in after_spec:
                node[key] = after_spec[key]
        _metadata_written(node, after)
        return None


def _argo_main(node: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for field in ("container", "script", "containerSet"):
        value = node.get(field)
        if isinstance(value, dict):
            return field, value
    return None


# Kubeflow Trainer (kubeflow/trainer, pkg/apis/trainer/v1alpha1/trainjob_types.go): a TrainJob
# names a runtime, and may patch the metadata of the Pods the runtime's templates create:
# `spec.podTemplateOverrides[].metadata` in v2.1, `spec.runtimePatches[].trainingRuntimeSpec.
# template.spec.replicatedJobs[].template.spec.template.metadata` from v2.2 (PodTemplatePatch).
# The containers stay the runtime's.
class PodMetadataPatch(TemplateShape):
    """Metadata a resource merges into Pods whose containers come from elsewhere."""

    name = "Pod metadata patch"

    def __init__(self, containers_from: str) -> None:
        self.containers_from = containers_from

    def pod(
        self, node: Mapping[str, Any], own_annotations: Mapping[str, str] | None
    ) -> TemplatePod:
        return TemplatePod({"metadata": node.get("metadata"), "spec": {}}, self.containers_from)

    def write_back(
        self, node: dict[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> str | None:
        if (before.get("spec") or {}) != (after.get("spec") or {}):
            return f"the Pods' containers come from {self.containers_from}"
        _metadata_written(node, after)
        return None


def _changes_written(
    target: dict[str, Any],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    kept: tuple[str, ...],
) -> None:
    """What changed from `before` to `after` written into `target`, but the `kept` fields."""
    for key in {*before, *after} - set(kept):
        if key not in after:
            target.pop(key, None)
        elif before.get(key) != after[key]:
            target[key] = copy.deepcopy(after[key])


POD_TEMPLATE = PodTemplate()
KSERVE_COMPONENT = KServeComponent()
ARGO_STEP = ArgoStep()
