"""What the extender knows of the cluster: each node's free CPU, memory and GPU shares, and
the Pod shapes it has seen, kept up to date from watch events and read to score a Pod.

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
plugin's choice, made on the node and written nowhere the API server shows; the view knows
only how many clients a node's Pods hold, and spreads them over its GPUs as the NVIDIA
device plugin's default allocation policy does (`distributed`: each client to the GPU with
the fewest, NVIDIA/k8s-device-plugin internal/rm/allocate.go, commit 046b76bb). Whole-GPU
nodes (the backend's whole-GPU placement) hold whole GPUs, known exactly by their count.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from castslice.backends.base import Backend, Placement
from castslice.contract.scheduling import allocatable, count, pod_request
from castslice.extender.fragmentation import (
    MILLI,
    NodeFree,
    PodShape,
    Scorer,
    tie_broken,
    typical_pods,
)

Manifest = dict[str, Any]

# GPU Feature Discovery's product label (NVIDIA/k8s-device-plugin, gpu-feature-discovery:
# `nvidia.com/gpu.product`): the model a Pod's node affinity selects by.
MODEL_LABEL = "nvidia.com/gpu.product"
# Pods whose resources are released: they hold nothing on their node.
_DONE = ("Succeeded", "Failed")
# The typical Pods are learnt again once the Pods seen have grown by this share: between
# two lessons the node fragmentations and scores computed stay valid and are remembered.
_RELEARN = 1.05
# Scores remembered per node (one per Pod shape asked about) at most; past it they are
# forgotten at once.
_SCORES_PER_NODE = 256
# How long a Pod is counted where the extender's best score sent it, if the watch never
# shows it bound there (kube-scheduler placed it elsewhere, or could not bind it).
EXPECTED_FOR = 30.0
EXPECTATION_OUTCOMES = (
    "bound where expected", "bound elsewhere", "lapsed", "devices as expected",
    "devices elsewhere",
)  # fmt: skip
# A node's Pods whose shape is not known yet (their claims not seen) are retried at most
# this many at a time per score call, so a backlog never slows a call down much.
_RESOLVE_BATCH = 256


@dataclass
class _Claim:
    # (devices, shares of each) per request
    requests: list[tuple[int, int]]
    # (device key, shares consumed)
    allocated: list[tuple[str, int]]


@dataclass
class _Pod:
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
class _Expected:
    """A Pod counted on the node the extender's best score sent it to, before the watch
    shows it there: kube-scheduler binds in the background and takes the next Pod at once,
    so without this the next Pods are scored as if the last ones were not placed yet.
    Each part is counted until the watch shows it: CPU, memory and pool clients until the
    Pod is seen on the node, the GPU shares until its claims are seen allocated."""

    node: str
    cpu_milli: int
    memory: int
    units: int
    # (the device's place among the node's GPUs, thousandths taken)
    gpus: tuple[tuple[int, int], ...]
    claims: set[tuple[str, str]]
    bound: bool
    until: float


@dataclass
class _Node:
    cpu_milli: int
    memory: int
    model: str
    # With pools: the node's pool, the resource its clients are counted in, its GPUs and
    # the clients each offers.
    pool: str = ""
    resource: str = ""
    gpus: int = 0
    clients: int = 1


# The pool of whole-GPU nodes, beside the sharing pools named by their degree.
WHOLE = "whole"


class Pools:
    """A pool backend's node pools, as its placements select them: which pool a node is
    in and which one a Pod asks for. Nothing here branches on the backend: its sharing
    pools, its whole-GPU placement, and which nodes serve each are the backend's answers."""

    def __init__(self, backend: Backend) -> None:
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


def spread_clients(gpus: int, clients: int, held: int) -> tuple[int, ...]:
    """Each GPU's free thousandths when `held` of its node's `clients`-per-GPU clients are
    taken, spread as the device plugin's `distributed` policy spreads them (each to the GPU
    with the fewest), most free first: the GPU the next client gets comes first."""
    if not gpus:
        return ()
    fewest, more = divmod(max(held, 0), gpus)
    taken = [min(clients, fewest + (index < more)) for index in range(gpus)]
    return tuple(sorted(((clients - used) * MILLI // clients for used in taken), reverse=True))


@dataclass
class _Known:
    """A node's free resources and its scores per Pod shape, valid until an event touches
    the node or the typical Pods are learnt again."""

    free: NodeFree | None
    # Pod shape's number (`ClusterView._shape_numbers`) -> score
    scores: dict[int, int] = field(default_factory=dict)


@dataclass
class ClusterView:
    """The cluster as the watches last said; every method takes the lock."""

    capacity: str
    shares_per_gpu: int
    gpu_resource: str = "nvidia.com/gpu"
    # A pool backend's pools; None: GPUs are DRA devices.
    pools: Pools | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _nodes: dict[str, _Node] = field(default_factory=dict)
    # slice name -> (node, [(device key, shares offered)])
    _slices: dict[str, tuple[str, list[tuple[str, int]]]] = field(default_factory=dict)
    _claims: dict[tuple[str, str], _Claim] = field(default_factory=dict)
    _pods: dict[str, _Pod] = field(default_factory=dict)
    _unresolved: set[str] = field(default_factory=set)
    _typical: list[tuple[PodShape, float]] | None = None
    _learnt_from: int = 0
    _resolved: int = 0
    _scorer: Scorer = field(default_factory=lambda: Scorer([]))
    # Indexes the watch events keep, so a node's free resources are counted from its own
    # Pods and devices: node -> Pod uids, node -> slice names, device key -> node, device
    # key -> shares the allocated claims consume of it.
    _pods_on: dict[str, set[str]] = field(default_factory=dict)
    _slices_on: dict[str, set[str]] = field(default_factory=dict)
    _device_node: dict[str, str] = field(default_factory=dict)
    _consumed: dict[str, int] = field(default_factory=dict)
    # What is known of each node; an event that touches a node forgets its entry.
    _known: dict[str, _Known] = field(default_factory=dict)
    # A number per Pod shape asked about, so each node's remembered scores are looked up by
    # a small integer rather than by hashing the shape once per node.
    _shape_numbers: dict[PodShape, int] = field(default_factory=dict)
    # Pods counted where they are expected (`_Expected`): Pod uid -> expectation, node ->
    # Pod uids, claim -> Pod uid.
    _expected: dict[str, _Expected] = field(default_factory=dict)
    _expected_on: dict[str, set[str]] = field(default_factory=dict)
    _expected_claims: dict[tuple[str, str], str] = field(default_factory=dict)
    # How expectations ended (`EXPECTATION_OUTCOMES`): whether kube-scheduler follows the
    # extender's best node and the allocator the device first fit predicts, for an
    # operator to read.
    outcomes: Counter[str] = field(default_factory=Counter)
    clock: Callable[[], float] = time.monotonic

    # ---- watch events

    def replace(self, kind: str, items: Iterable[Manifest]) -> None:
        """A fresh list of `kind`: drop what was known of it, then add every item."""
        with self._lock:
            self._table(kind).clear()
            for item in items:
                self._apply(kind, "ADDED", item, index=False)
            self._reindex()
            for uid in list(self._expected):
                self._settle(uid)

    def apply(self, kind: str, event: str, item: Manifest) -> None:
        with self._lock:
            self._apply(kind, event, item)

    def _table(self, kind: str) -> dict[Any, Any]:
        tables: dict[str, dict[Any, Any]] = {
            "nodes": self._nodes,
            "resourceslices": self._slices,
            "resourceclaims": self._claims,
            "pods": self._pods,
        }
        return tables[kind]

    def _apply(self, kind: str, event: str, item: Manifest, index: bool = True) -> None:
        """Record one object; with `index`, keep the indexes and forget what is known of
        the nodes it touches (before and after), else leave that to `_reindex`."""
        metadata = item.get("metadata") or {}
        name = metadata.get("name") or ""
        if kind == "nodes":
            if event == "DELETED":
                self._nodes.pop(name, None)
            else:
                labels = metadata.get("labels") or {}
                self._nodes[name] = _Node(
                    _milli(((item.get("status") or {}).get("allocatable") or {}).get("cpu")),
                    allocatable(item, "memory"),
                    labels.get(MODEL_LABEL, ""),
                    *(self.pools.node(item, labels) if self.pools is not None else ()),
                )
            if index:
                self._known.pop(name, None)
        elif kind == "resourceslices":
            old_slice = self._slices.get(name)
            if event == "DELETED":
                self._slices.pop(name, None)
            else:
                self._slices[name] = _read_slice(item, self.capacity)
            if index:
                self._index_slice(name, old_slice, self._slices.get(name))
        elif kind == "resourceclaims":
            key = (metadata.get("namespace") or "", name)
            old_claim = self._claims.get(key)
            if event == "DELETED":
                self._claims.pop(key, None)
            else:
                self._claims[key] = _read_claim(item, self.capacity)
            if index:
                self._index_claim(old_claim, self._claims.get(key))
                if key in self._expected_claims:
                    self._settle(self._expected_claims[key])
        elif kind == "pods":
            uid = _uid(item)
            known = self._pods.get(uid)
            if event == "DELETED":
                self._pods.pop(uid, None)
                self._unresolved.discard(uid)
            else:
                pod = self._read_pod(item)
                if known is not None and known.shape is not None:
                    pod.shape = known.shape
                self._pods[uid] = pod
                if pod.shape is None:
                    self._unresolved.add(uid)
            if index:
                self._index_pod(uid, known, self._pods.get(uid))
                if uid in self._expected:
                    self._settle(uid, deleted=event == "DELETED")

    # ---- the indexes: each event moves what it changed, and forgets its nodes' entries

    def _index_pod(self, uid: str, old: _Pod | None, new: _Pod | None) -> None:
        if old is not None and new is not None and _holding(old) == _holding(new):
            # Most Pod events change nothing its node counts (status, labels).
            return
        for pod in (old, new):
            if pod is not None:
                self._known.pop(pod.node, None)
        if old is not None:
            self._pods_on.get(old.node, set()).discard(uid)
        if new is not None:
            self._pods_on.setdefault(new.node, set()).add(uid)

    def _index_slice(
        self,
        name: str,
        old: tuple[str, list[tuple[str, int]]] | None,
        new: tuple[str, list[tuple[str, int]]] | None,
    ) -> None:
        if old is not None:
            node_name, devices = old
            self._known.pop(node_name, None)
            self._slices_on.get(node_name, set()).discard(name)
            for key, _ in devices:
                if self._device_node.get(key) == node_name:
                    del self._device_node[key]
        if new is not None:
            node_name, devices = new
            self._known.pop(node_name, None)
            self._slices_on.setdefault(node_name, set()).add(name)
            for key, _ in devices:
                self._device_node[key] = node_name

    def _index_claim(self, old: _Claim | None, new: _Claim | None) -> None:
        if old is not None and new is not None and old.allocated == new.allocated:
            return
        for claim, sign in ((old, -1), (new, 1)):
            if claim is None:
                continue
            for key, shares in claim.allocated:
                self._consumed[key] = self._consumed.get(key, 0) + sign * shares
                if not self._consumed[key]:
                    del self._consumed[key]
                node_name = self._device_node.get(key)
                if node_name is not None:
                    self._known.pop(node_name, None)

    def _reindex(self) -> None:
        """Every index again from the tables, and nothing known: after a fresh list."""
        self._known.clear()
        self._pods_on, self._slices_on = {}, {}
        self._device_node, self._consumed = {}, {}
        for uid, pod in self._pods.items():
            self._pods_on.setdefault(pod.node, set()).add(uid)
        for name, (node_name, devices) in self._slices.items():
            self._slices_on.setdefault(node_name, set()).add(name)
            for key, _ in devices:
                self._device_node[key] = node_name
        for claim in self._claims.values():
            for key, shares in claim.allocated:
                self._consumed[key] = self._consumed.get(key, 0) + shares

    def _free(self, name: str) -> NodeFree | None:
        """The node's free resources from its own Pods and devices (what `_frees` counts
        over the whole cluster)."""
        node = self._nodes.get(name)
        if node is None:
            return None
        cpu, memory, held = node.cpu_milli, node.memory, 0
        for uid in self._pods_on.get(name, ()):
            pod = self._pods[uid]
            if not pod.done:
                cpu -= pod.cpu_milli
                memory -= pod.memory
                held += pod.holds.get(node.resource, 0)
        gpus: list[int] = []
        if self.pools is None:
            gpus = [
                max(0, offered - self._consumed.get(key, 0)) * MILLI // offered
                for key, offered in self._devices_of(name)
            ]
        return self._node_free(name, cpu, memory, held, gpus)

    def _devices_of(self, node: str) -> list[tuple[str, int]]:
        """(device key, shares offered) of the node's GPUs, in the order the allocator's
        first fit and the node's free list take them."""
        return [
            device
            for slice_name in sorted(self._slices_on.get(node, ()))
            for device in self._slices[slice_name][1]
        ]

    def _node_free(self, name: str, cpu: int, memory: int, held: int, gpus: list[int]) -> NodeFree:
        """The node's free resources from what its Pods and claims leave, less what the
        Pods expected there (`_Expected`) take that the watch has not shown yet."""
        node = self._nodes[name]
        for uid in self._expected_on.get(name, ()):
            expected = self._expected[uid]
            if not expected.bound:
                cpu -= expected.cpu_milli
                memory -= expected.memory
                held += expected.units
            if expected.claims:
                for place, milli in expected.gpus:
                    if place < len(gpus):
                        gpus[place] = max(0, gpus[place] - milli)
        if self.pools is not None:
            return NodeFree(
                cpu, spread_clients(node.gpus, node.clients, held), node.model, memory, node.pool
            )
        return NodeFree(cpu, tuple(gpus), node.model, memory)

    # ---- where Pods are expected

    def _settle(self, uid: str, deleted: bool = False) -> None:
        """Count no longer what the watch now shows of an expected Pod; forget it once the
        watch shows all of it, or shows it gone, done or on another node."""
        expected = self._expected.get(uid)
        if expected is None:
            return
        pod = self._pods.get(uid)
        if pod is not None and pod.node and pod.node != expected.node:
            self.outcomes["bound elsewhere"] += 1
        if deleted or (pod is not None and (pod.done or (pod.node and pod.node != expected.node))):
            self._forget_expected(uid)
            return
        changed = False
        if pod is not None and pod.node and not expected.bound:
            expected.bound = changed = True
            self.outcomes["bound where expected"] += 1
        for key in list(expected.claims):
            claim = self._claims.get(key)
            if claim is not None and claim.allocated and expected.gpus:
                self.outcomes[
                    "devices as expected"
                    if self._places(expected.node, claim) == {place for place, _ in expected.gpus}
                    else "devices elsewhere"
                ] += 1
            if claim is None or claim.allocated:
                # Allocated (its shares are counted from the watch now), or deleted.
                expected.claims.discard(key)
                self._expected_claims.pop(key, None)
                changed = True
        if expected.bound and not expected.claims:
            self._forget_expected(uid)
        elif changed:
            self._known.pop(expected.node, None)

    def _forget_expected(self, uid: str) -> None:
        expected = self._expected.pop(uid, None)
        if expected is None:
            return
        self._expected_on.get(expected.node, set()).discard(uid)
        for key in expected.claims:
            self._expected_claims.pop(key, None)
        self._known.pop(expected.node, None)

    def _places(self, node: str, claim: _Claim) -> set[int]:
        """The places among the node's GPUs (`_devices_of`) of a claim's devices."""
        keys = [key for key, _ in self._devices_of(node)]
        return {keys.index(key) for key, _ in claim.allocated if key in keys}

    def _expire(self) -> None:
        now = self.clock()
        for uid in [uid for uid, expected in self._expected.items() if expected.until <= now]:
            if not self._expected[uid].bound:
                self.outcomes["lapsed"] += 1
            self._forget_expected(uid)

    def _known_of(self, name: str) -> _Known:
        known = self._known.get(name)
        if known is None:
            known = self._known[name] = _Known(self._free(name))
        return known

    def _read_pod(self, item: Manifest) -> _Pod:
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
        return _Pod(
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

    def _shape(self, pod: _Pod) -> PodShape | None:
        """The Pod's shape, or None while a claim it names is not made or not seen yet."""
        if self.pools is not None:
            if not pod.pool_units:
                return PodShape(pod.cpu_milli, 0, 0, pod.models, pod.memory)
            # A client of a pool of degree M: 1/M of one GPU per unit, each on its own GPU
            # as the `distributed` policy spreads them; whole GPUs on the whole-GPU pool.
            milli = MILLI if pod.pool == WHOLE else MILLI // int(pod.pool)
            return PodShape(pod.cpu_milli, milli, pod.pool_units, pod.models, pod.memory, pod.pool)
        gpus, milli = 0, 0
        for claim_name in pod.claims:
            claim = self._claims.get((pod.namespace, claim_name)) if claim_name else None
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

    def _resolve(self) -> None:
        for uid in list(self._unresolved)[:_RESOLVE_BATCH]:
            pod = self._pods.get(uid)
            if pod is None:
                self._unresolved.discard(uid)
                continue
            shape = self._shape(pod)
            if shape is not None:
                pod.shape = shape
                self._unresolved.discard(uid)
                self._resolved += 1

    def typical(self) -> list[tuple[PodShape, float]]:
        with self._lock:
            return self._typical_locked()

    def _typical_locked(self) -> list[tuple[PodShape, float]]:
        self._resolve()
        if self._typical is None or self._resolved >= self._learnt_from * _RELEARN:
            shapes = [pod.shape for pod in self._pods.values() if pod.shape is not None]
            self._typical = typical_pods(shapes)
            self._learnt_from = self._resolved = len(shapes)
            self._scorer = Scorer(self._typical)
            # Every score was over the old typical Pods; the free resources stay.
            for known in self._known.values():
                known.scores.clear()
            self._shape_numbers.clear()
        return self._typical

    def free(self, node_name: str) -> NodeFree | None:
        with self._lock:
            return self._known_of(node_name).free

    def recounted(self, node_name: str) -> NodeFree | None:
        """The node's free resources counted again over every Pod and claim, as `free`
        must find them (for an operator's check and the tests)."""
        with self._lock:
            return self._frees([node_name]).get(node_name)

    def shape(self, pod: Manifest) -> PodShape | None:
        """What `pod` asks of a node as the view scores it (None: a claim not seen yet)."""
        read = self._read_pod(pod)
        with self._lock:
            return self._shape(read)

    def missing_claims(self, pod: Manifest) -> list[tuple[str, str]]:
        """The claims `pod` names that the view has not seen (yet)."""
        read = self._read_pod(pod)
        with self._lock:
            return [
                (read.namespace, name)
                for name in read.claims
                if name and (read.namespace, name) not in self._claims
            ]

    def scores(self, pod: Manifest, node_names: Sequence[str]) -> list[tuple[str, int]]:
        """Each node's score for placing `pod` there (nodes the view does not know: 0).

        A Pod whose claims are not known gets 0 everywhere: no opinion.
        """
        read = self._read_pod(pod)
        with self._lock:
            self._expire()
            self._typical_locked()
            shape = self._shape(read)
            if shape is None:
                return [(name, 0) for name in node_names]
            number = self._shape_numbers.setdefault(shape, len(self._shape_numbers))
            scorer, scored = self._scorer, []
            for name in node_names:
                known = self._known_of(name)
                score = known.scores.get(number)
                if score is None:
                    if known.free is None:
                        score = 0
                    else:
                        if len(known.scores) >= _SCORES_PER_NODE:
                            known.scores.clear()
                        score = known.scores[number] = scorer.score(known.free, shape)
                scored.append((name, score))
            return scored

    def prioritize(self, pod: Manifest, node_names: Sequence[str]) -> list[tuple[str, int]]:
        """The extender's answer: `scores`, ties broken by name (`tie_broken`); and the Pod
        counted on the best of them until the watch shows where it went (`_Expected`),
        since kube-scheduler takes the best total and the extender's is the only score
        the shipped profile leaves that tells nodes apart."""
        uid = _uid(pod)
        with self._lock:
            # A Pod tried again is scored without its own earlier expectation.
            self._forget_expected(uid)
            # The watch often trails kube-scheduler by the very Pod it asks about (its claim
            # statuses not shown yet). Scored without it, the typical Pods would be learnt
            # from one Pod fewer or not depending on that race, which moves where the next
            # relearning falls and so the scores: the Pod as kube-scheduler sends it counts.
            known = self._pods.get(uid)
            if known is None or (
                known.shape is None and known.claims != self._read_pod(pod).claims
            ):
                self._apply("pods", "MODIFIED", pod)
        scored = tie_broken(self.scores(pod, node_names))
        best = max(scored, key=lambda item: item[1], default=None)
        if best is not None and best[1] > 0:
            self.expect(pod, best[0])
        return scored

    def expect(self, pod: Manifest, node_name: str) -> None:
        """Count `pod` on `node_name` until the watch shows it there (`_Expected`): its
        GPU shares on the devices the allocator's first fit gives it."""
        uid = _uid(pod)
        read = self._read_pod(pod)
        with self._lock:
            self._forget_expected(uid)
            shape = self._shape(read)
            node = self._nodes.get(node_name)
            if read.node or read.done or shape is None or node is None:
                return
            free = self._known_of(node_name).free
            assert free is not None
            claims = {
                key
                for claim_name in read.claims
                if (claim := self._claims.get(key := (read.namespace, claim_name)))
                and not claim.allocated
            }
            gpus: tuple[tuple[int, int], ...] = ()
            if self.pools is None and claims and shape.gpus:
                fitting = [
                    place for place, left in enumerate(free.gpu_milli) if left >= shape.gpu_milli
                ][: shape.gpus]
                gpus = tuple((place, shape.gpu_milli) for place in fitting)
            self._expected[uid] = _Expected(
                node_name,
                read.cpu_milli,
                read.memory,
                read.holds.get(node.resource, 0),
                gpus,
                claims,
                bound=False,
                until=self.clock() + EXPECTED_FOR,
            )
            self._expected_on.setdefault(node_name, set()).add(uid)
            for key in claims:
                self._expected_claims[key] = uid
            self._known.pop(node_name, None)

    def summary(self) -> dict[str, Any]:
        """Each node's free CPU and GPU thousandths, and the typical shapes: what the
        extender believes, for an operator (and a test) to read."""
        with self._lock:
            frees = {name: free for name in self._nodes if (free := self._known_of(name).free)}
            typical = self._typical_locked()
        return {
            "nodes": {
                name: {"cpuMilli": free.cpu_milli, "memory": free.memory,
                       "gpuMilli": list(free.gpu_milli)}
                for name, free in sorted(frees.items())
            },
            "typicalPods": [
                {"cpuMilli": shape.cpu_milli, "gpuMilli": shape.gpu_milli, "gpus": shape.gpus,
                 "models": list(shape.models), "memory": shape.memory, "frequency": frequency}
                for shape, frequency in typical
            ],
            "expectations": {name: self.outcomes[name] for name in EXPECTATION_OUTCOMES},
        }  # fmt: skip

    def _frees(self, names: Sequence[str]) -> dict[str, NodeFree]:
        """Every named node's free resources in one pass over Pods and claims."""
        wanted = set(names)
        cpu = {name: node.cpu_milli for name, node in self._nodes.items() if name in wanted}
        memory = {name: node.memory for name, node in self._nodes.items() if name in wanted}
        held = dict.fromkeys(cpu, 0)
        for pod in self._pods.values():
            if pod.node in cpu and not pod.done:
                cpu[pod.node] -= pod.cpu_milli
                memory[pod.node] -= pod.memory
                held[pod.node] += pod.holds.get(self._nodes[pod.node].resource, 0)
        consumed: dict[str, int] = {}
        for claim in self._claims.values():
            for key, shares in claim.allocated:
                consumed[key] = consumed.get(key, 0) + shares
        gpus: dict[str, list[int]] = {name: [] for name in cpu}
        if self.pools is None:
            for slice_name in sorted(self._slices):
                node_name, devices = self._slices[slice_name]
                if node_name in gpus:
                    gpus[node_name] += [
                        max(0, offered - consumed.get(key, 0)) * MILLI // offered
                        for key, offered in devices
                    ]
        return {
            name: self._node_free(name, cpu[name], memory[name], held[name], gpus[name])
            for name in cpu
        }


def _uid(pod: Manifest) -> str:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or metadata.get("name") or "")


def _holding(pod: _Pod) -> tuple[object, ...]:
    """What of a Pod its node's free resources count."""
    return pod.node, pod.cpu_milli, pod.memory, pod.done, tuple(sorted(pod.holds.items()))


def _milli(value: object) -> int:
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
        return _milli(((container.get("resources") or {}).get("requests") or {}).get("cpu"))

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


def _read_claim(item: Manifest, capacity: str) -> _Claim:
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
    return _Claim(requests, allocated)
