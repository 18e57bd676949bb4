"""`castslice report`: who shares which GPU, and how many GPUs sharing saved.

The Pods CastSlice rewrote carry their decision record (what they asked for before);
the backend says which GPU each Pod holds, as far as the platform tells (a DRA claim's
allocated device; only the node where device plugins time-slice). From the two:

- asked: the GPUs the rewritten Pods on nodes asked for, from the record's `original`,
  counted as the scheduler counts a request (app containers and sidecars, or the largest
  init container);
- occupied: the GPUs at least one of them is on, each counted once. Where only the node
  is known, its GPUs are counted as far as the Pods' shares could spread over them (each
  share on a GPU of its own until the node has no more), so a saving is never overstated;
  on nodes of one GPU, and on DRA devices, the count is exact;
- saved: asked minus occupied.

Pending opted-in Pods are listed with the scheduler's own message and are in neither
count: they occupy nothing, and their asked GPUs are not a saving.

GPU memory: each holder's requests and limits are its containers' NVIDIA_GPU_MEMORY_REQUEST
and _LIMIT (what the driver is asked for, per GPU each container sees), counted as the
scheduler counts a request; a Pod's several places share them by the units each holds. A
place's requests add up to at most its GPUs' memory (GPU Feature Discovery's
`nvidia.com/gpu.memory`) where CastSlice wrote them for GPUs that size; a sum above it
(values set by hand, or CASTSLICE_GPU_MEMORY above the node's GPUs) is flagged, never hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from castslice.backends.placer import GPU_MEMORY, label_count
from castslice.backends.roles import GpuAccounts, GpuHold, GpuPlace, GpuView
from castslice.contract import Manifest
from castslice.contract.cluster import ApiError, Cluster
from castslice.contract.definitions import APPLIED, DecisionRecord
from castslice.contract.gpu_memory import LIMIT_ENV, REQUEST_ENV
from castslice.contract.scheduling import BOUND_PODS, pod_request, unschedulable_message

OwnerOf = Callable[[Manifest], str | None]

NOT_SCHEDULED_YET = "not scheduled yet (no PodScheduled condition)"
# The kinds whose own controller owner names the workload a person wrote.
_OWNER_HOPS = {"ReplicaSet": "/apis/apps/v1", "Job": "/apis/batch/v1"}
_FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Holder:
    """One Pod on a GPU: a rewritten one (with its slices) or one that did not opt in."""

    namespace: str
    pod: str
    owner: str | None
    slices: int | None
    units: int
    share: Fraction
    share_id: str | None
    # Rewritten and within --namespace/--selector: counted in the saving.
    counted: bool
    # The GPU memory CastSlice limited it to, as its decision record says, or None.
    memory: str | None = None
    # The GPU memory its containers ask the driver for on this place, in MiB: guaranteed
    # (request) and the most (limit); 0 where they ask nothing.
    memory_request: int = 0
    memory_limit: int = 0

    @property
    def bursts(self) -> bool:
        return self.memory_limit > self.memory_request


@dataclass(frozen=True)
class Gpu:
    place: GpuPlace
    holders: tuple[Holder, ...]
    # The memory of one of its GPUs in MiB (GPU Feature Discovery's label), or None.
    gpu_memory: int | None = None

    @property
    def free(self) -> int:
        return max(self.place.units - sum(holder.units for holder in self.holders), 0)

    @property
    def memory(self) -> int | None:
        """The memory of all the place's GPUs in MiB, or None where the node does not say."""
        return None if self.gpu_memory is None else self.gpu_memory * self.place.gpus

    @property
    def memory_requested(self) -> int:
        return sum(holder.memory_request for holder in self.holders)

    @property
    def memory_limits(self) -> int:
        return sum(holder.memory_limit for holder in self.holders)

    @property
    def memory_over(self) -> bool:
        """Whether the requests add up to more than the GPUs have: not CastSlice's doing."""
        return self.memory is not None and self.memory_requested > self.memory


@dataclass(frozen=True)
class Pending:
    namespace: str
    pod: str
    owner: str | None
    slices: int
    asked: int
    reason: str


@dataclass
class Saving:
    asked: int = 0
    occupied: int = 0
    pending: int = 0

    @property
    def saved(self) -> int:
        return self.asked - self.occupied


@dataclass(frozen=True)
class Report:
    gpus: tuple[Gpu, ...]
    pending: tuple[Pending, ...]
    total: Saving
    namespaces: Mapping[str, Saving]
    # (namespace, owner or None for a Pod of its own) -> saving
    owners: Mapping[tuple[str, str | None], Saving]
    # Rewritten Pods on a node whose GPU the backend could not find: occupied as asked.
    unfound: tuple[str, ...] = field(default=())


@dataclass
class _Counted:
    """A rewritten Pod within the selection, and what it holds."""

    namespace: str
    pod: str
    owner: str | None
    record: DecisionRecord
    asked: int
    holds: list[GpuHold]
    # The GPU memory its containers request and may take, in MiB.
    memory: tuple[int, int] = (0, 0)


def read_report(
    cluster: Cluster, backend: GpuAccounts, namespace: str | None, selector: str | None
) -> Report:
    """The report for the Pods in `namespace` (None: all) that `selector` selects."""
    nodes = list(cluster.list("/api/v1/nodes"))
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    selected = list(cluster.list(path, [("labelSelector", selector)] if selector else ()))
    bound = list(cluster.list("/api/v1/pods", [("fieldSelector", BOUND_PODS)]))
    view = backend.gpu_view(cluster, nodes)
    return build_report(
        selected,
        bound,
        view,
        OwnerReader(cluster),
        backend.config.gpu_resource,
        gpu_memory_of(nodes),
    )


def gpu_memory_of(nodes: Iterable[Manifest]) -> dict[str, int]:
    """Node name -> one GPU's memory in MiB, as GPU Feature Discovery labels it."""
    found = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        memory = label_count((metadata.get("labels") or {}).get(GPU_MEMORY))
        if memory is not None:
            found[str(metadata.get("name") or "")] = memory
    return found


def build_report(
    selected: Iterable[Manifest],
    bound: Iterable[Manifest],
    view: GpuView,
    owner_of: OwnerOf,
    gpu_resource: str,
    gpu_memory: Mapping[str, int] | None = None,
) -> Report:
    """The report from the selected Pods, every Pod bound to a node, and the backend's view;
    `gpu_memory` one GPU's memory in MiB by node, where the node says it."""
    counted: dict[tuple[str, str], _Counted] = {}
    pending: list[Pending] = []
    for pod in selected:
        record = decision_record(pod)
        if record is None or _phase(pod) in _FINISHED:
            continue
        namespace, name = _name(pod)
        asked = asked_gpus(pod, record, gpu_resource)
        if not (pod.get("spec") or {}).get("nodeName"):
            reason = unschedulable_message(pod) or NOT_SCHEDULED_YET
            pending.append(Pending(namespace, name, owner_of(pod), record.slices, asked, reason))
            continue
        holds = view.holds(pod)
        counted[(namespace, name)] = _Counted(
            namespace, name, owner_of(pod), record, asked, holds, _memory(pod)
        )

    places = view.places()
    on_place: dict[str, list[Holder]] = {}
    for pod in bound:
        key = _name(pod)
        record = decision_record(pod)
        mine = counted.get(key)
        holds = mine.holds if mine else view.holds(pod)
        memory = mine.memory if mine else _memory(pod)
        for hold in holds:
            on_place.setdefault(hold.place, []).append(
                Holder(
                    key[0],
                    key[1],
                    mine.owner if mine else None,
                    record.slices if record else None,
                    hold.units,
                    hold.share,
                    hold.share_id,
                    mine is not None,
                    record.memory if record else None,
                    *_on(hold, holds, memory),
                )
            )
    # A Pod the bound list missed (bound in between the two reads) still holds its GPUs.
    listed = {(holder.namespace, holder.pod) for holders in on_place.values() for holder in holders}
    for key, mine in counted.items():
        if key not in listed:
            for hold in mine.holds:
                on_place.setdefault(hold.place, []).append(
                    Holder(*key, mine.owner, mine.record.slices, hold.units, hold.share,
                           hold.share_id, True, mine.record.memory,
                           *_on(hold, mine.holds, mine.memory))
                )  # fmt: skip

    sizes = gpu_memory or {}
    gpus = tuple(
        Gpu(places[key], tuple(sorted(holders, key=_holder_order)), sizes.get(places[key].node))
        for key, holders in sorted(on_place.items(), key=lambda item: _place_order(places, item[0]))
        if key in places and any(holder.counted for holder in holders)
    )
    total = _saving(counted.values(), gpus)
    namespaces = {
        namespace: _saving([c for c in counted.values() if c.namespace == namespace], gpus)
        for namespace in sorted({c.namespace for c in counted.values()} | _of(pending))
    }
    owner_keys = {(c.namespace, c.owner) for c in counted.values()}
    owner_keys |= {(p.namespace, p.owner) for p in pending}
    owners = {
        key: _saving([c for c in counted.values() if (c.namespace, c.owner) == key], gpus)
        for key in sorted(owner_keys, key=lambda key: (key[0], key[1] or ""))
    }
    for waiting in pending:
        total.pending += 1
        namespaces[waiting.namespace].pending += 1
        owners[(waiting.namespace, waiting.owner)].pending += 1
    unfound = tuple(
        f"{c.namespace}/{c.pod}" for c in counted.values() if not _placed_holds(c, places)
    )
    return Report(
        gpus,
        tuple(sorted(pending, key=lambda p: (p.namespace, p.pod))),
        total,
        namespaces,
        owners,
        unfound,
    )


def decision_record(pod: Manifest) -> DecisionRecord | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(APPLIED)
    return DecisionRecord.parse(text) if isinstance(text, str) else None


def asked_gpus(pod: Manifest, record: DecisionRecord, gpu_resource: str) -> int:
    """The GPUs the Pod asked for before the rewrite, as the scheduler would have counted
    them: its containers as they are, each with the quantity the record kept."""
    return _counted(pod, gpu_resource, lambda c: record.original.get(str(c.get("name"))))


def memory_asked(pod: Manifest, name: str) -> int:
    """The MiB of GPU memory the Pod's containers ask the driver for by env `name` (each
    container's value per GPU it sees), counted as the scheduler counts a request."""

    def value(container: Manifest) -> str | None:
        # The kubelet keeps a name's last entry; one from valueFrom is not known here.
        for entry in reversed(container.get("env") or ()):
            if isinstance(entry, Mapping) and entry.get("name") == name:
                found = entry.get("value")
                return (
                    found
                    if isinstance(found, str) and found.isascii() and found.isdigit()
                    else None
                )
        return None

    return _counted(pod, name, value)


def _memory(pod: Manifest) -> tuple[int, int]:
    return memory_asked(pod, REQUEST_ENV), memory_asked(pod, LIMIT_ENV)


def _on(hold: GpuHold, holds: Sequence[GpuHold], memory: tuple[int, int]) -> tuple[int, int]:
    """The part of a Pod's GPU memory request and limit on `hold`'s place: its several
    places share them by the units each holds (each container's alike)."""
    held = sum(each.units for each in holds) or 1
    return memory[0] * hold.units // held, memory[1] * hold.units // held


def _counted(pod: Manifest, resource: str, value_of: Callable[[Manifest], str | None]) -> int:
    """`resource` as the scheduler counts it for `pod` were each container asking
    `value_of(container)` of it."""
    spec = pod.get("spec") or {}

    def asking(container: Manifest) -> Manifest:
        value = value_of(container)
        return {**container, "resources": {"requests": {} if value is None else {resource: value}}}

    lists = ("initContainers", "containers")
    return pod_request(
        {"spec": {key: [asking(c) for c in spec.get(key) or ()] for key in lists}}, resource
    )


def occupied(place: GpuPlace, holds: Iterable[GpuHold]) -> int:
    """The GPUs of `place` these holds may be on: all of one GPU's place, and where the
    place is a node's GPUs, at most one GPU per unit held."""
    units = sum(hold.units for hold in holds)
    return min(place.gpus, units) if units else 0


def _saving(pods: Iterable[_Counted], gpus: Sequence[Gpu]) -> Saving:
    pods = list(pods)
    places = {gpu.place.key: gpu.place for gpu in gpus}
    saving = Saving(asked=sum(pod.asked for pod in pods))
    by_place: dict[str, list[GpuHold]] = {}
    for pod in pods:
        holds = _placed_holds(pod, places)
        if not holds:
            # Nothing says where its GPUs are: no saving is claimed for it.
            saving.occupied += pod.asked
        for hold in holds:
            by_place.setdefault(hold.place, []).append(hold)
    saving.occupied += sum(occupied(places[key], holds) for key, holds in by_place.items())
    return saving


def _placed_holds(pod: _Counted, places: Mapping[str, GpuPlace]) -> list[GpuHold]:
    return [hold for hold in pod.holds if hold.place in places]


def _of(pending: Iterable[Pending]) -> set[str]:
    return {waiting.namespace for waiting in pending}


def _name(pod: Manifest) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _phase(pod: Manifest) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _holder_order(holder: Holder) -> tuple[bool, str, str]:
    return (not holder.counted, holder.namespace, holder.pod)


def _place_order(places: Mapping[str, GpuPlace], key: str) -> tuple[str, str]:
    place = places.get(key)
    return (place.node, place.device or place.unit) if place else ("", key)


def controller(metadata: Mapping[str, Any]) -> Manifest | None:
    for reference in metadata.get("ownerReferences") or ():
        if reference.get("controller"):
            return dict(reference)
    return None


class OwnerReader:
    """A Pod's workload: its controller, and that one's controller for the kinds a person
    rarely writes (a Deployment's ReplicaSet, a CronJob's Job). Read once per owner."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._seen: dict[tuple[str, str, str], str] = {}

    def __call__(self, pod: Manifest) -> str | None:
        metadata = pod.get("metadata") or {}
        owner = controller(metadata)
        if owner is None:
            return None
        kind, name = str(owner.get("kind")), str(owner.get("name"))
        group = _OWNER_HOPS.get(kind)
        if group is None:
            return f"{kind}/{name}"
        key = (str(metadata.get("namespace")), kind, name)
        if key not in self._seen:
            self._seen[key] = self._workload(group, *key)
        return self._seen[key]

    def _workload(self, group: str, namespace: str, kind: str, name: str) -> str:
        path = f"{group}/namespaces/{namespace}/{kind.lower()}s/{name}"
        try:
            parent = controller(self._cluster.get(path).get("metadata") or {})
        except ApiError:
            # Gone, or not ours to read: the direct owner still says whose the Pod is.
            parent = None
        if parent is None:
            return f"{kind}/{name}"
        return f"{parent.get('kind')}/{parent.get('name')}"


def share_text(share: Fraction) -> str:
    return str(share.numerator) if share.denominator == 1 else f"{share}"


def to_document(report: Report, context: Mapping[str, Any]) -> Manifest:
    """The report as plain data for `-o json` and `-o yaml`."""

    def saving(value: Saving) -> Manifest:
        return {
            "asked": value.asked,
            "occupied": value.occupied,
            "saved": value.saved,
            "pending": value.pending,
        }

    return {
        **context,
        "gpus": [
            {
                "node": gpu.place.node,
                "gpu": gpu.place.device,
                "gpuVisible": gpu.place.device is not None,
                "gpus": gpu.place.gpus,
                "unit": gpu.place.unit,
                "units": gpu.place.units,
                "free": gpu.free,
                "memoryMiB": gpu.memory,
                "memoryRequestedMiB": gpu.memory_requested,
                "memoryLimitsMiB": gpu.memory_limits,
                "memoryOverRequested": gpu.memory_over,
                "holders": [
                    {
                        "namespace": holder.namespace,
                        "pod": holder.pod,
                        "owner": holder.owner,
                        "optedIn": holder.slices is not None,
                        "counted": holder.counted,
                        "slices": holder.slices,
                        "units": holder.units,
                        "share": share_text(holder.share),
                        "shareID": holder.share_id,
                        "memoryRequestMiB": holder.memory_request,
                        "memoryLimitMiB": holder.memory_limit,
                    }
                    for holder in gpu.holders
                ],
            }
            for gpu in report.gpus
        ],
        "pending": [
            {
                "namespace": waiting.namespace,
                "pod": waiting.pod,
                "owner": waiting.owner,
                "slices": waiting.slices,
                "asked": waiting.asked,
                "reason": waiting.reason,
            }
            for waiting in report.pending
        ],
        "totals": saving(report.total),
        "namespaces": {name: saving(value) for name, value in report.namespaces.items()},
        "owners": [
            {"namespace": namespace, "owner": owner, **saving(value)}
            for (namespace, owner), value in report.owners.items()
        ],
        "gpuNotFound": list(report.unfound),
    }


__all__ = [
    "NOT_SCHEDULED_YET",
    "Gpu",
    "Holder",
    "OwnerReader",
    "Pending",
    "Report",
    "Saving",
    "asked_gpus",
    "build_report",
    "gpu_memory_of",
    "memory_asked",
    "occupied",
    "read_report",
    "to_document",
]
