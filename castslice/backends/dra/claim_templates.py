"""The ResourceClaimTemplates the `dra` backend's Pods claim from, one per slice count.

The webhook never creates objects (it is side-effect free and dry-run safe), so
these are shipped: `castslice claim-templates` prints them and every deployment
applies them in each namespace with opted-in Pods. A Pod whose template is
missing stays Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from castslice.backends.placer import whole_gpus
from castslice.backends.templates import (
    PART_OF,
    TemplateCounts,
    configured_counts,
    enrolled_namespaces,
    resource_claim_template,
    template_slices,
)
from castslice.contract import Manifest
from castslice.settings.config import MEBIBYTE, Config, memory_quantity

__all__ = [
    "API_VERSION",
    "SHARED_TAINT",
    "TEMPLATE_PREFIX",
    "chosen_counts",
    "claim_template",
    "claim_templates",
    "default_counts",
    "memory_quantity",
    "reachable_counts",
]

API_VERSION = "resource.k8s.io/v1"
# The one request in every template; a container's claim names no request, so it gets all.
REQUEST = "gpu"
TEMPLATE_PREFIX = "castslice-"
# The device taint that keeps claims CastSlice did not write off shareable devices. A Pod
# asking plain `nvidia.com/gpu` is served through a DeviceClass's `extendedResourceName`
# (KEP-5004) by a claim the scheduler writes with no capacity request and no toleration:
# on an untainted shareable device it would take the capacity's default, one share.
SHARED_TAINT = "castslice.castops.io/shared"
# The NVIDIA DRA driver's name, in its ResourceSlices' `spec.driver`.
NVIDIA_DRIVER = "gpu.nvidia.com"
# The NVIDIA DRA driver's memory request policy steps in MiB; a claim rounds up to it.
_MEMORY_STEP = MEBIBYTE


class ClaimShape(NamedTuple):
    """What one claim asks for: `devices` devices, each with `shares` of its capacity."""

    devices: int
    shares: int
    memory: int | None


def template_name(config: Config, slices: int) -> str:
    return f"{TEMPLATE_PREFIX}{template_slices(config, slices)}-of-{config.slices_per_gpu}"


def claim_shape(config: Config, slices: int) -> ClaimShape:
    """One device with `s` shares (and s/S of its memory), or ceil(s/S) devices with all S.

    A whole device asks for every share, which already keeps every other claim off
    it; it asks for no memory, so it also fits GPUs with less than
    CASTSLICE_DRA_GPU_MEMORY.
    """
    per_gpu = config.slices_per_gpu
    if slices >= per_gpu:
        return ClaimShape(whole_gpus(config, slices), per_gpu, None)
    memory = None
    if config.dra_gpu_memory is not None:
        exact = Fraction(config.dra_gpu_memory * slices, per_gpu)
        memory = -(-exact // _MEMORY_STEP) * _MEMORY_STEP
    return ClaimShape(1, slices, memory)


def claim_template_spec(config: Config, slices: int) -> dict[str, Any]:
    """The `spec` of the ResourceClaimTemplate for `slices` (its `spec.spec` is the claim)."""
    shape = claim_shape(config, slices)
    requests = {config.dra_capacity: str(shape.shares)}
    if shape.memory is not None:
        requests["memory"] = memory_quantity(shape.memory)
    exactly = {
        "deviceClassName": config.dra_device_class,
        "allocationMode": "ExactCount",
        "count": shape.devices,
        "capacity": {"requests": requests},
        # Every effect: NoExecute too would otherwise evict CastSlice's own Pods.
        "tolerations": [{"key": SHARED_TAINT, "operator": "Exists"}],
    }
    return {"spec": {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}}


# Beyond this many templates per namespace, only the counts the settings name are rendered.
MAX_TEMPLATES = 64


def reachable_counts(config: Config) -> list[int]:
    """Every template slice count some Pod can get: any `slice-ratio` from 1 to the maximum."""
    per_gpu, most = config.slices_per_gpu, config.max_slice_ratio
    shares = range(1, min(per_gpu - 1, most) + 1)
    whole = range(per_gpu, template_slices(config, most) + 1, per_gpu) if most >= per_gpu else ()
    return [*shares, *whole]


def default_counts(config: Config) -> TemplateCounts:
    """Every reachable count when that is at most MAX_TEMPLATES; otherwise the configured counts
    plus every share of one GPU (when those fit), with a note naming what is left out."""
    reachable = reachable_counts(config)
    if len(reachable) <= MAX_TEMPLATES:
        return TemplateCounts(tuple(reachable))
    chosen = configured_counts(config)
    shares = range(1, config.slices_per_gpu)
    if len(shares) + len(chosen) <= MAX_TEMPLATES:
        chosen |= set(shares)
    chosen.add(template_slices(config, config.slices_per_gpu))
    counts = tuple(sorted(chosen))
    note = (
        f"slice-ratio can ask for up to {config.max_slice_ratio} slices "
        f"(CASTSLICE_MAX_SLICE_RATIO), {len(reachable)} templates; rendered the "
        f"{len(counts)} for {_counts_text(counts)}. A Pod asking for another count stays "
        "Pending: add it with --slices, or set CASTSLICE_MAX_SLICE_RATIO="
        f"{counts[-1]} so that slice-ratio cannot ask for more"
    )
    return TemplateCounts(counts, note)


def chosen_counts(config: Config, asked: Iterable[int]) -> tuple[int, ...]:
    """The template counts for the slice counts given (`--slices`), each once, in order."""
    return tuple(sorted({template_slices(config, count) for count in asked}))


def device_taint_rule(driver: str = NVIDIA_DRIVER) -> Manifest:
    """The DeviceTaintRule that taints every device `driver` publishes.

    A rule lives outside the driver's chart, so a `helm upgrade` of the driver keeps it;
    the NVIDIA driver's `--consumable-shares` makes all its devices shareable, so one
    rule per driver covers them.
    """
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": f"{TEMPLATE_PREFIX}shared-{driver}",
            "labels": {PART_OF[0]: PART_OF[1]},
        },
        "spec": {
            "deviceSelector": {"driver": driver},
            "taint": {"key": SHARED_TAINT, "value": "true", "effect": "NoSchedule"},
        },
    }


def claim_template(config: Config, slices: int, namespace: str | None = None) -> Manifest:
    name = template_name(config, slices)
    return resource_claim_template(name, claim_template_spec(config, slices), namespace)


def claim_templates(
    config: Config, namespaces: Sequence[str | None], counts: Sequence[int]
) -> list[Manifest]:
    """One template per count in each namespace (None: no namespace, `kubectl apply -n` sets it)."""
    return [
        claim_template(config, count, namespace) for namespace in namespaces for count in counts
    ]


def _counts_text(counts: Sequence[int]) -> str:
    if len(counts) > 1 and list(counts) == list(range(counts[0], counts[-1] + 1)):
        return f"{counts[0]}-{counts[-1]} slices"
    return ", ".join(map(str, counts)) + (" slice" if counts == (1,) else " slices")


class DraClaimTemplates:
    """The backend's answer to `Backend.claim_templates`: its counts and manifests."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def default_counts(self) -> TemplateCounts:
        return default_counts(self.config)

    def chosen_counts(self, asked: Iterable[int]) -> tuple[int, ...]:
        return chosen_counts(self.config, asked)

    def manifests(self, namespaces: Sequence[str | None], counts: Sequence[int]) -> list[Manifest]:
        return claim_templates(self.config, namespaces, counts)

    def enrolled_namespaces(self) -> tuple[str, ...]:
        return enrolled_namespaces(self.config)
