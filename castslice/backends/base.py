"""What every backend answers, and the arithmetic they share.

Everything that depends on the backend (what containers and the Pod become, what
the doctor looks for on nodes, which quotas count opted-in Pods, what policy mode
renders) is asked of a Backend; no caller outside this package knows a backend
by its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from castslice.contract.definitions import CONTAINER_LISTS, MAX_WARNING_LENGTH
from castslice.contract.findings import Result
from castslice.contract.kube import QUANTITY_FIELDS, PodSpec
from castslice.contract.patch import (
    GpuContainer,
    PatchOperation,
    escape_pointer_token,
    label_in_expressions,
    node_selector_operations,
    required_expressions_operations,
    required_node_terms,
    resource_operations,
)
from castslice.contract.scheduling import allocatable, pod_request
from castslice.settings.config import Config

if TYPE_CHECKING:
    # Only doctor's checks get a Cluster; the webhook's start never loads the client.
    from castslice.contract.cluster import Cluster

Manifest = dict[str, Any]


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
    # Node labels whose value must be one of several (a required node affinity, `In`).
    labels_in: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # What the Pod really gets where that is more than the share `gpus` says (a MIG
    # instance: its compute and memory; an MPS client: its memory cap), for the decision
    # record, the audit annotation and a warning.
    instance: str | None = None
    # What the backend warns of with this placement (what the Pod does not get as asked).
    caveats: tuple[str, ...] = ()


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


class LeftAlone(NamedTuple):
    """Why a Pod is not changed: `reason` for the log line, `detail` for the user's warning."""

    reason: str
    detail: str


class TemplateCounts(NamedTuple):
    """The slice counts to render, and what a user must do when some reachable ones are not."""

    counts: tuple[int, ...]
    note: str | None = None


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


def template_slices(config: Config, slices: int) -> int:
    """The slice count whose template serves `slices`: whole devices round up to a multiple of S.

    `slice-ratio: "5"` and `"8"` both get two whole devices, so one template serves both.
    """
    per_gpu = config.slices_per_gpu
    return slices if slices < per_gpu else whole_gpus(config, slices) * per_gpu


def configured_counts(config: Config) -> set[int]:
    """The counts the presets, the enrolment policy's rules and the default give."""
    counts = {config.default_slices, *config.presets.values()}
    if config.policy is not None:
        counts |= {rule.rule_slices for rule in config.policy.rules if rule.rule_slices}
    return {template_slices(config, count) for count in counts}


def enrolled_namespaces(config: Config) -> tuple[str, ...]:
    """The namespaces an enrolling rule of the policy names exactly, in order, each once.

    A glob (`ml-*`) names no namespace until one exists: those get templates by name.
    """
    if config.policy is None:
        return ()
    names = (
        pattern.text
        for rule in config.policy.rules
        if rule.optimize
        for pattern in rule.namespaces or ()
        if pattern.regex is None
    )
    return tuple(dict.fromkeys(names))


# The ways the scheduler extender sees GPUs (`Backend.extender_gpus`).
DEVICES = "devices"
POOLS = "pools"


class Backend:
    """What every backend answers; the defaults are those most backends share (the GPU
    resource swapped in each container, the placement's node labels required and
    forbidden). A backend overrides what differs."""

    name: ClassVar[str]
    # nodeSelector keys that mean the Pod was placed by hand and must be left alone.
    placement_keys: ClassVar[tuple[str, ...]] = ()
    # Why `castslice policy` cannot render this backend, or None when it can.
    policy_mode_refusal: ClassVar[str | None] = None
    # Why this backend cannot send opted-in Pods to a scheduler of their own
    # (CASTSLICE_SCHEDULER_NAME), or None when it can: only where no other scheduler can
    # allocate what those Pods share are two schedulers safe side by side.
    scheduler_name_refusal: ClassVar[str | None] = (
        "it cannot: only dra keeps the shared GPUs to the Pods CastSlice rewrote (its "
        "DeviceTaintRule), and two schedulers placing Pods on the same GPUs can give one out "
        "twice (docs/backends.md#a-second-scheduler)"
    )
    # Why `castslice plan` cannot count this backend's GPUs, or None when it can: plan then
    # leaves it out of its candidates.
    plan_refusal: ClassVar[str | None] = None
    # How to add nodes without GPU sharing, which whole-GPU Pods need; "" when
    # whole-GPU Pods land on the same nodes as shared ones.
    whole_gpu_nodes_fix: ClassVar[str] = ""
    # What to change on the nodes `node_setup_problem` names.
    node_setup_fix: ClassVar[str] = ""
    # How the scheduler extender (`castslice extender`) sees this backend's GPUs: DEVICES
    # (DRA devices with a consumable share capacity, each device's use known), POOLS
    # (sharing node pools, each node's use known as a count of clients), or None: it
    # cannot score them.
    extender_gpus: ClassVar[str | None] = None
    # What `guaranteed` says of a share that is neither an instance nor whole GPUs.
    no_guarantee: ClassVar[str] = "no compute or memory guaranteed"

    def __init__(self, config: Config) -> None:
        self.config = config

    @classmethod
    def default_shared_resource(cls, gpu_resource: str) -> str:
        """The shared resource when CASTSLICE_SHARED_RESOURCE is not set."""
        return "nvidia.com/gpu-shared"

    @property
    def shared_resource(self) -> str:
        """The resource a shared GPU is asked for by (CASTSLICE_SHARED_RESOURCE or the default)."""
        return self.config.shared_resource or self.default_shared_resource(self.config.gpu_resource)

    def place(self, slices: int) -> Placement:
        raise NotImplementedError

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        """What in the Pod already decides what this backend would (a placement label set by
        hand), so that CastSlice leaves the Pod alone; None when nothing does."""
        where = _hand_placed(spec, self.placement_keys)
        return LeftAlone("placed by hand", f"{where} set by hand") if where else None

    def pod_operations(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        """What the GPU containers and the Pod's spec become for `placement`."""
        gpu = self.config.gpu_resource
        operations = [
            operation
            for container in containers
            for operation in resource_operations(
                container, gpu, placement.resource, placement.quantity
            )
        ]
        operations += node_selector_operations(spec, placement.node_selector)
        expressions = label_in_expressions(placement.labels_in) + [
            {"key": key, "operator": "DoesNotExist"} for key in placement.absent_node_labels
        ]
        operations += required_expressions_operations(spec, expressions)
        return operations

    def notes(self, placement: Placement) -> tuple[str, ...]:
        """Warnings on what a Pod really gets with `placement` (its `instance`), then on what
        it does not get as asked (its `caveats`)."""
        if not placement.instance:
            return placement.caveats
        stated = f"{self.name}: {self.instance_intro(placement)} {placement.instance}"
        if len(stated) > MAX_WARNING_LENGTH:
            # Too long for one warning: each "; "-separated part in a warning of its own.
            first, *rest = placement.instance.split("; ")
            stated_parts = [f"{self.name}: {self.instance_intro(placement)} {first}"]
            return (*stated_parts, *(f"{self.name}: {part}" for part in rest), *placement.caveats)
        return (stated, *placement.caveats)

    def instance_intro(self, placement: Placement) -> str:
        """The words before `placement.instance` in the warning that states it."""
        return "the Pod gets"

    def serves(self, labels: Mapping[str, str], placement: Placement) -> bool:
        """Whether a node with `labels` may run a Pod placed as `placement` (before resources)."""
        if any(labels.get(key) != value for key, value in placement.node_selector.items()):
            return False
        if any(labels.get(key) not in values for key, values in placement.labels_in):
            return False
        return not any(key in labels for key in placement.absent_node_labels)

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


def _hand_placed(spec: PodSpec, keys: tuple[str, ...]) -> str | None:
    """Where the Pod already names one of `keys` as a node label it needs, if it does."""
    selector = spec.get("nodeSelector") or {}
    for key in keys:
        if key in selector:
            return f"nodeSelector {key}"
    for term in required_node_terms(spec):
        for expression in term.get("matchExpressions") or ():
            if expression.get("key") in keys:
                return f"node affinity on {expression['key']}"
    return None


class NodeGpuView:
    """The GPUs of device-plugin nodes, where a Pod's GPU is known only by its node."""

    def __init__(self, backend: Backend, nodes: Sequence[Manifest]) -> None:
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


def label_count(value: str | None) -> int | None:
    """A node label that counts something (replicas, clients per GPU), or None when it does not."""
    # ASCII digits only: "¹" is a digit to str.isdigit() and no number to int().
    return int(value) if value and value.isascii() and value.isdigit() and int(value) >= 1 else None


def _node_place_key(node: str, resource: str) -> str:
    return f"{node} {resource}"


class SharingPoolBackend(Backend):
    """A backend with node pools that share each GPU among a fixed number of clients.

    A fractional share goes to the pool found by `sharing_degree`; a share that
    no pool fits gets whole GPUs. Subclasses say what each looks like.
    """

    extender_gpus = POOLS
    no_guarantee = "no compute or memory guaranteed (time-slicing)"

    def instance_intro(self, placement: Placement) -> str:
        return "the Pod is an"

    def place(self, slices: int) -> Placement:
        degree = sharing_degree(self.config, slices)
        if degree is None:
            return self.whole(whole_gpus(self.config, slices))
        return self.shared(degree)

    def shared(self, degree: int) -> Placement:
        raise NotImplementedError

    def mps_client(self, degree: int) -> str | None:
        """What a client of an MPS pool of `degree` clients per GPU really gets, or None
        without MPS (time-slicing limits nothing).

        The NVIDIA device plugin's MPS control daemon sets each device's default pinned
        memory limit to its total memory / replicas, for every client process that connects
        (k8s-device-plugin v0.20.0, cmd/mps-control-daemon/mps/daemon.go,
        perDevicePinnedDeviceMemoryLimits); GKE's MPS pools limit each container's pinned
        device memory by max-shared-clients-per-gpu the same way (GKE, "Share GPUs with
        multiple workloads using NVIDIA MPS"). MIG devices are never shared by MPS (the
        device plugin's README: "Sharing with MPS is currently not supported on devices with
        MIG enabled").
        """
        if self.config.sharing_strategy != "mps":
            return None
        return (
            f"MPS client, at most 1/{degree} of the GPU's memory per process (enforced in "
            "software, not with MIG)"
        )

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

    def whole(self, gpus: int) -> Placement:
        raise NotImplementedError

    def sharing_pools(self) -> Mapping[int, Placement]:
        # s = S // d reaches every degree d the backend can ever choose (d <= S).
        per_gpu = self.config.slices_per_gpu
        degrees = {
            sharing_degree(self.config, per_gpu // offered)
            for offered in self.config.sharing_degrees
            if offered <= per_gpu
        }
        return {degree: self.shared(degree) for degree in degrees if degree is not None}


# Pod-level claim names, one per GPU container in the Pod's order.
CLAIM_PREFIX = "castslice-gpu-"
_INIT_PATH = "/spec/initContainers/"
_APP_PATH = "/spec/containers/"


def claim_names(spec: PodSpec, containers: Sequence[GpuContainer]) -> list[str]:
    """The claim each GPU container uses, numbered in the Pod's order of the claims' owners.

    Claims are held for the Pod's whole life, so one per container would make a plain
    init container cost a GPU share beyond the app's. A plain init container runs to
    completion before any app container starts, so it uses the first app container's
    claim (or, with none, the first plain init container's): the Pod then holds
    max(init, sum(app)), as with a device plugin, and as the scheduler's own claims for
    extended resources reuse requests (KEP-5004). A sidecar (`restartPolicy: Always`)
    runs beside the others and keeps a claim of its own.
    """
    plain_init = {
        c.path for c in containers if c.path.startswith(_INIT_PATH) and not _is_sidecar(spec, c)
    }
    host = next((c.path for c in containers if c.path.startswith(_APP_PATH)), None)
    if host is None:
        host = next((c.path for c in containers if c.path in plain_init), None)
    owners = [c.path for c in containers if c.path not in plain_init or c.path == host]
    numbers = {path: f"{CLAIM_PREFIX}{n}" for n, path in enumerate(owners)}
    return [numbers[c.path] if c.path in numbers else numbers[host or ""] for c in containers]


def _is_sidecar(spec: PodSpec, container: GpuContainer) -> bool:
    index = int(container.path.rsplit("/", 1)[1])
    return ((spec.get("initContainers") or [])[index] or {}).get("restartPolicy") == "Always"


def claim_operations(
    spec: PodSpec, containers: Sequence[GpuContainer], gpu: str, template: str
) -> list[PatchOperation]:
    """Each GPU container loses the GPU resource and claims from `template` (claim_names)."""
    gpu_token = escape_pointer_token(gpu)
    operations: list[PatchOperation] = []
    names = claim_names(spec, containers)
    claims = [
        {"name": f"{CLAIM_PREFIX}{n}", "resourceClaimTemplateName": template}
        for n in range(len(set(names)))
    ]
    for container, claim in zip(containers, names, strict=True):
        resources = container.resources
        for field in QUANTITY_FIELDS:
            if gpu in (resources.get(field) or {}):
                path = f"{container.path}/resources/{field}/{gpu_token}"
                operations.append({"op": "remove", "path": path})
        # `add` sets the member whether or not an empty list is there.
        operations.append(
            {"op": "add", "path": f"{container.path}/resources/claims", "value": [{"name": claim}]}
        )
    if spec.get("resourceClaims") is None:
        operations.append({"op": "add", "path": "/spec/resourceClaims", "value": claims})
    else:
        operations += [
            {"op": "add", "path": "/spec/resourceClaims/-", "value": claim} for claim in claims
        ]
    return operations


def claims_left_alone(spec: PodSpec) -> LeftAlone | None:
    """Why a Pod is left alone by a backend that adds claims: it has its own, or it is bound by
    hand (claims are allocated by the scheduler; such a Pod never gets its devices)."""
    if spec.get("resourceClaims") or any(
        ((container or {}).get("resources") or {}).get("claims")
        for list_name in CONTAINER_LISTS
        for container in spec.get(list_name) or ()
    ):
        return LeftAlone("uses its own claims", "the Pod has its own resource claims")
    if spec.get("nodeName"):
        return LeftAlone("placed by hand", "spec.nodeName set by hand")
    return None


# Every template carries it: doctor and `kubectl get -l` find them by it.
PART_OF = ("app.kubernetes.io/part-of", "castslice")


def resource_claim_template(
    name: str, spec: Mapping[str, Any], namespace: str | None = None
) -> Manifest:
    """A ResourceClaimTemplate CastSlice ships (None: no namespace, `kubectl apply -n` sets it)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {PART_OF[0]: PART_OF[1]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": spec,
    }
