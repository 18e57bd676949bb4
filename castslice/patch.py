"""RFC 6902 patches that move a Pod's GPU requests onto the shared resource."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from .kube import Container, PodSpec

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class PatchOperation(TypedDict):
    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[Any]


def escape_pointer_token(token: str) -> str:
    """Escape one JSON Pointer reference token (RFC 6901: `~` first, then `/`)."""
    return token.replace("~", "~0").replace("/", "~1")


def build_patch(
    spec: PodSpec, slices: int, gpu_resource: str, shared_resource: str
) -> list[PatchOperation]:
    """Operations that replace `gpu_resource` with `slices` of `shared_resource`.

    Every path exists in `spec` as given, and an empty list means nothing to change.
    """
    operations: list[PatchOperation] = []
    for list_name in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(list_name) or ()):
            operations += _container_operations(
                container or {},
                f"/spec/{list_name}/{index}/resources",
                str(slices),
                gpu_resource,
                shared_resource,
            )
    return operations


def _container_operations(
    container: Container, path: str, quantity: str, gpu: str, shared: str
) -> list[PatchOperation]:
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if gpu not in requests and gpu not in limits:
        return []

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
