"""What every backend answers, and the arithmetic they share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import NamedTuple, Protocol

from ..config import Config
from ..kube import PodSpec
from ..patch import (
    GpuContainer,
    PatchOperation,
    absent_labels_operations,
    node_selector_operations,
    required_node_terms,
    resource_operations,
)


class Placement(NamedTuple):
    """What every GPU container of a Pod asks for, and the node labels the Pod needs."""

    resource: str
    quantity: int
    node_selector: Mapping[str, str]
    # The share of one physical GPU each container gets, for messages.
    gpus: Fraction
    # Node labels the Pod's node must not carry (a required node affinity).
    absent_node_labels: tuple[str, ...] = ()
    # The ResourceClaimTemplate each GPU container claims from, for backends that claim devices.
    claim_template: str | None = None


class LeftAlone(NamedTuple):
    """Why a Pod is not changed: `reason` for the log line, `detail` for the user's warning."""

    reason: str
    detail: str


class Backend(Protocol):
    name: str
    # nodeSelector keys that mean the Pod was placed by hand and must be left alone.
    placement_keys: tuple[str, ...]
    # Whether Pods get their GPUs through ResourceClaims (doctor checks devices, not nodes).
    claims_devices: bool
    # Why `castslice policy` cannot render this backend, or None when it can.
    policy_mode_refusal: str | None

    def place(self, slices: int) -> Placement: ...

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        """Why this Pod must stay as it is (placed by hand...), or None."""
        ...

    def rewrite(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        """The operations that give every GPU container `placement`."""
        ...

    def notes(self, placement: Placement) -> tuple[str, ...]:
        """Warnings on what the user does not get with `placement` on this backend."""
        ...


class DevicePluginBackend:
    """A backend whose nodes advertise extended resources: a count per container, node labels."""

    name: str
    placement_keys: tuple[str, ...] = ()
    claims_devices = False
    policy_mode_refusal: str | None = None

    def __init__(self, config: Config) -> None:
        self.config = config

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        where = hand_placed(spec, self.placement_keys)
        return LeftAlone("placed by hand", f"{where} set by hand") if where else None

    def rewrite(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        gpu = self.config.gpu_resource
        operations = [
            operation
            for container in containers
            for operation in resource_operations(
                container, gpu, placement.resource, placement.quantity
            )
        ]
        operations += node_selector_operations(spec, placement.node_selector)
        operations += absent_labels_operations(spec, placement.absent_node_labels)
        return operations

    def notes(self, placement: Placement) -> tuple[str, ...]:
        return ()


def hand_placed(spec: PodSpec, keys: tuple[str, ...]) -> str | None:
    """Where the Pod already names one of the backend's placement labels, if it does."""
    selector = spec.get("nodeSelector") or {}
    for key in keys:
        if key in selector:
            return f"nodeSelector {key}"
    for term in required_node_terms(spec):
        for expression in term.get("matchExpressions") or ():
            if expression.get("key") in keys:
                return f"node affinity on {expression['key']}"
    return None


def sharing_degree(config: Config, slices: int) -> int | None:
    """The clients-per-GPU of the sharing pool for `slices`, or None for whole GPUs.

    The largest offered degree M with M <= floor(S / s): each client then gets
    1/M >= s/S of a GPU, never less than its share.
    """
    if slices >= config.slices_per_gpu:
        return None
    fitting = [d for d in config.sharing_degrees if d <= config.slices_per_gpu // slices]
    return max(fitting) if fitting else None


def whole_gpus(config: Config, slices: int) -> int:
    return -(-slices // config.slices_per_gpu)


class SharingPoolBackend(DevicePluginBackend):
    """A backend with node pools that share each GPU among a fixed number of clients.

    A fractional share goes to the pool found by `sharing_degree`; a share that
    no pool fits gets whole GPUs. Subclasses say what each looks like.
    """

    def place(self, slices: int) -> Placement:
        degree = sharing_degree(self.config, slices)
        if degree is None:
            return self.whole(whole_gpus(self.config, slices))
        return self.shared(degree)

    def shared(self, degree: int) -> Placement:
        raise NotImplementedError

    def whole(self, gpus: int) -> Placement:
        raise NotImplementedError
