"""What every backend answers, and the arithmetic they share."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple, Protocol

from ..config import Config


class Placement(NamedTuple):
    """What every GPU container of a Pod asks for, and the node labels the Pod needs."""

    resource: str
    quantity: int
    node_selector: Mapping[str, str]
    # The share of one physical GPU each container gets, for messages.
    gpus: Fraction
    # Node labels the Pod's node must not carry (a required node affinity).
    absent_node_labels: tuple[str, ...] = ()


class Backend(Protocol):
    name: str
    # nodeSelector keys that mean the Pod was placed by hand and must be left alone.
    placement_keys: tuple[str, ...]
    # How to add nodes without GPU sharing, which whole-GPU Pods need; "" when
    # whole-GPU Pods land on the same nodes as shared ones.
    whole_gpu_nodes_fix: str
    # What to change on the nodes `node_setup_problem` names.
    node_setup_fix: str

    def place(self, slices: int) -> Placement: ...

    def node_setup_problem(self, node: Mapping[str, Any]) -> str:
        """Why this node shares GPUs in a way the backend cannot place Pods on, or ""."""
        ...

    def unreachable_endpoint_cause(self, client_config: Mapping[str, Any]) -> str:
        """What on this backend's platform commonly keeps the API server from the webhook."""
        ...


class BackendDefaults:
    """The answers of a backend with nothing platform-specific to say."""

    whole_gpu_nodes_fix = ""
    node_setup_fix = ""

    def node_setup_problem(self, node: Mapping[str, Any]) -> str:
        return ""

    def unreachable_endpoint_cause(self, client_config: Mapping[str, Any]) -> str:
        return ""


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


class SharingPoolBackend(BackendDefaults):
    """A backend with node pools that share each GPU among a fixed number of clients.

    A fractional share goes to the pool found by `sharing_degree`; a share that
    no pool fits gets whole GPUs. Subclasses say what each looks like.
    """

    name: str
    placement_keys: tuple[str, ...]

    def __init__(self, config: Config) -> None:
        self.config = config

    def place(self, slices: int) -> Placement:
        degree = sharing_degree(self.config, slices)
        if degree is None:
            return self.whole(whole_gpus(self.config, slices))
        return self.shared(degree)

    def shared(self, degree: int) -> Placement:
        raise NotImplementedError

    def whole(self, gpus: int) -> Placement:
        raise NotImplementedError
