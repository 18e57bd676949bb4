"""What the GPU memory tests share: the variables the toolkit's hook reads, a node's labels
as GPU Feature Discovery v0.20.0 writes them, and a stored container's env."""

from __future__ import annotations

from typing import Any

from .pods import Manifest

REQUEST = "NVIDIA_GPU_MEMORY_REQUEST"
LIMIT = "NVIDIA_GPU_MEMORY_LIMIT"


def gfd_labels(product: str, memory_mib: int, driver: str, cuda: tuple[int, int]) -> dict[str, str]:
    """What GPU Feature Discovery labels a node with one such GPU (the version labeler's
    labels, new and deprecated, and the resource labeler's product, memory and count)."""
    major, minor, revision = driver.split(".")
    return {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": revision,
        "nvidia.com/cuda.runtime.major": str(cuda[0]),
        "nvidia.com/cuda.runtime.minor": str(cuda[1]),
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime-version.major": str(cuda[0]),
        "nvidia.com/cuda.runtime-version.minor": str(cuda[1]),
        "nvidia.com/cuda.runtime-version.full": f"{cuda[0]}.{cuda[1]}",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": "1",
    }


def env_of(stored: Manifest) -> dict[str, Any]:
    return {entry["name"]: entry.get("value") for entry in stored["spec"]["containers"][0]["env"]}
