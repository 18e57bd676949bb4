"""The tools' answers most backends share (roles.py says who asks what); a backend's own
`tools` module subclasses its placer and these, and overrides what differs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from castslice.backends.placer import Placement, Placer, SharingPoolPlacer, sharing_degree
from castslice.backends.roles import (
    POOLS,
    ClaimTemplates,
    GpuHold,
    GpuLayout,
    GpuPlace,
    GpuView,
    NodeCheck,
)
from castslice.contract import Manifest
from castslice.contract.scheduling import allocatable, pod_request

if TYPE_CHECKING:
    from castslice.contract.cluster import Cluster


class Tools(Placer):
    """Every role's answers (NodeChecks, GpuAccounts, Plans, Templates, PolicyPools,
    ExtenderView), over the backend's placement."""

    # How to add nodes without GPU sharing, which whole-GPU Pods need; "" when
    # whole-GPU Pods land on the same nodes as shared ones.
    whole_gpu_nodes_fix: ClassVar[str] = ""
    # What to change on the nodes `node_setup_problem` names.
    node_setup_fix: ClassVar[str] = ""
    # How the scheduler extender (`castslice extender`) sees this backend's GPUs (roles.py).
    extender_gpus: ClassVar[str | None] = None
    # What `guaranteed` says of a share that is neither an instance nor whole GPUs.
    no_guarantee: ClassVar[str] = "no compute or memory guaranteed"

    def node_problems(self, nodes: Sequence[Manifest]) -> list[str]:
        """What the doctor reports about these nodes beyond missing placements."""
        return []

    def node_setup_problem(self, node: Mapping[str, Any]) -> str:
        """Why this node shares GPUs in a way the backend cannot place Pods on, or ""."""
        return ""

    def unreachable_endpoint_cause(self, client_config: Mapping[str, Any]) -> str:
        """What on this backend's platform commonly keeps the API server from the webhook."""
        return ""

    def setup_hint(self) -> str:
        """How to make nodes offer what this backend places Pods on."""
        raise NotImplementedError

    def describe(self) -> str:
        """The backend and what it makes Pods ask for, for a report's first line."""
        return f"backend {self.name}, shared resource {self.shared_resource}"

    def claim_templates(self) -> ClaimTemplates | None:
        """The templates this backend's Pods claim from, or None when they claim none."""
        return None

    def gpu_layouts(self) -> Sequence[GpuLayout] | None:
        """The ways of cutting GPUs `castslice plan` compares for this backend, the first how
        this configuration's nodes are counted; None when shares pack onto whole GPUs."""
        return None

    def guaranteed(self, slices: int) -> str:
        """What a Pod of `slices` slices is guaranteed of a GPU's compute and memory, short."""
        placement = self.place(slices)
        if placement.instance:
            return placement.instance
        if placement.gpus.denominator == 1:
            return "whole GPUs"
        if placement.memory_share is not None:
            # The MiB depend on the share; plan groups Pods by what they get.
            if self.memory_limits_unenforced is not None:
                return "its share of the GPU's memory written as a limit, not enforced"
            where = "" if placement.labels_at_least else " where the node enforces it"
            return f"its share of the GPU's memory, limited by the driver{where}"
        return self.no_guarantee

    def node_checks(self) -> Sequence[NodeCheck] | None:
        """The doctor's checks of the nodes for this backend, or None for the checks that fit
        every device-plugin backend (node capacity and labels, Pending Pods, quotas)."""
        return None

    def quota_resource(self) -> str | None:
        """What opted-in Pods ask for instead of the GPU (quotas must name it), or None."""
        return self.shared_resource

    def quota_units_per_gpu(self) -> int:
        """How many units of `quota_resource` one GPU is worth."""
        return self.config.slices_per_gpu

    def sharing_pools(self) -> Mapping[int, Placement] | None:
        """The placement of a fractional share on each sharing pool the settings offer, by
        clients per GPU; None when a Pod's slice count is itself what it asks for (policy
        mode then renders the count, not the choice of a pool)."""
        return None

    def gpu_units(self, resource: str, labels: Mapping[str, str]) -> int | None:
        """How many units of `resource` one GPU of a node with `labels` is, or None when the
        resource is not a GPU on this backend."""
        if resource == self.config.gpu_resource:
            return 1
        if resource == self.shared_resource:
            return self.config.slices_per_gpu
        return None

    def gpu_view(self, cluster: Cluster, nodes: Sequence[Manifest]) -> GpuView:
        """Which GPUs Pods hold. Device plugins say only the node: a place per node and GPU
        resource, its GPUs counted from the node's allocatable."""
        return NodeGpuView(self, nodes)

    def report_rights(self) -> str:
        """The RBAC rights `gpu_view` reads with beyond nodes and Pods, or ""."""
        return ""


class NodeGpuView:
    """The GPUs of device-plugin nodes, where a Pod's GPU is known only by its node."""

    def __init__(self, backend: Tools, nodes: Sequence[Manifest]) -> None:
        self._places: dict[str, GpuPlace] = {}
        # node -> [(resource, units per GPU)], the resources that are GPUs there.
        self._resources: dict[str, list[tuple[str, int]]] = {}
        for node in nodes:
            metadata = node.get("metadata") or {}
            name = str(metadata.get("name") or "")
            labels = metadata.get("labels") or {}
            offered = (node.get("status") or {}).get("allocatable") or {}
            for resource in sorted(offered):
                per_gpu = backend.gpu_units(resource, labels)
                units = allocatable(node, resource)
                if per_gpu is None or per_gpu < 1 or units <= 0:
                    continue
                self._resources.setdefault(name, []).append((resource, per_gpu))
                key = _node_place_key(name, resource)
                gpus = -(-units // per_gpu)
                self._places[key] = GpuPlace(key, name, None, gpus, units, resource)

    def places(self) -> Mapping[str, GpuPlace]:
        return self._places

    def holds(self, pod: Manifest) -> list[GpuHold]:
        node = (pod.get("spec") or {}).get("nodeName")
        found = []
        for resource, per_gpu in self._resources.get(node or "", ()):
            units = pod_request(pod, resource)
            if units:
                key = _node_place_key(node or "", resource)
                found.append(GpuHold(key, units, Fraction(units, per_gpu)))
        return found


def _node_place_key(node: str, resource: str) -> str:
    return f"{node} {resource}"


class SharingPoolTools(SharingPoolPlacer, Tools):
    """The tools' answers for a backend with node pools that share each GPU among a fixed
    number of clients."""

    extender_gpus = POOLS
    no_guarantee = "no compute or memory guaranteed (time-slicing)"

    def isolation(self) -> str:
        """What one client of a shared GPU is kept to, for a report's first line."""
        degrees = "/".join(str(degree) for degree in self.config.sharing_degrees)
        if self.config.sharing_strategy == "mps":
            # The NVIDIA device plugin's MPS control daemon sets each client's pinned
            # memory limit and active thread percentage to 1/M (k8s-device-plugin v0.20.0,
            # README "With CUDA MPS", cmd/mps-control-daemon/mps/daemon.go).
            return (
                f"MPS: each client may use at most 1/M of a GPU's memory and compute (M = "
                f"{degrees} clients per GPU), enforced in software; clients share one fault "
                "domain"
            )
        return "time-slicing: clients share a GPU's memory and faults, with no limit"

    def sharing_pools(self) -> Mapping[int, Placement]:
        # s = S // d reaches every degree d the backend can ever choose (d <= S).
        per_gpu = self.config.slices_per_gpu
        degrees = {
            sharing_degree(self.config, per_gpu // offered)
            for offered in self.config.sharing_degrees
            if offered <= per_gpu
        }
        return {degree: self.shared(degree) for degree in degrees if degree is not None}
