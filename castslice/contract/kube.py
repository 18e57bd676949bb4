"""What CastSlice reads of Pods, and of the workloads that template them, as plain data.

Fields not listed here are never decoded (see review.decode_review), which
keeps large Pods cheap; the patch addresses fields by path, so nothing unread
is lost.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class ResourceRequirements(TypedDict, total=False):
    requests: dict[str, Any] | None
    limits: dict[str, Any] | None
    # DRA: the Pod's claims this container uses (a Pod with any is left to its owner).
    claims: list[Any] | None


QuantityField = Literal["requests", "limits"]
QUANTITY_FIELDS: tuple[QuantityField, ...] = ("requests", "limits")


class EnvVar(TypedDict, total=False):
    # The name alone: a value (or a secret's reference) is never decoded.
    name: str | None


class Container(TypedDict, total=False):
    name: str | None
    resources: ResourceRequirements | None
    # `Always` on an init container makes it a sidecar, which runs beside the app (DRA).
    restartPolicy: str | None
    # Where a GPU container sets its own GPU memory request and limit, which
    # CASTSLICE_GPU_MEMORY replaces.
    env: list[EnvVar] | None


class PodSpec(TypedDict, total=False):
    initContainers: list[Container] | None
    containers: list[Container] | None
    ephemeralContainers: list[Container] | None
    nodeSelector: dict[str, str] | None
    # Small and rarely set; read only to respect and extend a required node affinity.
    affinity: dict[str, Any] | None
    # DRA: the Pod's own claims, and a node chosen by hand (its claims are never allocated).
    resourceClaims: list[Any] | None
    nodeName: str | None
    # The API server writes DEFAULT_SCHEDULER where the Pod names none, before any webhook.
    schedulerName: str | None


# What the API server defaults spec.schedulerName to (k8s.io/api core/v1 DefaultSchedulerName).
DEFAULT_SCHEDULER = "default-scheduler"


class ObjectMeta(TypedDict, total=False):
    name: str | None
    generateName: str | None
    namespace: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None


class Pod(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: PodSpec | None


class PodTemplateSpec(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: PodSpec | None


class JobSpec(TypedDict, total=False):
    template: PodTemplateSpec | None


class JobTemplateSpec(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: JobSpec | None


class WorkloadSpec(TypedDict, total=False):
    # Deployment, StatefulSet, DaemonSet, ReplicaSet and Job.
    template: PodTemplateSpec | None
    # CronJob.
    jobTemplate: JobTemplateSpec | None


class Workload(TypedDict, total=False):
    """An apps/v1 or batch/v1 object that creates Pods from a template."""

    metadata: ObjectMeta | None
    spec: WorkloadSpec | None


class OperatorResource(TypedDict, total=False):
    """An operator's resource as reviewed: its templates are found, and checked, by the walker."""

    metadata: ObjectMeta | None
    spec: dict[str, Any] | None
