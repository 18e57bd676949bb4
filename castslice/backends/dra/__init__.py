"""Dynamic Resource Allocation with consumable capacity (`resource.k8s.io/v1`, Kubernetes 1.36+).

A DRA driver publishes each GPU as one device that several claims may share
(`allowMultipleAllocations`) with a capacity counting shares: the NVIDIA DRA
driver's `--consumable-shares=S` gives `shares: S`. Each GPU container loses the
GPU resource and claims, through a ResourceClaimTemplate CastSlice ships (the
webhook creates nothing), `s` of those shares of one device, or whole devices.
The scheduler's own bookkeeping then packs the claims onto devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from castslice.backends.base import Backend, LeftAlone, Placement, whole_gpus
from castslice.config import MEBIBYTE, Config
from castslice.contract import CONTAINER_LISTS
from castslice.kube import PodSpec
from castslice.patch import GpuContainer, PatchOperation, escape_pointer_token

API_VERSION = "resource.k8s.io/v1"
# The one request in every template; a container's claim names no request, so it gets all.
REQUEST = "gpu"
TEMPLATE_PREFIX = "castslice-"
# Pod-level claim names, one per GPU container in the Pod's order.
CLAIM_PREFIX = "castslice-gpu-"
# The NVIDIA DRA driver's memory request policy steps in MiB; a claim rounds up to it.
_MEMORY_STEP = MEBIBYTE


class ClaimShape(NamedTuple):
    """What one claim asks for: `devices` devices, each with `shares` of its capacity."""

    devices: int
    shares: int
    memory: int | None


def template_slices(config: Config, slices: int) -> int:
    """The slice count whose template serves `slices`: whole devices round up to a multiple of S.

    `slice-ratio: "5"` and `"8"` both get two whole devices, so one template serves both.
    """
    per_gpu = config.slices_per_gpu
    return slices if slices < per_gpu else whole_gpus(config, slices) * per_gpu


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


def memory_quantity(size: int) -> str:
    """`size` bytes in the largest binary unit that keeps it whole (20Gi, 3840Mi)."""
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


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
    }
    return {"spec": {"devices": {"requests": [{"name": REQUEST, "exactly": exactly}]}}}


class DraBackend(Backend):
    """Claims of `s` shares of one device, or of whole devices; no node labels."""

    name = "dra"
    claims_devices = True
    policy_mode_refusal = (
        "the dra backend adds resource claims to Pods, and policy mode does not render "
        "them yet; use the webhook (castslice webhook) with CASTSLICE_BACKEND=dra"
    )

    def place(self, slices: int) -> Placement:
        shape = claim_shape(self.config, slices)
        per_gpu = self.config.slices_per_gpu
        share = Fraction(shape.devices) if slices >= per_gpu else Fraction(slices, per_gpu)
        # The resource and count say what the claim replaces: the GPUs, as devices.
        return Placement(
            self.config.gpu_resource,
            shape.devices,
            {},
            share,
            claim_template=template_name(self.config, slices),
        )

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        if spec.get("resourceClaims") or any(
            ((container or {}).get("resources") or {}).get("claims")
            for list_name in CONTAINER_LISTS
            for container in spec.get(list_name) or ()
        ):
            return LeftAlone("uses its own claims", "the Pod has its own resource claims")
        if spec.get("nodeName"):
            # Claims are allocated by the scheduler; a Pod bound by hand never gets its devices.
            return LeftAlone("placed by hand", "spec.nodeName set by hand")
        return None

    def pod_operations(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        gpu_token = escape_pointer_token(self.config.gpu_resource)
        operations: list[PatchOperation] = []
        claims = []
        for index, container in enumerate(containers):
            claim = f"{CLAIM_PREFIX}{index}"
            resources = container.resources
            for field in ("requests", "limits"):
                if self.config.gpu_resource in (resources.get(field) or {}):
                    path = f"{container.path}/resources/{field}/{gpu_token}"
                    operations.append({"op": "remove", "path": path})
            # `add` sets the member whether or not an empty list is there.
            operations.append(
                {
                    "op": "add",
                    "path": f"{container.path}/resources/claims",
                    "value": [{"name": claim}],
                }
            )
            claims.append({"name": claim, "resourceClaimTemplateName": placement.claim_template})
        if spec.get("resourceClaims") is None:
            operations.append({"op": "add", "path": "/spec/resourceClaims", "value": claims})
        else:
            operations += [
                {"op": "add", "path": "/spec/resourceClaims/-", "value": claim} for claim in claims
            ]
        return operations

    def notes(self, placement: Placement) -> tuple[str, ...]:
        if placement.gpus >= 1:
            return ()
        share = f"{placement.gpus.numerator}/{placement.gpus.denominator}"
        return (
            f"dra: the {share} GPU share is scheduler bookkeeping; sharing processes get no "
            "memory isolation from time-slicing",
        )

    def setup_hint(self) -> str:
        return (
            "install the NVIDIA DRA driver with featureGates.ConsumableShares=true and "
            f"consumableShares={self.config.slices_per_gpu} (infra/gpu-sharing/dra/), or set "
            "CASTSLICE_DRA_CAPACITY to the capacity your driver publishes"
        )

    def describe(self) -> str:
        return (
            f"backend {self.name}, device class {self.config.dra_device_class}, "
            f"capacity {self.config.dra_capacity}"
        )

    def quota_resource(self) -> str | None:
        # Claims count against `<class>.deviceclass.resource.k8s.io/devices`, not a resource.
        return None
