"""What the webhook asks of every backend (the placer), and the arithmetic they share.

What containers and the Pod become is asked of a backend's Placer; what the tools ask
(doctor's node checks, the report's GPU accounts, plan's layouts, policy mode's pools, the
extender's view) is asked of its tools apart (roles.py), which the webhook never loads.
No caller outside this package knows a backend by its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple

from castslice.contract.definitions import CONTAINER_LISTS, MAX_WARNING_LENGTH
from castslice.contract.gpu_memory import MemoryCap, memory_cap
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
from castslice.settings.config import MEBIBYTE, Config


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
    # The share of each of its GPUs' memory every GPU container holds where no MIG instance
    # bounds it, which the driver can cap (CASTSLICE_GPU_MEMORY); None: nothing to cap.
    memory_share: Fraction | None = None
    # Node labels whose value must be a whole number of at least this (a required node
    # affinity, `Gt` one less).
    labels_at_least: tuple[tuple[str, int], ...] = ()


# GPU Feature Discovery's labels of the driver's major version and of one GPU's memory in
# MiB, which say where GPU memory limits hold.
DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
GPU_MEMORY = "nvidia.com/gpu.memory"
# The first driver branch with NVML SetMemoryLimits_v1 (CUDA 13.4), which the toolkit's
# apply-cuda-memory-limits hook calls: kai-gpu-fractioning's minGPUDriverMajor
# (tests/upstream/kai-gpu-fractioning-2e66fcc-dependency-floors.go.txt).
ENFORCING_DRIVER = 615


class LeftAlone(NamedTuple):
    """Why a Pod is not changed: `reason` for the log line, `detail` for the user's warning."""

    reason: str
    detail: str


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


class Placer:
    """What the webhook asks of a backend, and policy mode's placement: where a slice count
    goes and what the Pod becomes. The defaults are those most backends share (the GPU
    resource swapped in each container, the placement's node labels required and
    forbidden); a backend overrides what differs. The tools' questions are answered apart
    (roles.py), so the webhook never loads them."""

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

    # Why GPU memory limits written for this backend's Pods hold on no node, or None where
    # the nodes carry GPU Feature Discovery's labels, which say where they hold.
    memory_limits_unenforced: ClassVar[str | None] = None

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

    def with_memory(self, placement: Placement, share: Fraction) -> Placement:
        """`placement` for GPU containers that hold `share` of each of their GPUs' memory:
        the share noted where CASTSLICE_GPU_MEMORY asks for limits, and the Pod kept on
        nodes whose driver enforces them and whose GPUs have that memory where
        CASTSLICE_GPU_MEMORY_ENFORCED_ONLY asks it and the nodes can say it."""
        memory = self.config.gpu_memory
        if memory is None or memory_cap(share, memory) is None:
            return placement
        at_least: tuple[tuple[str, int], ...] = ()
        if self.config.gpu_memory_enforced_only and self.memory_limits_unenforced is None:
            at_least = ((DRIVER_MAJOR, ENFORCING_DRIVER), (GPU_MEMORY, memory // MEBIBYTE))
        return placement._replace(
            memory_share=share, labels_at_least=placement.labels_at_least + at_least
        )

    def memory_statement(self, cap: MemoryCap, placement: Placement) -> str:
        """What the decision record, the audit annotation, the warning and preview say of a
        GPU memory cap: that the driver holds it, or where it does not."""
        if self.memory_limits_unenforced is not None:
            return (
                f"GPU memory limit {cap.limit} MiB ({cap.request} MiB guaranteed) written, "
                f"not enforced: {self.memory_limits_unenforced}"
            )
        if placement.labels_at_least:
            return cap.statement()
        return f"{cap.statement()} on nodes that enforce it (driver {ENFORCING_DRIVER}+, cgroup v2)"

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
        operations += required_expressions_operations(spec, node_expressions(placement))
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
        if any(
            (label_count(labels.get(key)) or 0) < least for key, least in placement.labels_at_least
        ):
            return False
        return not any(key in labels for key in placement.absent_node_labels)


def node_expressions(placement: Placement) -> list[dict[str, Any]]:
    """The required node affinity's expressions `placement` needs (none: no affinity)."""
    return [
        *label_in_expressions(placement.labels_in),
        *(
            {"key": key, "operator": "Gt", "values": [str(least - 1)]}
            for key, least in placement.labels_at_least
        ),
        *({"key": key, "operator": "DoesNotExist"} for key in placement.absent_node_labels),
    ]


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


def label_count(value: str | None) -> int | None:
    """A node label that counts something (replicas, clients per GPU), or None when it does not."""
    # ASCII digits only: "¹" is a digit to str.isdigit() and no number to int().
    return int(value) if value and value.isascii() and value.isdigit() and int(value) >= 1 else None


class SharingPoolPlacer(Placer):
    """A backend with node pools that share each GPU among a fixed number of clients.

    A fractional share goes to the pool found by `sharing_degree`; a share that
    no pool fits gets whole GPUs. Subclasses say what each looks like.
    """

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

    def whole(self, gpus: int) -> Placement:
        raise NotImplementedError


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
