"""`castslice plan`'s arithmetic: how many GPUs a workload mix needs under each configuration.

A workload is a list of tasks, each one GPU container (or one Pod that asks for whole
GPUs) with the share of one GPU it needs. Every estimate asks the backends themselves
how a task is placed (`plans_for(config).place(slices)`), so it rounds exactly as the
webhook would: a share becomes the slice count it rounds up to, the backend turns that
count into what the Pod gets, and Pods that land alike (same resource, same node labels)
pack together on GPUs of their own. A backend that cuts GPUs into instances (MIG) says
how each way of cutting them holds its Pods' instances (`Plans.gpu_layouts`). The count
ignores node boundaries, CPU and memory: it is the floor a scheduler can reach, which the
packing benchmark measures against.

With GPU memory limits (CASTSLICE_GPU_MEMORY) a share fits a GPU only while the GPU memory
requests on it add up to no more than the GPU has: each group needs GPUs for its shares and
for its requests, whichever is more (requests are rounded down, so never more than the
shares need). Limits above a request (a burst) are counted apart: nothing reserves them.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from castslice.backends import Placement, sharing_degree
from castslice.backends.roles import POOLS, GpuLayout, LaidOut
from castslice.backends.tools import TOOLS, plans_for
from castslice.contract.definitions import APPLIED, DecisionRecord
from castslice.contract.gpu_memory import memory_cap
from castslice.contract.patch import quantity_value, refused_count
from castslice.decision.pods import less_than_asked_text
from castslice.decision.slices import resolve_burst, share_text
from castslice.extender.fragmentation import WHOLE, PodShape, client_milli
from castslice.extender.placing import (
    UNBOUNDED,
    Arrival,
    NodeKind,
    Scheduled,
    fewest,
    unplaceable,
)
from castslice.settings.config import MEBIBYTE, SHARING_STRATEGIES, Config
from castslice.settings.rules import POLICY_SOURCE_PREFIX

# The slice counts per GPU tried for backends that place a slice count.
SLICE_CANDIDATES = (4, 8, 10, 100)
# The clients-per-GPU tried for sharing pools, and how many pools at most: each pool
# is a node pool (or a device plugin config) an operator keeps.
DEGREE_CANDIDATES = (2, 3, 4, 5, 6, 8, 10)
MAX_POOLS = 3
# A finer setting must save more than this share of the GPUs to be recommended over a
# coarser one: finer shares are more templates, more pools, more to run.
WORTH_IT = Fraction(1, 100)
# The trace columns the openb task lists have (Alibaba cluster-trace-gpu-v2023).
TRACE_COLUMNS = ("num_gpu", "gpu_milli")
# The columns plan reads where a task list has them: what each task asks of a node, and
# when it arrives and leaves.
NODE_ASKS = ("cpu_milli", "memory_mib")
TIMES = ("creation_time", "deletion_time")
# The columns of a node list shaped as openb's (Alibaba cluster-trace-gpu-v2023).
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# The GPUs per node plan places on without a node list: the largest nodes of the openb
# trace and of the cloud GPU machine families.
GPUS_PER_NODE = 8
MILLI = 1000
# The shipped kube-scheduler configuration whose NodeResourcesFit scores by MostAllocated.
MOST_ALLOCATED_PROFILE = "infra/scheduler/most-allocated.yaml"
# Below this share of the GPU demand in fractions of a GPU, fragments are too few for the
# scheduler extender to be worth running.
EXTENDER_SHARE = Fraction(1, 10)


class WorkloadError(ValueError):
    """Input that is not a workload: the message names the row or object."""


@dataclass(frozen=True)
class Task:
    """One GPU container that opted in (`gpus` its share of one GPU), or one Pod left alone
    (`gpus` the whole GPUs it asks for).

    `asked` is what the container asks for without CastSlice (None: its share rounded up to
    whole GPUs, as a trace's task asks for one GPU); `source` where its slice count came
    from ("slice-ratio", "workload-type", "default", "policy:<rule>"; "" for a trace's
    task, whose share is all there is); `container` its name, for messages.
    """

    gpus: Fraction
    opted_in: bool
    name: str = ""
    asked: int | None = None
    source: str = ""
    container: str = ""
    # The share of a GPU's memory its limit may reach (castops.io/gpu-memory-burst), or None.
    burst: Fraction | None = None
    # What the task asks of a node besides GPUs (CPU thousandths, memory MiB), the GPU
    # models it may run on (empty: any), and when it arrives and leaves (None: not given),
    # where the input says: for `castslice plan` to place it as the scheduler would.
    cpu_milli: int = 0
    memory_mib: int = 0
    models: tuple[str, ...] = ()
    arrives: int | None = None
    leaves: int | None = None

    @property
    def whole_gpus_asked(self) -> int:
        return math.ceil(self.gpus) if self.asked is None else self.asked


@dataclass(frozen=True)
class Pool:
    """GPUs that serve tasks placed alike; `degree` is its clients per GPU, if it shares."""

    label: str
    gpus: int
    tasks: int
    degree: int | None = None
    # What each GPU holds, where the backend cuts GPUs into instances (name: count).
    instances: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class GpuMemory:
    """The GPU memory an estimate's Pods request of the driver, and their bursts beyond."""

    gpu: int
    requested: int
    bursting: int
    burst: int

    def as_dict(self) -> dict[str, int]:
        return {
            "gpuMiB": self.gpu,
            "requestedMiB": self.requested,
            "burstingPods": self.bursting,
            "burstMiB": self.burst,
        }


@dataclass(frozen=True)
class Estimate:
    """What one configuration needs for a workload."""

    name: str
    settings: dict[str, Any]
    gpus: int
    pools: tuple[Pool, ...]
    rounded_up: int
    # GPUs given beyond what the rounded-up tasks need, in total.
    rounded_by: Fraction
    warnings: tuple[str, ...] = ()
    recommended: bool = False
    # The CASTSLICE_* variables to set, over today's, for this configuration, and what else
    # must change with them (slice-ratio annotations, policy rules) or what then differs.
    environment: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # The castops.io/slice-ratio each Pod that sets one must then have, by Pod.
    ratios: dict[str, int] = field(default_factory=dict)
    # How many kinds of Pods get another share of a GPU than today (no whole count keeps it).
    reshared: int = 0
    # What the opted-in Pods are guaranteed of a GPU's compute and memory: how many get each.
    gets: tuple[tuple[str, int], ...] = ()
    # With GPU memory limits: the MiB requested in all, how many Pods' limits are above
    # their requests (burst) and by how many MiB in all.
    memory: GpuMemory | None = None

    def as_dict(self, baseline: int, today: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": self.settings,
            "environment": self.environment,
            "notes": list(self.notes),
            "sliceRatios": self.ratios,
            "gpus": self.gpus,
            "gpusSavedVsNoSharing": baseline - self.gpus,
            "gpusVsToday": self.gpus - today,
            "podsRoundedUp": self.rounded_up,
            "gpusRoundedUp": round(float(self.rounded_by), 3),
            "eachPodGets": dict(self.gets),
            "gpuMemory": self.memory.as_dict() if self.memory else None,
            "pools": self.pools_dict(),
            "warnings": list(self.warnings),
            "recommended": self.recommended,
        }

    def pools_dict(self) -> list[dict[str, Any]]:
        return [
            {"pool": pool.label, "gpus": pool.gpus, "tasks": pool.tasks}
            | ({"degree": pool.degree} if pool.degree else {})
            | ({"instancesPerGpu": dict(pool.instances)} if pool.instances else {})
            | ({"shareOfGpus": round(pool.gpus / self.gpus, 3)} if self.gpus else {})
            for pool in self.pools
        ]


@dataclass
class Plan:
    """Every estimate, with the workload's totals."""

    tasks: int
    opted_in: int
    demand: Fraction
    no_sharing: Estimate
    today: Estimate
    candidates: list[Estimate] = field(default_factory=list)
    # Each backend's recommended candidate, by backend name.
    per_backend: dict[str, Estimate] = field(default_factory=dict)
    # The recommendation's backend: today's when the user named it (the GPU nodes decide).
    backend: str = "resource"
    # Why today's settings are kept, when no candidate of today's backend needs fewer GPUs.
    keep: str = ""
    # Whether the recommended backend shares GPUs as devices the scheduler allocates (the
    # scheduler extender scores those), and the demand that comes in shares of a GPU.
    recommended_claims_devices: bool = False
    shared_demand: Fraction = Fraction(0)
    # Each sharing-pool backend's best under the other sharing strategy (the same GPUs).
    twins: list[Estimate] = field(default_factory=list)
    # The GPUs the recommended configuration needs once kube-scheduler places the workload
    # (with the extender, or on its own scores; None: not counted), and on what nodes.
    scheduled: Scheduled | None = None
    nodes: str = ""
    # Why the scheduler's count was not made for the nodes given ("": it was, or no nodes).
    unscheduled: str = ""
    # The same count with kube-scheduler's MostAllocated strategy and no extender (None:
    # not counted).
    packed: Scheduled | None = None

    @property
    def extender_advice(self) -> tuple[bool, str]:
        """Whether the fragmentation-aware scheduler extender is worth deploying, and why."""
        share = self.shared_demand / self.demand if self.demand else Fraction(0)
        pools = not self.recommended_claims_devices and TOOLS[self.backend].extender_gpus == POOLS
        if not extender_scores(self.backend, self.recommended_claims_devices):
            return False, (
                "the scheduler extender scores GPUs shared as DRA devices or by node pools; "
                "the recommended backend's GPUs are neither"
            )
        if share < EXTENDER_SHARE:
            return False, (
                f"only {float(share):.0%} of the GPU demand comes in shares of a GPU: few "
                "fragments for the scheduler extender to avoid"
            )
        scheduled, packed = self.scheduled, self.packed
        if scheduled is not None and packed is not None and packed.gpus < scheduled.gpus:
            return False, (
                f"on the nodes given kube-scheduler's MostAllocated strategy "
                f"({MOST_ALLOCATED_PROFILE}) runs the workload on {packed.gpus} GPUs, where "
                f"the extender needs {scheduled.gpus}"
            )
        # A pool's clients are all one size: what strands there is CPU, memory and GPUs
        # a many-GPU Pod would need, not pieces of a GPU.
        stranded = (
            "the nodes' CPU, memory and whole GPUs strand later Pods"
            if pools
            else "whose leftovers strand later Pods"
        )
        return True, (
            f"{float(share):.0%} of the GPU demand comes in shares of a GPU, {stranded}: the "
            "fragmentation-aware scheduler extender (castslice extender, "
            "infra/scheduler/fgd-extender.yaml) places more of it "
            "(docs/performance.md#the-scheduler-extender)"
        )

    @property
    def ideal(self) -> int:
        """GPUs if every share packed perfectly."""
        return math.ceil(self.demand)

    @property
    def best(self) -> Estimate:
        """The recommended configuration: today's when nothing of its backend does better."""
        return next((estimate for estimate in self.candidates if estimate.recommended), self.today)

    @property
    def elsewhere(self) -> list[Estimate]:
        """Other backends' best candidates that would need fewer GPUs than the recommendation,
        if the nodes offered them."""
        return [
            item
            for backend, item in self.per_backend.items()
            if backend != self.backend and item.gpus < self.best.gpus
        ]

    def as_dict(self) -> dict[str, Any]:
        baseline, today = self.no_sharing.gpus, self.today.gpus
        best = self.best
        return {
            "tasks": self.tasks,
            "optedIn": self.opted_in,
            "gpuDemand": round(float(self.demand), 3),
            "perfectPacking": self.ideal,
            "noSharing": self.no_sharing.as_dict(baseline, today),
            "today": self.today.as_dict(baseline, today),
            "candidates": [estimate.as_dict(baseline, today) for estimate in self.candidates],
            "recommended": best.name,
            "keep": self.keep,
            "recommendation": best.as_dict(baseline, today),
            "recommendedPerBackend": {
                backend: {
                    "name": item.name,
                    "settings": item.settings,
                    "environment": item.environment,
                    "notes": list(item.notes),
                    "sliceRatios": item.ratios,
                    "gpus": item.gpus,
                    "pools": item.pools_dict(),
                    "eachPodGets": dict(item.gets),
                }
                for backend, item in self.per_backend.items()
            },
            "extender": dict(zip(("worthDeploying", "why"), self.extender_advice, strict=True)),
            "scheduled": (
                self.scheduled.as_dict() | {"configuration": best.name, "nodeList": self.nodes}
                if self.scheduled
                else None
            ),
            "scheduledMostAllocated": (
                self.packed.as_dict() | {"configuration": best.name, "nodeList": self.nodes}
                if self.packed
                else None
            ),
        } | ({"notScheduled": self.unscheduled} if self.unscheduled else {})


def tasks_from_trace(text: str, source: str = "trace") -> list[Task]:
    """The tasks of a task list shaped as openb's: a fraction of one GPU (`num_gpu` 1 and
    `gpu_milli` below 1000) opts in; whole GPUs and CPU-only tasks do not. Where it has
    them, each task's `cpu_milli`, `memory_mib`, `gpu_spec` (models, `|`-separated), and
    `creation_time` and `deletion_time` are read too."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in TRACE_COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise WorkloadError(f"{source}: no {' or '.join(missing)} column in its header")
    header = reader.fieldnames or ()
    # Times only where both are given: a task list with arrivals alone has no departures.
    timed = all(column in header for column in TIMES)
    tasks = []
    for line, row in enumerate(reader, start=2):
        try:
            count, milli = int(row["num_gpu"]), int(row["gpu_milli"])
        except (TypeError, ValueError):
            raise WorkloadError(
                f"{source}, line {line}: num_gpu and gpu_milli must be whole numbers"
            ) from None
        if count < 0 or not 0 <= milli <= MILLI:
            raise WorkloadError(
                f"{source}, line {line}: num_gpu {count}, gpu_milli {milli}: want num_gpu >= 0 "
                "and gpu_milli from 0 to 1000"
            )
        name = row.get("name") or f"line {line}"
        cpu, memory = (_whole(row, column, source, line) or 0 for column in NODE_ASKS)
        models = tuple(spec for spec in (row.get("gpu_spec") or "").split("|") if spec)
        arrives = leaves = None
        if timed:
            arrives = _whole(row, "creation_time", source, line)
            if arrives is None:
                raise WorkloadError(f"{source}, line {line}: no creation_time")
            leaves = _whole(row, "deletion_time", source, line)
        opted_in = count == 1 and 0 < milli < MILLI
        gpus = Fraction(count * milli, MILLI) if milli else Fraction(0)
        tasks.append(
            Task(
                gpus, opted_in, name, cpu_milli=cpu, memory_mib=memory, models=models,
                arrives=arrives, leaves=leaves,
            )
        )  # fmt: skip
    return tasks


def _whole(row: Mapping[str, str | None], column: str, source: str, line: int) -> int | None:
    """A column's whole number of 0 or more; None where the row leaves it empty or the file
    has no such column."""
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise WorkloadError(
            f"{source}, line {line}: {column} {text!r}: want a whole number"
        ) from None
    if value < 0:
        raise WorkloadError(f"{source}, line {line}: {column} {value}: want 0 or more")
    return value


def nodes_from_list(text: str, source: str = "nodes") -> list[NodeKind]:
    """The nodes of a node list shaped as openb's (`sn`, `cpu_milli`, `memory_mib`, `gpu`,
    `model`)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in NODE_COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise WorkloadError(f"{source}: no {' or '.join(missing)} column in its header")
    nodes = []
    for line, row in enumerate(reader, start=2):
        try:
            cpu, memory, gpus = int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"])
        except (TypeError, ValueError):
            raise WorkloadError(
                f"{source}, line {line}: cpu_milli, memory_mib and gpu must be whole numbers"
            ) from None
        if min(cpu, memory, gpus) < 0:
            raise WorkloadError(f"{source}, line {line}: a negative cpu_milli, memory_mib or gpu")
        nodes.append(NodeKind(row["sn"] or f"line {line}", cpu, memory, gpus, row["model"] or ""))
    if not any(node.gpus for node in nodes):
        raise WorkloadError(f"{source}: no node with a GPU")
    return nodes


def uniform_nodes(gpus: int = GPUS_PER_NODE) -> list[NodeKind]:
    """Where the input gives no nodes: nodes of `gpus` GPUs, of no model, with more CPU and
    memory than any task asks."""
    return [NodeKind("node", UNBOUNDED, UNBOUNDED, gpus)]


def tasks_from_pod(
    pod: Mapping[str, Any], config: Config, reference: str | None = None
) -> list[Task]:
    """A Pod as CastSlice left it: one task per GPU container it rewrote (its share is the
    decision record's slices of today's slices per GPU), or one task with the GPUs the Pod
    asks for when it was left alone. `reference` names it in messages (default
    namespace/name)."""
    metadata = pod.get("metadata") or {}
    name = reference or f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '?'}"
    record = DecisionRecord.parse((metadata.get("annotations") or {}).get(APPLIED) or "")
    if record is not None:
        share = Fraction(record.slices, config.slices_per_gpu)
        burst, _ = resolve_burst(metadata.get("annotations") or {}, config)
        return [
            Task(share, True, name, _count(quantity, 1), record.source, container, burst)
            for container, quantity in record.original.items()
        ]
    spec = pod.get("spec") or {}
    asked = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        quantity = (resources.get("limits") or {}).get(config.gpu_resource) or (
            resources.get("requests") or {}
        ).get(config.gpu_resource)
        if quantity is not None:
            asked += _count(quantity, 0)
    return [Task(Fraction(asked), False, name, asked)]


def _count(quantity: object, otherwise: int) -> int:
    """A GPU count as the API server reads it; `otherwise` for one it refuses."""
    value = quantity_value(quantity)
    return int(value) if value is not None and refused_count(quantity) is None else otherwise


NodeKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Group:
    """Tasks that land on the same kind of node: their shares, whole GPUs and degree."""

    shares: Fraction = Fraction(0)
    whole: int = 0
    tasks: int = 0
    has_shares: bool = False
    degree: int | None = None
    # The GPU memory its shares request, in MiB.
    requests: int = 0


def slices_for(share: Fraction, per_gpu: int) -> int:
    """The slice count a task asking for `share` of a GPU rounds up to at `per_gpu` slices."""
    return max(1, math.ceil(share * per_gpu))


def estimate(
    config: Config, tasks: Sequence[Task], name: str, layout: GpuLayout | None = None
) -> Estimate:
    """GPUs `config` needs for `tasks`: each opted-in share rounded up to slices and placed by
    the backend; Pods that ask for the same resource with the same node labels share a
    group of nodes, whose shares pack onto whole GPUs beside its whole-GPU Pods. Whole GPUs
    go where a Pod left alone goes (the GPU resource, no labels). A backend that cuts GPUs
    into instances counts its instances on GPUs cut as `layout` says (by default the first
    of its layouts, how its own nodes are counted)."""
    backend = plans_for(config)
    layout = _layout(config, layout)
    # Pods placed on instances, by slice count, for the layout to count.
    on_instances: Counter[int] = Counter()
    gets: Counter[str] = Counter()
    per_gpu = config.slices_per_gpu
    pools = pooled(config)
    whole_key: NodeKey = (config.gpu_resource, ())
    groups: dict[NodeKey, _Group] = {}
    rounded, rounded_by = 0, Fraction(0)
    placements: dict[int, Placement] = {}
    guaranteed: dict[int, str] = {}
    # Tasks asking alike are counted once: a trace has thousands, of a few hundred kinds
    # (counted by integers: hashing a Fraction costs twenty times as much).
    kinds = Counter(
        (task.opted_in, task.gpus.numerator, task.gpus.denominator, task.burst) for task in tasks
    )
    requested = bursting = burst_mib = 0
    for (opted_in, numerator, denominator, burst), count in kinds.items():
        gpus = Fraction(numerator, denominator)
        if not opted_in:
            if gpus:
                group = groups.setdefault(whole_key, _Group())
                group.whole += math.ceil(gpus) * count
                group.tasks += count
            continue
        slices = slices_for(gpus, per_gpu)
        if slices not in placements:
            placements[slices] = backend.place(slices)
            guaranteed[slices] = backend.guaranteed(slices)
        placement = placements[slices]
        gets[guaranteed[slices]] += count
        given = placement.gpus
        if given > gpus:
            rounded += count
            rounded_by += (given - gpus) * count
        if layout is not None and placement.instance is not None:
            on_instances[slices] += count
            continue
        if given.denominator == 1:
            group = groups.setdefault(whole_key, _Group())
            group.whole += int(given) * count
        else:
            key = (placement.resource, tuple(sorted(placement.node_selector.items())))
            group = groups.setdefault(key, _Group())
            group.shares += given * count
            group.has_shares = True
            cap = (
                memory_cap(placement.memory_share, config.gpu_memory, burst)
                if config.gpu_memory is not None and placement.memory_share is not None
                else None
            )
            if cap is not None:
                group.requests += cap.request * count
                requested += cap.request * count
                if cap.limit > cap.request:
                    bursting += count
                    burst_mib += (cap.limit - cap.request) * count
            group.degree = sharing_degree(config, slices) if pools else None
        group.tasks += count
    mebibytes = (config.gpu_memory or MEBIBYTE) // MEBIBYTE
    found = [_pool(group, per_gpu, mebibytes) for group in groups.values()]
    found.sort(key=lambda pool: (pool.label == "whole GPUs", pool.degree or 0))
    notes: tuple[str, ...] = ()
    if layout is not None:
        laid_out = layout.pack(on_instances)
        found[:0] = [_laid_pool(laid) for laid in laid_out]
        notes = layout.notes(laid_out)
    warnings = _named_warnings(config, tasks, placements, pools)
    total = sum(pool.gpus for pool in found)
    memory = (
        GpuMemory(mebibytes, requested, bursting, burst_mib)
        if config.gpu_memory is not None
        else None
    )
    return Estimate(
        name,
        settings_of(config, layout),
        total,
        tuple(found),
        rounded,
        rounded_by,
        tuple(warnings),
        notes=notes,
        gets=tuple(sorted(gets.items(), key=lambda item: (-item[1], item[0]))),
        memory=memory,
    )


def _laid_pool(laid: LaidOut) -> Pool:
    return Pool(laid.layout, laid.gpus, laid.pods, instances=laid.instances)


def _named_warnings(
    config: Config, tasks: Sequence[Task], placements: Mapping[int, Placement], pools: bool
) -> list[str]:
    """Each Pod the opt-in gives less than it asked for, in preview's words; the Pods whose
    share is more than one GPU (whole GPUs: sharing offers no share of several); and those
    that need less than the finest share the sharing nodes offer."""
    fewer: dict[str, None] = {}
    several: Counter[str] = Counter()
    finer: Counter[str] = Counter()
    finest = Fraction(1, max(config.sharing_degrees))
    # Per kind of share (a trace has thousands of tasks of a few hundred kinds): what it is
    # given, whether it is finer than the pools offer, whether it is more than a GPU.
    kinds: dict[tuple[int, int], tuple[Fraction, bool, bool]] = {}
    for task in tasks:
        if not task.opted_in:
            continue
        key = (task.gpus.numerator, task.gpus.denominator)
        kind = kinds.get(key)
        if kind is None:
            given = placements[slices_for(task.gpus, config.slices_per_gpu)].gpus
            finer_kind = pools and task.gpus < finest and task.gpus < given < 1
            kind = kinds[key] = (given, finer_kind, task.gpus > 1)
        given, finer_kind, several_kind = kind
        if finer_kind:
            finer[task.name] += 1
        if task.asked is not None and task.asked > 1 and given < task.asked:
            text = less_than_asked_text(task.container, str(task.asked), given, config.gpu_resource)
            fewer[f"{task.name}: {text}"] = None
        if several_kind:
            several[task.name] += 1
    warnings = list(fewer)
    if several:
        warnings.append(
            f"{_some(several)}: a slice count of more than one GPU: whole GPUs, and a share "
            "of several GPUs is not what sharing offers"
        )
    if finer:
        warnings.append(
            f"{_some(finer)}: need less than {share_text(finest)}, the finest share the "
            "sharing nodes offer: they get more than they need"
        )
    return warnings


def _some(names: Counter[str], shown: int = 3) -> str:
    """A few names, with how many Pods each stands for, and how many more there are."""
    listed = [
        (name or "a task") + (f" ({count} Pods)" if count > 1 else "")
        for name, count in names.items()
    ]
    more = len(listed) - shown
    return ", ".join(listed[:shown]) + (f" and {more} more" if more > 0 else "")


def extender_scores(backend: str, claims_devices: bool) -> bool:
    """Whether the scheduler extender scores a backend's GPUs: DRA devices it claims (not
    MIG instances), or sharing node pools."""
    return claims_devices or TOOLS[backend].extender_gpus == POOLS


def instance_pool(pool: str) -> bool:
    """Whether a node pool is of GPUs cut into instances (named by their profile), not of
    GPUs shared by a sharing degree or whole."""
    return pool != WHOLE and not pool.isdigit()


def pool_label(pool: str) -> str:
    """How the tables name a node pool (a sharing degree, an instance's profile, or
    `WHOLE`)."""
    if pool == WHOLE:
        return "whole GPUs"
    return f"{pool} instances" if instance_pool(pool) else f"{pool} per GPU"


def _pool(group: _Group, per_gpu: int, mebibytes: int) -> Pool:
    if group.degree:
        label = pool_label(str(group.degree))
    elif not group.has_shares:
        label = pool_label(WHOLE)
    elif group.whole:
        label = f"shares of {per_gpu} and whole GPUs"
    else:
        label = f"shares of {per_gpu}"
    # A GPU holds shares only while their memory requests fit it.
    gpus = max(math.ceil(group.shares), -(-group.requests // mebibytes)) + group.whole
    return Pool(label, gpus, group.tasks, group.degree)


def no_sharing(tasks: Sequence[Task]) -> Estimate:
    """Every GPU task on the whole GPUs its containers ask for: what the cluster needs without
    CastSlice (a trace's task: its share rounded up)."""
    gpu_tasks = [task for task in tasks if task.gpus or task.whole_gpus_asked]
    gpus = sum(task.whole_gpus_asked for task in gpu_tasks)
    beyond = [task for task in gpu_tasks if task.whole_gpus_asked > task.gpus]
    by = sum((task.whole_gpus_asked - task.gpus for task in beyond), Fraction(0))
    pools = (Pool("whole GPUs", gpus, len(gpu_tasks)),) if gpu_tasks else ()
    return Estimate("no sharing", {}, gpus, pools, len(beyond), by)


def pooled(config: Config) -> bool:
    """Whether the backend places shares by sharing degree (node pools): probed with two
    degree sets on one GPU of four slices."""
    probe = replace(config, slices_per_gpu=4)
    pairs = (
        plans_for(replace(probe, sharing_degrees=(2,))),
        plans_for(replace(probe, sharing_degrees=(4,))),
    )
    return pairs[0].place(1) != pairs[1].place(1)


def settings_of(config: Config, layout: GpuLayout | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"backend": config.backend, "slicesPerGpu": config.slices_per_gpu}
    if pooled(config):
        settings["sharingDegrees"] = list(config.sharing_degrees)
    if layout is not None:
        settings["layout"] = layout.name
        settings["backendSettings"] = layout.environment()
    return settings


def environment_of(settings: Mapping[str, Any]) -> dict[str, str]:
    """The CASTSLICE_* variables that make a candidate's configuration."""
    environment = {
        "CASTSLICE_BACKEND": str(settings["backend"]),
        "CASTSLICE_SLICES_PER_GPU": str(settings["slicesPerGpu"]),
    }
    if "sharingDegrees" in settings:
        environment["CASTSLICE_SHARING_DEGREES"] = ",".join(map(str, settings["sharingDegrees"]))
    environment.update(settings.get("backendSettings") or {})
    return environment


@dataclass(frozen=True)
class Candidate:
    """A configuration plan counts: its settings, and how its GPUs are cut, if they are."""

    config: Config
    layout: GpuLayout | None = None


def candidate_configs(config: Config) -> Iterable[tuple[str, Candidate]]:
    """Each backend with each setting worth trying, named as the table shows it; each a
    complete configuration (rescaled() keeps the presets' and default's shares). A backend
    that cuts GPUs into instances is tried with each way of cutting them, at each S."""
    for backend in TOOLS:
        # Today's backend keeps today's resource names; another takes its own default.
        shared = config.shared_resource if backend == config.backend else ""
        base = replace(config, backend=backend, shared_resource=shared)
        if plans_for(base).gpu_layouts() is not None:
            for per_gpu in sorted({*SLICE_CANDIDATES, config.slices_per_gpu}):
                for layout in plans_for(rescaled(base, per_gpu)).gpu_layouts() or ():
                    name = f"{backend} {layout.name} S={per_gpu}"
                    yield name, Candidate(layout.config, layout)
            continue
        if not pooled(base):
            for per_gpu in sorted({*SLICE_CANDIDATES, config.slices_per_gpu}):
                yield f"{backend} S={per_gpu}", Candidate(rescaled(base, per_gpu))
            continue
        for size in range(1, MAX_POOLS + 1):
            for degrees in itertools.combinations(DEGREE_CANDIDATES, size):
                # S a multiple of the least common multiple: each share then gets the
                # smallest degree's pool it fits, with no loss to rounding (sharing_degree's
                # floor(S/s)); today's S where it is one, so nothing else need change.
                least = math.lcm(*degrees)
                per_gpu = config.slices_per_gpu if config.slices_per_gpu % least == 0 else least
                name = f"{backend} pools {','.join(map(str, degrees))}"
                yield name, Candidate(rescaled(replace(base, sharing_degrees=degrees), per_gpu))


def rescaled(config: Config, per_gpu: int) -> Config:
    """`config` at `per_gpu` slices per GPU with its presets and default slice count scaled
    to keep their shares of a GPU (rounded up where no whole count keeps one): slice counts
    are in slices, so S alone would change every Pod's share."""
    presets = {name: scaled(slices, config, per_gpu) for name, slices in config.presets.items()}
    default = scaled(config.default_slices, config, per_gpu)
    most = max(config.max_slice_ratio, per_gpu, default, *presets.values())
    return replace(
        config,
        slices_per_gpu=per_gpu,
        presets=presets,
        default_slices=default,
        max_slice_ratio=most,
    )


def scaled(slices: int, config: Config, per_gpu: int) -> int:
    """The slice count at `per_gpu` slices per GPU that keeps the share `slices` has under
    `config`, rounded up."""
    return max(1, math.ceil(Fraction(slices * per_gpu, config.slices_per_gpu)))


@dataclass(frozen=True)
class Changes:
    """What to set over today's settings for a candidate: the CASTSLICE_* variables, notes on
    what else changes with them, the slice-ratio annotations to write (by Pod), and how many
    kinds of Pods get another share of a GPU than today."""

    environment: dict[str, str]
    notes: tuple[str, ...]
    ratios: dict[str, int]
    reshared: int


def changes(
    today: Config, candidate: Config, tasks: Sequence[Task], layout: GpuLayout | None = None
) -> Changes:
    """What `candidate` asks to change over `today`; with a layout, every setting of the
    backend's that says how the GPUs are cut."""
    environment: dict[str, str] = {}
    if candidate.backend != today.backend:
        environment["CASTSLICE_BACKEND"] = candidate.backend
    if candidate.slices_per_gpu != today.slices_per_gpu:
        environment["CASTSLICE_SLICES_PER_GPU"] = str(candidate.slices_per_gpu)
    if pooled(candidate) and candidate.sharing_degrees != today.sharing_degrees:
        environment["CASTSLICE_SHARING_DEGREES"] = ",".join(map(str, candidate.sharing_degrees))
    if pooled(candidate) and candidate.sharing_strategy != today.sharing_strategy:
        environment["CASTSLICE_SHARING_STRATEGY"] = candidate.sharing_strategy
    if layout is not None:
        environment.update(layout.environment())
    if dict(candidate.presets) != dict(today.presets):
        environment["CASTSLICE_PRESETS"] = ",".join(
            f"{name}={slices}" for name, slices in candidate.presets.items()
        )
    if candidate.default_slices != today.default_slices:
        environment["CASTSLICE_DEFAULT_SLICES"] = str(candidate.default_slices)
    notes: list[str] = []
    ratios: dict[str, int] = {}
    per_gpu = candidate.slices_per_gpu
    reshared = 0
    if per_gpu != today.slices_per_gpu:
        notes += _share_changes(today, candidate)
        moved, reshared = _ratio_notes(today, candidate, tasks, ratios)
        reshared += len(notes)
        notes += moved
        if any(task.opted_in and not task.source for task in tasks):
            notes.append(
                f"each task's Pod: castops.io/slice-ratio its share of a GPU times {per_gpu}, "
                "rounded up"
            )
    most = max([candidate.max_slice_ratio, *ratios.values()])
    if most != today.max_slice_ratio:
        environment["CASTSLICE_MAX_SLICE_RATIO"] = str(most)
    if environment and plans_for(candidate).claim_templates() is not None:
        # Its Pods claim from a template per slice count the settings can produce.
        notes.append(
            "render the claim templates with these settings (castslice claim-templates) "
            "before the Pods are created"
        )
    return Changes(environment, tuple(notes), ratios, reshared)


def _share_changes(today: Config, candidate: Config) -> list[str]:
    """The presets and default that no whole slice count keeps at the candidate's S."""
    notes = []
    counts = [(f"workload-type {name}", slices) for name, slices in today.presets.items()]
    for what, slices in [*counts, ("the default slice count", today.default_slices)]:
        share = Fraction(slices, today.slices_per_gpu)
        new = scaled(slices, today, candidate.slices_per_gpu)
        if Fraction(new, candidate.slices_per_gpu) != share:
            notes.append(
                f"{what} gives {share_text(Fraction(new, candidate.slices_per_gpu))} instead "
                f"of {share_text(share)}: no whole slice count of {candidate.slices_per_gpu} "
                "keeps it"
            )
    return notes


def _ratio_notes(
    today: Config, candidate: Config, tasks: Sequence[Task], ratios: dict[str, int]
) -> tuple[list[str], int]:
    """The slice counts Pods (or policy rules) give themselves, which the settings cannot
    rescale: each with the count that keeps its share, or says the share changes; and how
    many shares change."""
    per_gpu = candidate.slices_per_gpu
    moves: dict[tuple[str, int, int], Counter[str]] = {}
    for task in tasks:
        if not task.opted_in or not (
            task.source == "slice-ratio" or task.source.startswith(POLICY_SOURCE_PREFIX)
        ):
            continue
        slices_today = int(task.gpus * today.slices_per_gpu)
        new = slices_for(task.gpus, per_gpu)
        if task.source == "slice-ratio":
            ratios[task.name] = new
            moves.setdefault(("slice-ratio", slices_today, new), Counter())[task.name] += 1
        else:
            rule = task.source.removeprefix(POLICY_SOURCE_PREFIX)
            moves.setdefault((f"rule {rule}", slices_today, new), Counter())[task.name] += 1
    notes, reshared = [], 0
    for (what, old, new), names in moves.items():
        was, becomes = Fraction(old, today.slices_per_gpu), Fraction(new, per_gpu)
        where = (
            f"set castops.io/slice-ratio to {new} (from {old})"
            if what == "slice-ratio"
            else f"the enrolment policy's {what}: set its slices to {new} (from {old})"
        )
        kept = (
            f"to keep {share_text(was)}"
            if becomes == was
            else f"({share_text(becomes)} instead of {share_text(was)}: no whole count keeps it)"
        )
        reshared += becomes != was
        notes.append(f"{where} {kept}: {_some(names)}")
    return notes, reshared


@dataclass(frozen=True)
class Nodes:
    """The nodes `plan` places the workload on as the scheduler would: the kinds of node,
    what they are ("N nodes " + `described` in the output), and whether tasks leave at
    their deletion times."""

    kinds: Sequence[NodeKind]
    described: str
    departures: bool = True


def plan(
    config: Config,
    tasks: Sequence[Task],
    named_backend: bool = False,
    nodes: Nodes | None = None,
) -> Plan:
    """Every candidate's estimate, today's and no sharing; per backend the recommended one is
    the coarsest setting within WORTH_IT of that backend's fewest GPUs. The plan recommends
    today's backend's when the user named it (the GPU nodes decide the backend), else the
    backend's whose recommended setting needs the fewest; only if it needs fewer GPUs than
    today, else it keeps today's settings and says why. With `nodes`, it also counts the
    GPUs the recommended configuration needs once kube-scheduler places the tasks on such
    nodes (`placing.fewest`): with the extender where it scores the backend's GPUs, else on
    its own scores; and again with its MostAllocated strategy and no extender."""
    candidates = dict(candidate_configs(config))
    estimates = [
        _estimate(config, candidate, tasks, name) for name, candidate in candidates.items()
    ]
    chosen = _per_backend(estimates, config)
    # Sharing pools place alike under time-slicing and MPS: the other strategy of each
    # backend's best, for what each Pod gets (never recommended over it: the same GPUs).
    twins = []
    for item in chosen.values():
        candidate = candidates[item.name]
        if pooled(candidate.config):
            other = next(s for s in SHARING_STRATEGIES if s != candidate.config.sharing_strategy)
            name = f"{item.name} ({other})"
            twin = Candidate(replace(candidate.config, sharing_strategy=other))
            candidates[name] = twin
            twins.append(_estimate(config, twin, tasks, name))
    today = estimate(config, tasks, "today")
    without = no_sharing(tasks)
    mine = (
        chosen[config.backend]
        if named_backend
        else min(chosen.values(), key=lambda item: (item.gpus, _coarseness(item, config)))
    )
    keep = ""
    if mine.gpus >= today.gpus:
        which = f"{config.backend} setting" if named_backend else "backend's setting"
        keep = f"no {which} needs fewer GPUs than today's {today.gpus}" + (
            "; sharing saves no GPU for this workload" if today.gpus >= without.gpus else ""
        )
    # The backend the plan recommends: today's when it keeps the settings.
    recommended = config if keep else candidates[mine.name].config
    # The extender scores shares of DRA devices: not whole devices such as MIG instances.
    chosen_backend = plans_for(recommended)
    claims_devices = (
        chosen_backend.claim_templates() is not None and chosen_backend.gpu_layouts() is None
    )
    marked = [replace(item, recommended=not keep and item.name == mine.name) for item in estimates]
    kept = [item for item in marked if item.recommended or _shown(item, chosen)] + twins
    opted = [task for task in tasks if task.opted_in]
    placed = packed = None
    unscheduled = ""
    layout = _layout(recommended, None if keep else candidates[mine.name].layout)
    scored = extender_scores(recommended.backend, claims_devices)
    if nodes is not None and not (scored or layout):
        unscheduled = (
            f"{recommended.backend}'s Pods ask for units of one resource per node, which the "
            "device plugin may spread over several GPUs; the count places shares of DRA "
            "devices, node pools and MIG instances"
        )
    elif nodes is not None:
        # Instances are named for the settings' first model: the nodes' GPUs are that model.
        modelled = layout is None and any(kind.model for kind in nodes.kinds)
        arrivals = arrivals_of(recommended, tasks, modelled, nodes.departures, layout)
        unfit = unplaceable(nodes.kinds, arrivals)
        if unfit:
            raise WorkloadError(
                f"{_some(Counter(unfit))}: fit{'s' if len(unfit) == 1 else ''} no empty node "
                f"{nodes.described} (its CPU, memory, GPUs or GPU model)"
            )
        placed = fewest(nodes.kinds, arrivals, "extender" if scored else "kube-scheduler")
        packed = fewest(nodes.kinds, arrivals, "most-allocated")
    return Plan(
        len(tasks),
        len(opted),
        sum((task.gpus for task in tasks), Fraction(0)),
        without,
        today,
        kept,
        chosen,
        mine.settings["backend"],
        keep,
        claims_devices,
        sum((task.gpus for task in opted if task.gpus.denominator != 1), Fraction(0)),
        twins,
        placed,
        nodes.described if nodes else "",
        unscheduled,
        packed,
    )


def _layout(config: Config, chosen: GpuLayout | None) -> GpuLayout | None:
    """How the recommended configuration's GPUs are cut: its candidate's way, else the
    first of its backend's (how its own nodes are counted); None: they are not cut."""
    if chosen is not None:
        return chosen
    layouts = plans_for(config).gpu_layouts()
    return layouts[0] if layouts else None


def arrivals_of(
    config: Config,
    tasks: Sequence[Task],
    models: bool = True,
    departures: bool = True,
    layout: GpuLayout | None = None,
) -> list[Arrival]:
    """Each task as the scheduler sees it under `config`: an opted-in share as the backend
    gives it (in thousandths of one GPU, rounded up; whole GPUs where it gives whole
    ones), a task left alone its whole GPUs; with its GPU models where the nodes have
    models, and its times where `departures`. Where the backend shares GPUs by node pools,
    a share is one client of its pool and whole GPUs come from the whole-GPU pool. Where
    it cuts GPUs into instances (`layout`), each node's GPUs are all cut into one profile:
    an instance is one of as many as a GPU of its profile's pool holds, and whole GPUs come
    from the whole-GPU pool."""
    backend = plans_for(config)
    sharing = pooled(config)
    pools = sharing or layout is not None
    given: dict[int, tuple[Fraction, str, int]] = {}
    arrivals = []
    for task in tasks:
        pool, milli = "", 0
        if task.opted_in:
            slices = max(1, math.ceil(task.gpus * config.slices_per_gpu))
            if slices not in given:
                gpus = backend.place(slices).gpus
                given[slices] = _as_scheduled(config, gpus, slices, sharing, layout)
            gpus, pool, milli = given[slices]
        else:
            gpus = Fraction(math.ceil(task.gpus))
        if pools and gpus and not pool:
            pool, milli = WHOLE, MILLI
        if pool:
            count = math.ceil(gpus) if pool == WHOLE else 1
        elif gpus and gpus < 1:
            count, milli = 1, math.ceil(gpus * MILLI)
        else:
            count, milli = math.ceil(gpus), MILLI if gpus else 0
        shape = PodShape(
            task.cpu_milli, milli, count, task.models if models else (), task.memory_mib, pool
        )
        arrivals.append(
            Arrival(
                shape,
                task.name,
                task.arrives if departures else None,
                task.leaves if departures else None,
            )
        )
    return arrivals


def _as_scheduled(
    config: Config, gpus: Fraction, slices: int, sharing: bool, layout: GpuLayout | None
) -> tuple[Fraction, str, int]:
    """What a Pod of `slices` given `gpus` asks of a node pool: its GPUs, the pool ("": not
    pooled) and the thousandths of a GPU one of its Pods holds there."""
    if layout is not None:
        cut = layout.node_pool(slices)
        if cut is None:
            return gpus, "", 0
        profile, per_gpu = cut
        return gpus, profile, MILLI // per_gpu
    degree = sharing_degree(config, slices) if sharing else None
    if degree and gpus < 1:
        pool = str(degree)
        return gpus, pool, client_milli(pool)
    return gpus, "", 0


def _estimate(today: Config, candidate: Candidate, tasks: Sequence[Task], name: str) -> Estimate:
    """The candidate's estimate with what to set over today's settings for it."""
    change = changes(today, candidate.config, tasks, candidate.layout)
    found = estimate(candidate.config, tasks, name, candidate.layout)
    return replace(
        found,
        environment=change.environment,
        notes=change.notes + found.notes,
        ratios=change.ratios,
        reshared=change.reshared,
    )


def _per_backend(estimates: Sequence[Estimate], today: Config) -> dict[str, Estimate]:
    chosen: dict[str, Estimate] = {}
    backends = dict.fromkeys(item.settings["backend"] for item in estimates)
    for backend in backends:
        mine = [item for item in estimates if item.settings["backend"] == backend]
        fewest = min(item.gpus for item in mine)
        # A finer S costs a backend that cuts GPUs into instances no pool or template: its
        # Pods only get instances that fit them better. It takes the fewest GPUs outright.
        slack = 0 if any("layout" in item.settings for item in mine) else WORTH_IT
        good = [item for item in mine if item.gpus <= fewest * (1 + slack)]
        chosen[backend] = min(good, key=lambda item: (_coarseness(item, today), item.gpus))
    return chosen


def _coarseness(item: Estimate, today: Config) -> tuple[int, int, int, int, int]:
    """Fewer groups of nodes (each node serves one, so each is a split of the cluster a
    scheduler cannot pack across), then no share that changes, then today's slices per GPU
    (nothing to rescale), then fewer slices per GPU, then smaller degrees."""
    degrees = item.settings.get("sharingDegrees") or []
    per_gpu = item.settings["slicesPerGpu"]
    return (len(item.pools), item.reshared, per_gpu != today.slices_per_gpu, per_gpu, sum(degrees))


def _shown(item: Estimate, chosen: Mapping[str, Estimate]) -> bool:
    """The table shows each backend's slice settings, its default pool and its best pools."""
    best = chosen[item.settings["backend"]]
    if "layout" in item.settings:
        # Each way of cutting GPUs at the best one's S, and the best one's at each S.
        return item.settings["slicesPerGpu"] == best.settings["slicesPerGpu"] or (
            item.settings["layout"] == best.settings["layout"]
        )
    degrees = item.settings.get("sharingDegrees")
    if degrees is None:
        return True
    return item.name == best.name or degrees == [4]
