"""The parts of a core/v1 Pod that CastSlice reads, as plain data.

Fields not listed here are never decoded (see review.decode_review), which
keeps large Pods cheap; the patch addresses fields by path, so nothing unread
is lost.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ResourceRequirements(TypedDict, total=False):
    requests: dict[str, Any] | None
    limits: dict[str, Any] | None


class Container(TypedDict, total=False):
    name: str | None
    resources: ResourceRequirements | None


class PodSpec(TypedDict, total=False):
    initContainers: list[Container] | None
    containers: list[Container] | None
    ephemeralContainers: list[Container] | None
    nodeSelector: dict[str, str] | None


class ObjectMeta(TypedDict, total=False):
    name: str | None
    generateName: str | None
    namespace: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None


class Pod(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: PodSpec | None
