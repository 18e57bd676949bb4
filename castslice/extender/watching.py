"""What the watches last said: the cluster's nodes, GPUs, claims and Pods as the extender
reads them, with the indexes that find a node's own Pods and devices.

GPUs are DRA devices (`resource.k8s.io/v1`) with a consumable capacity (`shares: S`, as
the NVIDIA DRA driver publishes them with `--consumable-shares=S`): a node's GPUs are
its ResourceSlices' devices, in the order the allocator tries them (slice by slice, each
slice's devices in its order); a device's free share is S less what the allocated claims
consume of it (`status.allocation.devices.results[].consumedCapacity`). A Pod's GPU
request is read from its claims (`status.resourceClaimStatuses`): `count` devices with
`capacity.requests[<capacity>]` shares of each.

Or GPUs are shared by node pools (`Pools`: the nvidia and gke backends): a node of a pool
of degree M offers M clients per GPU through the device plugin's count, and a Pod placed on
that pool (the backend's node selector) takes one client: 1/M of a GPU, in the pool's own
granularity (floor(1000 / M) thousandths). Which GPU each client runs on is the device
plugin's choice, made on the node and written nowhere the API server shows: the watches
say only how many clients a node's Pods hold (free_view.py spreads them). Whole-GPU
nodes (the backend's whole-GPU placement) hold whole GPUs, known exactly by their count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from castslice.backends import Placement
from castslice.backends.roles import ExtenderView
from castslice.contract import Manifest
from castslice.contract.scheduling import allocatable, count, pod_request
from castslice.extender.fragmentation import MILLI, WHOLE, PodShape, client_milli, cpu_per_gpu

# GPU Feature Discovery's product label (NVIDIA/k8s-device-plugin, gpu-feature-discovery:
# `nvidia.com/gpu.product`): the model a Pod's node affinity selects by.
MODEL_LABEL = "nvidia.com/gpu.product"
# Pods whose resources are released: they hold nothing on their node.
_DONE = ("Succeeded", "Failed")
# A node's Pods whose shape is not known yet (their claims not seen) are retried at most
# this many at a time per score call, so a backlog never slows a call down much.
_RESOLVE_BATCH = 256
# GPU Pod shapes remembered at most (the rare ones among them break the extender's ties,
# fragmentation.rare_shapes); the openb trace's 8,152 tasks have 126.
_SEEN_SHAPES = 4096


@dataclass
class Claim:
    # (devices, shares of each) per request
    requests: list[tuple[int, int]]
    # (device key, shares consumed)
    allocated: list[tuple[str, int]]


@dataclass
class Pod:
    node: str
    cpu_milli: int
    memory: int
    namespace: str
    claims: tuple[str, ...]
    gpus_plain: int
    models: tuple[str, ...]
    done: bool
    shape: PodShape | None = None
    # With pools: the pool the Pod's node selector asks for, the units of its resource it
    # asks, and the units of each pool resource it holds on its node.
    pool: str = ""
    pool_units: int = 0
    holds: dict[str, int] = field(default_factory=dict)


@dataclass
class Node:
    cpu_milli: int
    memory: int
    model: str
    # With pools: the node's pool, the resource its clients are counted in, its GPUs and
    # the clients each offers.
    pool: str = ""
    resource: str = ""
    gpus: int = 0
    clients: int = 1


class Pools:
    """A pool backend's node pools, as its placements select them: which pool a node is
    in and which one a Pod asks for. Nothing here branches on the backend: its sharing
    pools, its whole-GPU placement, and which nodes serve each are the backend's answers."""

    def __init__(self, backend: ExtenderView) -> None:
        self.backend = backend
        self.sharing: list[tuple[int, Placement]] = sorted((backend.sharing_pools() or {}).items())
        # A share of a whole GPU or more: the backend's whole-GPU placement.
        self.whole = backend.place(backend.config.slices_per_gpu)
        self.resources = sorted(
            {placement.resource for _, placement in self.sharing} | {self.whole.resource}
        )

    def node(self, item: Manifest, labels: dict[str, str]) -> tuple[str, str, int, int]:
        """(pool, resource, GPUs, clients per GPU) of a node; ("", "", 0, 1) off every pool."""
        for degree, placement in self.sharing:
            if self.backend.serves(labels, placement):
                clients = allocatable(item, placement.resource)
                return str(degree), placement.resource, -(-clients // degree), degree
        if self.backend.serves(labels, self.whole):
            return WHOLE, self.whole.resource, allocatable(item, self.whole.resource), 1
        return "", "", 0, 1

    def pod(self, item: Manifest) -> tuple[str, int]:
        """(pool, units asked) of a Pod: the sharing pool whose labels its node selector
        requires, else whole GPUs if it asks for the GPU resource, else ("", 0).

        A Pod asking for the GPU resource with no pool's labels is taken for a whole-GPU
        Pod; on GKE it may land on a sharing node, where it gets a client's share.
        """
        selector = (item.get("spec") or {}).get("nodeSelector") or {}
        for degree, placement in self.sharing:
            if placement.node_selector.items() <= selector.items():
                return str(degree), pod_request(item, placement.resource)
        units = pod_request(item, self.whole.resource)
        return (WHOLE, units) if units else ("", 0)


@dataclass
class Watched:
    """The tables the watch events keep, and their indexes: node -> Pod uids, node -> slice
    names, device key -> node, device key -> shares the allocated claims consume of it. A
    node's free resources are counted from its own Pods and devices through them."""

    capacity: str
    shares_per_gpu: int
    gpu_resource: str = "nvidia.com/gpu"
    # A pool backend's pools; None: GPUs are DRA devices.
    pools: Pools | None = None
    nodes: dict[str, Node] = field(default_factory=dict)
    # slice name -> (node, [(device key, shares offered)])
    slices: dict[str, tuple[str, list[tuple[str, int]]]] = field(default_factory=dict)
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    unresolved: set[str] = field(default_factory=set)
    # Pods whose shape became known since the view began.
    resolved: int = 0
    # The distinct shapes of Pods asking for GPUs seen since the view began, Pods gone
    # included (at most _SEEN_SHAPES, then begun again).
    seen: set[PodShape] = field(default_factory=set)
    # Whether a Pod bound to a node has left it (deleted, or finished) since the view began.
    departed: bool = False
    pods_on: dict[str, set[str]] = field(default_factory=dict)
    slices_on: dict[str, set[str]] = field(default_factory=dict)
    device_node: dict[str, str] = field(default_factory=dict)
    consumed: dict[str, int] = field(default_factory=dict)

    def table(self, kind: str) -> dict[Any, Any]:
        tables: dict[str, dict[Any, Any]] = {
            "nodes": self.nodes,
            "resourceslices": self.slices,
            "resourceclaims": self.claims,
            "pods": self.pods,
        }
        return tables[kind]

    def replace(self, kind: str, items: Iterable[Manifest]) -> None:
        """A fresh list of `kind`: drop what was known of it, add every item, index again."""
        self.table(kind).clear()
        for item in items:
            self.record(kind, "ADDED", item, index=False)
        self._reindex()

    def record(self, kind: str, event: str, item: Manifest, index: bool = True) -> set[str]:
        """Record one object; with `index`, keep the indexes. The nodes whose free resources
        it may change (before and after), for the free view to count again."""
        metadata = item.get("metadata") or {}
        name = metadata.get("name") or ""
        if kind == "nodes":
            if event == "DELETED":
                self.nodes.pop(name, None)
            else:
                labels = metadata.get("labels") or {}
                self.nodes[name] = Node(
                    milli(((item.get("status") or {}).get("allocatable") or {}).get("cpu")),
                    allocatable(item, "memory"),
                    labels.get(MODEL_LABEL, ""),
                    *(self.pools.node(item, labels) if self.pools is not None else ()),
                )
            return {name}
        if kind == "resourceslices":
            old_slice = self.slices.get(name)
            if event == "DELETED":
                self.slices.pop(name, None)
            else:
                self.slices[name] = _read_slice(item, self.capacity)
            return self._index_slice(name, old_slice, self.slices.get(name)) if index else set()
        if kind == "resourceclaims":
            key = (metadata.get("namespace") or "", name)
            old_claim = self.claims.get(key)
            if event == "DELETED":
                self.claims.pop(key, None)
            else:
                self.claims[key] = _read_claim(item, self.capacity)
            return self._index_claim(old_claim, self.claims.get(key)) if index else set()
        uid = uid_of(item)
        known = self.pods.get(uid)
        if event == "DELETED":
            gone = self.pods.pop(uid, None)
            self.departed = self.departed or bool(gone and gone.node)
            if gone is not None and uid in self.unresolved:
                # Gone before a score call resolved it: its shape is remembered all the same.
                shape = self.shape(gone)
                if shape is not None:
                    self._remember(shape)
            self.unresolved.discard(uid)
        else:
            pod = self.read_pod(item)
            self.departed = self.departed or bool(pod.node and pod.done)
            if known is not None and known.shape is not None:
                pod.shape = known.shape
            self.pods[uid] = pod
            if pod.shape is None:
                self.unresolved.add(uid)
        return self._index_pod(uid, known, self.pods.get(uid)) if index else set()

    # ---- the indexes: each event moves what it changed, and names the nodes it touched

    def _index_pod(self, uid: str, old: Pod | None, new: Pod | None) -> set[str]:
        if old is not None and new is not None and holding(old) == holding(new):
            # Most Pod events change nothing its node counts (status, labels).
            return set()
        if old is not None:
            self.pods_on.get(old.node, set()).discard(uid)
        if new is not None:
            self.pods_on.setdefault(new.node, set()).add(uid)
        return {pod.node for pod in (old, new) if pod is not None}

    def _index_slice(
        self,
        name: str,
        old: tuple[str, list[tuple[str, int]]] | None,
        new: tuple[str, list[tuple[str, int]]] | None,
    ) -> set[str]:
        touched = set()
        if old is not None:
            node_name, devices = old
            touched.add(node_name)
            self.slices_on.get(node_name, set()).discard(name)
            for key, _ in devices:
                if self.device_node.get(key) == node_name:
                    del self.device_node[key]
        if new is not None:
            node_name, devices = new
            touched.add(node_name)
            self.slices_on.setdefault(node_name, set()).add(name)
            for key, _ in devices:
                self.device_node[key] = node_name
        return touched

    def _index_claim(self, old: Claim | None, new: Claim | None) -> set[str]:
        if old is not None and new is not None and old.allocated == new.allocated:
            return set()
        touched = set()
        for claim, sign in ((old, -1), (new, 1)):
            if claim is None:
                continue
            for key, shares in claim.allocated:
                self.consumed[key] = self.consumed.get(key, 0) + sign * shares
                if not self.consumed[key]:
                    del self.consumed[key]
                node_name = self.device_node.get(key)
                if node_name is not None:
                    touched.add(node_name)
        return touched

    def _reindex(self) -> None:
        """Every index again from the tables: after a fresh list."""
        self.pods_on, self.slices_on = {}, {}
        self.device_node, self.consumed = {}, {}
        for uid, pod in self.pods.items():
            self.pods_on.setdefault(pod.node, set()).add(uid)
        for name, (node_name, devices) in self.slices.items():
            self.slices_on.setdefault(node_name, set()).add(name)
            for key, _ in devices:
                self.device_node[key] = node_name
        for claim in self.claims.values():
            for key, shares in claim.allocated:
                self.consumed[key] = self.consumed.get(key, 0) + shares

    def gpus_per_model(self) -> dict[str, int]:
        """The GPUs of each model over the nodes (a node without a model counts for none):
        its pool's GPUs where GPUs are shared by node pools, else its devices."""
        gpus: dict[str, int] = {}
        for name, node in self.nodes.items():
            if node.model:
                gpus[node.model] = gpus.get(node.model, 0) + self._gpus_on(name, node)
        return gpus

    def cpu_per_gpu(self) -> float:
        """The CPU thousandths the nodes with GPUs have per GPU thousandth (0: no GPUs)."""
        return cpu_per_gpu(
            (node.cpu_milli, self._gpus_on(name, node)) for name, node in self.nodes.items()
        )

    def _gpus_on(self, name: str, node: Node) -> int:
        return node.gpus if self.pools is not None else len(self.devices_of(name))

    def devices_of(self, node: str) -> list[tuple[str, int]]:
        """(device key, shares offered) of the node's GPUs, in the order the allocator's
        first fit and the node's free list take them."""
        return [
            device
            for slice_name in sorted(self.slices_on.get(node, ()))
            for device in self.slices[slice_name][1]
        ]

    def places(self, node: str, claim: Claim) -> set[int]:
        """The places among the node's GPUs (`devices_of`) of a claim's devices."""
        keys = [key for key, _ in self.devices_of(node)]
        return {keys.index(key) for key, _ in claim.allocated if key in keys}

    # ---- reading Pods

    def read_pod(self, item: Manifest) -> Pod:
        metadata, spec = item.get("metadata") or {}, item.get("spec") or {}
        status = item.get("status") or {}
        made = {
            claim.get("name"): claim["resourceClaimName"]
            for claim in status.get("resourceClaimStatuses") or ()
            if claim.get("resourceClaimName")
        }
        # A claim from a template is named in the status once the controller made it.
        claims = tuple(
            claim.get("resourceClaimName") or made.get(claim.get("name")) or ""
            for claim in spec.get("resourceClaims") or ()
        )
        return Pod(
            node=spec.get("nodeName") or "",
            cpu_milli=_milli_request(item),
            memory=pod_request(item, "memory"),
            namespace=metadata.get("namespace") or "",
            claims=claims,
            gpus_plain=pod_request(item, self.gpu_resource),
            models=_models(spec),
            done=status.get("phase") in _DONE,
            **self._pool_fields(item),
        )

    def _pool_fields(self, item: Manifest) -> dict[str, Any]:
        if self.pools is None:
            return {}
        pool, units = self.pools.pod(item)
        holds = {
            resource: held
            for resource in self.pools.resources
            if (held := pod_request(item, resource))
        }
        return {"pool": pool, "pool_units": units, "holds": holds}

    # ---- reading

    def shape(self, pod: Pod) -> PodShape | None:
        """The Pod's shape, or None while a claim it names is not made or not seen yet."""
        if self.pools is not None:
            if not pod.pool_units:
                return PodShape(pod.cpu_milli, 0, 0, pod.models, pod.memory)
            return PodShape(pod.cpu_milli, client_milli(pod.pool), pod.pool_units, pod.models,
                            pod.memory, pod.pool)  # fmt: skip
        gpus, milli = 0, 0
        for claim_name in pod.claims:
            claim = self.claims.get((pod.namespace, claim_name)) if claim_name else None
            if claim is None:
                return None
            for devices, shares in claim.requests:
                gpus += devices
                # No capacity asked: the device is the claim's alone.
                share = shares * MILLI // self.shares_per_gpu if shares else MILLI
                milli = max(milli, min(share, MILLI))
        if pod.gpus_plain:
            gpus, milli = gpus + pod.gpus_plain, MILLI
        return PodShape(pod.cpu_milli, milli if gpus else 0, gpus, pod.models, pod.memory)

    def resolve(self) -> None:
        for uid in list(self.unresolved)[:_RESOLVE_BATCH]:
            pod = self.pods.get(uid)
            if pod is None:
                self.unresolved.discard(uid)
                continue
            shape = self.shape(pod)
            if shape is not None:
                pod.shape = shape
                self.unresolved.discard(uid)
                self.resolved += 1
                self._remember(shape)

    def _remember(self, shape: PodShape) -> None:
        if shape.gpus and shape not in self.seen:
            if len(self.seen) >= _SEEN_SHAPES:
                self.seen.clear()
            self.seen.add(shape)


def uid_of(pod: Manifest) -> str:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or metadata.get("name") or "")


def holding(pod: Pod) -> tuple[object, ...]:
    """What of a Pod its node's free resources count."""
    return pod.node, pod.cpu_milli, pod.memory, pod.done, tuple(sorted(pod.holds.items()))


def milli(value: object) -> int:
    if value is None:
        return 0
    from kubernetes.utils import parse_quantity

    try:
        return int(parse_quantity(value) * MILLI)
    except ValueError:
        return 0


def _milli_request(pod: Manifest) -> int:
    spec = pod.get("spec") or {}

    def asked(container: Manifest) -> int:
        return milli(((container.get("resources") or {}).get("requests") or {}).get("cpu"))

    running = sum(asked(container) for container in spec.get("containers") or ())
    init = max((asked(container) for container in spec.get("initContainers") or ()), default=0)
    return max(running, init)


def _models(spec: Manifest) -> tuple[str, ...]:
    """The GPU models a Pod's required node affinity allows (one term, `In` on the label)."""
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = affinity.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return ()
    for expression in terms[0].get("matchExpressions") or ():
        if expression.get("key") == MODEL_LABEL and expression.get("operator") == "In":
            return tuple(sorted(expression.get("values") or ()))
    selector = (spec.get("nodeSelector") or {}).get(MODEL_LABEL)
    return (selector,) if selector else ()


def _read_slice(item: Manifest, capacity: str) -> tuple[str, list[tuple[str, int]]]:
    spec = item.get("spec") or {}
    pool = (spec.get("pool") or {}).get("name") or ""
    driver = spec.get("driver") or ""
    devices = []
    for device in spec.get("devices") or ():
        offered = count(((device.get("capacity") or {}).get(capacity) or {}).get("value")) or 1
        devices.append((f"{driver}/{pool}/{device.get('name') or ''}", offered))
    return spec.get("nodeName") or "", devices


def _read_claim(item: Manifest, capacity: str) -> Claim:
    spec_devices = (item.get("spec") or {}).get("devices") or {}
    requests = []
    for request in spec_devices.get("requests") or ():
        exactly = request.get("exactly") or {}
        devices = int(exactly.get("count") or 1)
        shares = count(((exactly.get("capacity") or {}).get("requests") or {}).get(capacity))
        requests.append((devices, shares))
    allocation = ((item.get("status") or {}).get("allocation") or {}).get("devices") or {}
    allocated = []
    for result in allocation.get("results") or ():
        key = (
            f"{result.get('driver') or ''}/{result.get('pool') or ''}/{result.get('device') or ''}"
        )
        consumed = (result.get("consumedCapacity") or {}).get(capacity)
        # A device allocated without consumable capacity is the claim's alone.
        allocated.append((key, count(consumed) if consumed is not None else 1 << 30))
    return Claim(requests, allocated)
