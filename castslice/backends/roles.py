"""What each tool asks of a backend, one small protocol per asker, beside the placer the
webhook asks (placer.py): `castslice doctor` (NodeChecks), `castslice report` and its
exporter (GpuAccounts), `castslice plan` (Plans), `castslice claim-templates` (Templates),
`castslice policy` (PolicyPools) and the scheduler extender (ExtenderView).

Each backend answers them in its own `tools` module, beside its placer, so that the
webhook's process never loads them; `castslice.backends.tools` is their table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from castslice.backends.placer import Placement
from castslice.backends.templates import TemplateCounts
from castslice.contract import Manifest
from castslice.contract.findings import Result
from castslice.settings.config import Config

if TYPE_CHECKING:
    # Only doctor's checks and the report get a Cluster; nothing else loads the client.
    from castslice.contract.cluster import Cluster

# The ways the scheduler extender sees GPUs (`ExtenderView.extender_gpus`).
DEVICES = "devices"
POOLS = "pools"


class LaidOut(NamedTuple):
    """GPUs laid out alike for `castslice plan`: the layout, how many GPUs have it, how many
    Pods they hold, and what each GPU holds (instance name: count)."""

    layout: str
    gpus: int
    pods: int
    instances: tuple[tuple[str, int], ...]


class GpuLayout(Protocol):
    """A way a backend's GPUs are cut up that `castslice plan` counts: the backend's settings
    for nodes cut so, and the GPUs Pods need on them."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> Config: ...

    def environment(self) -> dict[str, str]:
        """The backend's CASTSLICE_* variables for nodes cut so (all of them)."""
        ...

    def pack(self, pods: Mapping[int, int]) -> list[LaidOut]:
        """The GPUs that hold these Pods (how many of each slice count), each Pod placed as
        `place` places it, whole-GPU placements left out."""
        ...

    def notes(self, laid_out: Sequence[LaidOut]) -> tuple[str, ...]:
        """What to do on the nodes to cut their GPUs so."""
        ...

    def node_pool(self, slices: int) -> tuple[str, int] | None:
        """Where the scheduler can place a Pod of `slices` once each node's GPUs are all cut
        alike: the instance it asks for, which names its node pool, and how many of them
        one GPU holds; None: it asks for whole GPUs."""
        ...


class ClaimTemplates(Protocol):
    """The ResourceClaimTemplates a backend's Pods claim from (`castslice claim-templates`)."""

    def default_counts(self) -> TemplateCounts: ...

    def chosen_counts(self, asked: Iterable[int]) -> tuple[int, ...]: ...

    def manifests(
        self, namespaces: Sequence[str | None], counts: Sequence[int]
    ) -> list[Manifest]: ...

    def enrolled_namespaces(self) -> tuple[str, ...]:
        """The namespaces the enrolment policy names, which need the templates too."""
        ...


class GpuPlace(NamedTuple):
    """A physical GPU a report can name, or a node's GPUs where the platform does not say
    which of them a Pod holds (device-plugin sharing)."""

    key: str
    node: str
    # The GPU's own name (the DRA device), or None: the node is all that is known.
    device: str | None
    # How many physical GPUs the place stands for (1 for a device).
    gpus: int
    # The shares the place offers in all, counted in `unit`.
    units: int
    unit: str


class GpuHold(NamedTuple):
    """What one Pod holds of one place: `units` of its `unit`, `share` of one GPU."""

    place: str
    units: int
    share: Fraction
    # The DRA allocation's shareID, which tells two claims on one device apart.
    share_id: str | None = None


class GpuView(Protocol):
    """Which GPUs the cluster's Pods hold, as far as the platform says."""

    def places(self) -> Mapping[str, GpuPlace]: ...

    def holds(self, pod: Manifest) -> list[GpuHold]: ...


class NodeCheck(NamedTuple):
    """One of `castslice doctor`'s checks of what the nodes offer, as a backend defines it."""

    name: str
    # The RBAC rights it reads with, named in the fix when the API server refuses them.
    rights: str
    run: Callable[[Cluster, Config], Result]


class NodeChecks(Protocol):
    """What `castslice doctor` asks: what the nodes must offer, and what commonly goes wrong."""

    name: ClassVar[str]
    # How to add nodes without GPU sharing, which whole-GPU Pods need; "" when
    # whole-GPU Pods land on the same nodes as shared ones.
    whole_gpu_nodes_fix: ClassVar[str]
    # What to change on the nodes `node_setup_problem` names.
    node_setup_fix: ClassVar[str]

    @property
    def shared_resource(self) -> str: ...

    def place(self, slices: int) -> Placement: ...

    def serves(self, labels: Mapping[str, str], placement: Placement) -> bool: ...

    def describe(self) -> str: ...

    def node_checks(self) -> Sequence[NodeCheck] | None:
        """The doctor's checks of the nodes for this backend, or None for the checks that fit
        every device-plugin backend (node capacity and labels, Pending Pods, quotas)."""
        ...

    def node_problems(self, nodes: Sequence[Manifest]) -> list[str]:
        """What the doctor reports about these nodes beyond missing placements."""
        ...

    def node_setup_problem(self, node: Mapping[str, Any]) -> str:
        """Why this node shares GPUs in a way the backend cannot place Pods on, or ""."""
        ...

    def unreachable_endpoint_cause(self, client_config: Mapping[str, Any]) -> str:
        """What on this backend's platform commonly keeps the API server from the webhook."""
        ...

    def setup_hint(self) -> str:
        """How to make nodes offer what this backend places Pods on."""
        ...

    def quota_resource(self) -> str | None:
        """What opted-in Pods ask for instead of the GPU (quotas must name it), or None."""
        ...

    def quota_units_per_gpu(self) -> int:
        """How many units of `quota_resource` one GPU is worth."""
        ...


class GpuAccounts(Protocol):
    """What `castslice report` asks: which GPUs the cluster's Pods hold, and in what units."""

    name: ClassVar[str]
    config: Config

    def describe(self) -> str:
        """The backend and what it makes Pods ask for, for a report's first line."""
        ...

    def gpu_view(self, cluster: Cluster, nodes: Sequence[Manifest]) -> GpuView: ...

    def gpu_units(self, resource: str, labels: Mapping[str, str]) -> int | None:
        """How many units of `resource` one GPU of a node with `labels` is, or None when the
        resource is not a GPU on this backend."""
        ...

    def report_rights(self) -> str:
        """The RBAC rights `gpu_view` reads with beyond nodes and Pods, or ""."""
        ...


class Templates(Protocol):
    """What `castslice claim-templates` (and the webhook's chart) asks."""

    def claim_templates(self) -> ClaimTemplates | None:
        """The templates this backend's Pods claim from, or None when they claim none."""
        ...


class Plans(Templates, Protocol):
    """What `castslice plan` asks: how Pods are placed, and the ways of cutting GPUs."""

    name: ClassVar[str]
    config: Config
    extender_gpus: ClassVar[str | None]

    def place(self, slices: int) -> Placement: ...

    def gpu_layouts(self) -> Sequence[GpuLayout] | None:
        """The ways of cutting GPUs `castslice plan` compares for this backend, the first how
        this configuration's nodes are counted; None when shares pack onto whole GPUs."""
        ...

    def guaranteed(self, slices: int) -> str:
        """What a Pod of `slices` slices is guaranteed of a GPU's compute and memory, short."""
        ...


class PolicyPools(Protocol):
    """What `castslice policy` asks beyond the placement: the sharing pools to choose from."""

    name: ClassVar[str]
    placement_keys: ClassVar[tuple[str, ...]]

    @property
    def shared_resource(self) -> str: ...

    def place(self, slices: int) -> Placement: ...

    def notes(self, placement: Placement) -> tuple[str, ...]: ...

    def sharing_pools(self) -> Mapping[int, Placement] | None:
        """The placement of a fractional share on each sharing pool the settings offer, by
        clients per GPU; None when a Pod's slice count is itself what it asks for (policy
        mode then renders the count, not the choice of a pool)."""
        ...


class ExtenderView(Protocol):
    """What the scheduler extender asks: how it sees the GPUs, and each pool's placement."""

    config: Config
    # DEVICES (DRA devices with a consumable share capacity, each device's use known),
    # POOLS (sharing node pools, each node's use known as a count of clients), or None:
    # the extender cannot score them.
    extender_gpus: ClassVar[str | None]

    def place(self, slices: int) -> Placement: ...

    def serves(self, labels: Mapping[str, str], placement: Placement) -> bool: ...

    def sharing_pools(self) -> Mapping[int, Placement] | None: ...
