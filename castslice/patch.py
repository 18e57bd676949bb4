"""RFC 6902 patches that move a Pod's GPU requests onto the shared resource."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal, NotRequired, TypedDict

from .kube import PodSpec, ResourceRequirements

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class PatchOperation(TypedDict):
    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[Any]


@lru_cache(maxsize=64)
def escape_pointer_token(token: str) -> str:
    """Escape one JSON Pointer reference token (RFC 6901: `~` first, then `/`)."""
    return token.replace("~", "~0").replace("/", "~1")


def build_patch(
    spec: PodSpec, slices: int, gpu_resource: str, shared_resource: str
) -> list[PatchOperation]:
    """Operations that replace `gpu_resource` with `slices` of `shared_resource`.

    Every path exists in `spec` as given, and an empty list means nothing to change.
    """
    groups = patch_by_container(spec, slices, gpu_resource, shared_resource)
    return [operation for group in groups for operation in group]


def patch_by_container(
    spec: PodSpec, slices: int, gpu_resource: str, shared_resource: str
) -> list[list[PatchOperation]]:
    """build_patch's operations, one non-empty list per container they change."""
    groups: list[list[PatchOperation]] = []
    quantity = str(slices)
    for list_name in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(list_name) or ()):
            resources = (container or {}).get("resources")
            if not resources:
                continue
            operations = _container_operations(
                resources, list_name, index, quantity, gpu_resource, shared_resource
            )
            if operations:
                groups.append(operations)
    return groups


def _container_operations(
    resources: ResourceRequirements,
    list_name: str,
    index: int,
    quantity: str,
    gpu: str,
    shared: str,
) -> list[PatchOperation]:
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if gpu not in requests and gpu not in limits:
        return []

    path = f"/spec/{list_name}/{index}/resources"
    gpu_token, shared_token = escape_pointer_token(gpu), escape_pointer_token(shared)
    operations: list[PatchOperation] = []
    for field, values in (("requests", requests), ("limits", limits)):
        if gpu in values:
            operations.append({"op": "remove", "path": f"{path}/{field}/{gpu_token}"})
            operations.append(
                {"op": "add", "path": f"{path}/{field}/{shared_token}", "value": quantity}
            )
        elif shared in values and values[shared] != quantity:
            # Extended resources must have equal requests and limits, so a shared
            # value already in the other map follows the new count.
            operations.append(
                {"op": "replace", "path": f"{path}/{field}/{shared_token}", "value": quantity}
            )

    if gpu in requests and gpu not in limits and shared not in limits:
        # The API server requires a limit for extended resources; a request-only
        # GPU container would otherwise be rejected.
        if resources.get("limits") is None:
            operations.append({"op": "add", "path": f"{path}/limits", "value": {shared: quantity}})
        else:
            operations.append(
                {"op": "add", "path": f"{path}/limits/{shared_token}", "value": quantity}
            )
    return operations
