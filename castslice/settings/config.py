"""The configuration: what every CASTSLICE_* setting decided, frozen.

Nothing here reads the environment (castslice.environment does, once at start)
or knows a backend; every other module reads a Config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from castslice.settings.rules import Policy

DEFAULT_PRESETS = "training=4,inference=2,batch=2,dev=1"
# The strategy settings' values as types, so that the checker holds every comparison with
# them to a value the setting can take; the tuples are the settings table's choices.
SharingStrategy = Literal["time-slicing", "mps"]
SHARING_STRATEGIES: tuple[SharingStrategy, ...] = get_args(SharingStrategy)
# The `mig` backend: how the nodes offer MIG instances, which rule says an instance holds
# a share, and where whole-GPU requests go.
MigStack = Literal["mixed", "single", "gke", "dra"]
MIG_STACKS: tuple[MigStack, ...] = get_args(MigStack)
MigFit = Literal["memory", "strict"]
MIG_FITS: tuple[MigFit, ...] = get_args(MigFit)
MigWholeGpu = Literal["gpu", "7g"]
MIG_WHOLE_GPU: tuple[MigWholeGpu, ...] = get_args(MigWholeGpu)
# Far above any sharing degree a device plugin or GKE offers; keeps the selector values short.
MAX_SHARING_DEGREE = 1000
# GKE's bounds of max-shared-clients-per-gpu.
MIN_GKE_SHARED_CLIENTS = 2
MAX_GKE_SHARED_CLIENTS = 48
# Bounds the admin-chosen maximum so quantities and warnings stay short.
MAX_SLICE_RATIO_CEILING = 1_000_000
MEBIBYTE = 2**20
# Far above any GPU's memory (1 PiB); keeps quantities short.
MAX_GPU_MEMORY = 2**50
# The units of a GPU's memory (CASTSLICE_DRA_GPU_MEMORY): whole binary units only, so each
# claim's share is a whole number of MiB, which the Helm chart's templates compute exactly
# as CastSlice does.
MEMORY_UNITS = {"Mi": MEBIBYTE, "Gi": 2**30, "Ti": 2**40}


class ConfigError(ValueError):
    """An environment variable has a value CastSlice cannot use; the message names it."""


@dataclass(frozen=True)
class Config:
    # Empty means the backend's own default (Backend.shared_resource says which).
    shared_resource: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    presets: Mapping[str, int] = field(
        default_factory=lambda: {"training": 4, "inference": 2, "batch": 2, "dev": 1}
    )
    default_slices: int = 1
    max_slice_ratio: int = 1000
    path_token: str | None = None
    backend: str = "resource"
    slices_per_gpu: int = 4
    sharing_degrees: tuple[int, ...] = (4,)
    sharing_strategy: SharingStrategy = "time-slicing"
    # The enrolment policy (CASTSLICE_POLICY or CASTSLICE_POLICY_FILE); None: annotations only.
    policy: Policy | None = None
    metrics: bool = False
    metrics_port: int = 9090
    # The `dra` backend: the DeviceClass claims name, the device capacity that counts
    # shares, and the memory of one GPU in bytes (None: claims ask for no memory).
    dra_device_class: str = "gpu.nvidia.com"
    dra_capacity: str = "shares"
    dra_gpu_memory: int | None = None
    # One GPU's memory in bytes on the sharing nodes (the smallest where they differ), or
    # None: containers get no GPU memory request or limit.
    gpu_memory: int | None = None
    # Whether Pods given GPU memory limits are kept on nodes that enforce them.
    gpu_memory_enforced_only: bool = True
    # The scheduler opted-in Pods are sent to (spec.schedulerName), or None: their own.
    scheduler_name: str | None = None
    # The `mig` backend: the GPU models of the cluster's MIG nodes (names of the profile
    # table), the profiles they offer (None: every profile NVIDIA defines for them), the
    # stack, the rule "holds s/S", where whole-GPU requests go, and the clients per partition
    # of GKE partition pools time-shared on top (None: no Pod shares a partition).
    mig_gpu_models: tuple[str, ...] = ("A100-80GB",)
    mig_profiles: tuple[str, ...] | None = None
    mig_stack: MigStack = "mixed"
    mig_fit: MigFit = "memory"
    mig_whole_gpu: MigWholeGpu = "gpu"
    mig_time_shared_clients: int | None = None
    # More names the boards of a model report (model -> names), beside the profile table's.
    mig_product_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def memory_quantity(size: int) -> str:
    """`size` bytes in the largest binary unit that keeps it whole (20Gi, 3840Mi)."""
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
