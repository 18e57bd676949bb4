"""GPU memory requests and limits the NVIDIA driver enforces per container, and the env that
asks for them.

nvidia-container-toolkit's CDI hook `apply-cuda-memory-limits` (v1.20.1 and later; verbatim
in tests/upstream/) reads `NVIDIA_GPU_MEMORY_REQUEST` and `NVIDIA_GPU_MEMORY_LIMIT` from the
container's OCI spec, whole MiB each (`strconv.ParseUint(value, 10, 64)`: ASCII digits, no
sign, no space, no unit), and hands them to NVML `SetMemoryLimits_v1` for every GPU of the
container, the same two numbers for each: the request is the soft limit (guaranteed), the
limit the hard one (the most the container's cgroup may allocate on that GPU). A request
above the limit, or a value that is no whole number, makes the hook fail and the container
with it; so does a node on cgroup v1, and one whose driver has no `SetMemoryLimits_v1`
(before branch 615). Only one of the two set: the hook takes the other as the request (or the
largest limit), so CastSlice always writes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from castslice.contract.patch import PatchOperation

REQUEST_ENV = "NVIDIA_GPU_MEMORY_REQUEST"
LIMIT_ENV = "NVIDIA_GPU_MEMORY_LIMIT"
# The hook's unit (its mebiByteMultiplier).
MEBIBYTE = 1024 * 1024


class MemoryCap(NamedTuple):
    """What one container may hold of each GPU it sees, in MiB: `request` guaranteed, at most
    `limit`."""

    request: int
    limit: int

    def statement(self) -> str:
        """What the decision record, preview and report say of it."""
        return f"memory limited to {self.limit} MiB by the driver ({self.request} MiB guaranteed)"


def memory_cap(share: Fraction, gpu_memory: int, burst: Fraction | None = None) -> MemoryCap | None:
    """The cap of a container holding `share` of each of its GPUs, on GPUs of `gpu_memory`
    bytes, or None where there is nothing to cap: a whole GPU or more, or a share smaller
    than a MiB.

    The request is the share rounded down to whole MiB, so the requests of the clients of
    one GPU never add up to more than it has. The limit is the request, or the `burst` share
    of the GPU the Pod asked for where that is more, never more than the whole GPU.
    """
    if share <= 0 or share >= 1:
        return None
    mebibytes = gpu_memory // MEBIBYTE
    request = int(share * mebibytes)
    if request < 1:
        return None
    limit = request
    if burst is not None:
        limit = max(request, int(min(burst, Fraction(1)) * mebibytes))
    return MemoryCap(request, limit)


def memory_env_operations(
    container_path: str, container: Mapping[str, Any], cap: MemoryCap
) -> list[PatchOperation]:
    """Give the container at `container_path` the env that asks for `cap`.

    A value the container set itself for either variable (`value` or `valueFrom`, once or
    more) is replaced, so a Pod cannot lift its own cap; the others are added at the end of
    `env`. An `env` entry wins over `envFrom` (the kubelet's order), so a ConfigMap that
    sets them changes nothing; the image's own ENV comes first in the OCI spec under
    containerd, which no admission can change.
    """
    wanted = {REQUEST_ENV: str(cap.request), LIMIT_ENV: str(cap.limit)}
    env: Sequence[Any] | None = container.get("env")
    operations: list[PatchOperation] = []
    present: set[str] = set()
    for index, entry in enumerate(env or ()):
        name = (entry or {}).get("name")
        if name not in wanted:
            continue
        present.add(name)
        if entry != {"name": name, "value": wanted[name]}:
            operations.append(
                {
                    "op": "replace",
                    "path": f"{container_path}/env/{index}",
                    "value": {"name": name, "value": wanted[name]},
                }
            )
    missing = [
        {"name": name, "value": value} for name, value in wanted.items() if name not in present
    ]
    if not missing:
        return operations
    if env is None:
        return [*operations, {"op": "add", "path": f"{container_path}/env", "value": missing}]
    return operations + [
        {"op": "add", "path": f"{container_path}/env/-", "value": entry} for entry in missing
    ]
