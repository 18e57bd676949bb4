"""`castslice plan`'s arithmetic: how many GPUs a workload mix needs under each configuration.

A workload is a list of tasks, each one GPU container (or one Pod that asks for whole
GPUs) with the share of one GPU it needs. Every estimate asks the backends themselves
how a task is placed (`backend_for(config).place(slices)`), so it rounds exactly as the
webhook would: a share becomes the slice count it rounds up to, the backend turns that
count into what the Pod gets, and Pods that land alike (same resource, same node labels)
pack together on GPUs of their own. The count ignores node boundaries, CPU and memory:
it is the floor a scheduler can reach, which the packing benchmark measures against.
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

from castslice.backends import BACKENDS, Placement, backend_for, sharing_degree
from castslice.contract.definitions import APPLIED, DecisionRecord
from castslice.settings.config import Config

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
MILLI = 1000
# Below this share of the GPU demand in fractions of a GPU, fragments are too few for the
# scheduler extender to be worth running.
EXTENDER_SHARE = Fraction(1, 10)


class WorkloadError(ValueError):
    """Input that is not a workload: the message names the row or object."""


@dataclass(frozen=True)
class Task:
    """One GPU container that opted in (`gpus` its share of one GPU), or one Pod left alone
    (`gpus` the whole GPUs it asks for)."""

    gpus: Fraction
    opted_in: bool
    name: str = ""


@dataclass(frozen=True)
class Pool:
    """GPUs that serve tasks placed alike; `degree` is its clients per GPU, if it shares."""

    label: str
    gpus: int
    tasks: int
    degree: int | None = None


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

    def as_dict(self, baseline: int, today: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": self.settings,
            "gpus": self.gpus,
            "gpusSavedVsNoSharing": baseline - self.gpus,
            "gpusVsToday": self.gpus - today,
            "podsRoundedUp": self.rounded_up,
            "gpusRoundedUp": round(float(self.rounded_by), 3),
            "pools": [
                {"pool": pool.label, "gpus": pool.gpus, "tasks": pool.tasks}
                | ({"degree": pool.degree} if pool.degree else {})
                | ({"shareOfGpus": round(pool.gpus / self.gpus, 3)} if self.gpus else {})
                for pool in self.pools
            ],
            "warnings": list(self.warnings),
            "recommended": self.recommended,
        }


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
    # Whether the recommended backend shares GPUs as devices the scheduler allocates (the
    # scheduler extender scores those), and the demand that comes in shares of a GPU.
    recommended_claims_devices: bool = False
    shared_demand: Fraction = Fraction(0)

    @property
    def extender_advice(self) -> tuple[bool, str]:
        """Whether the fragmentation-aware scheduler extender is worth deploying, and why."""
        share = self.shared_demand / self.demand if self.demand else Fraction(0)
        if not self.recommended_claims_devices:
            return False, (
                "the scheduler extender scores GPUs shared as DRA devices; the recommended "
                "backend's GPUs are not tracked per device"
            )
        if share < EXTENDER_SHARE:
            return False, (
                f"only {float(share):.0%} of the GPU demand comes in shares of a GPU: few "
                "fragments for the scheduler extender to avoid"
            )
        return True, (
            f"{float(share):.0%} of the GPU demand comes in shares of a GPU, whose leftovers "
            "strand later Pods: the fragmentation-aware scheduler extender (castslice "
            "extender, infra/scheduler/fgd-extender.yaml) places more of it "
            "(docs/performance.md#the-scheduler-extender)"
        )

    @property
    def ideal(self) -> int:
        """GPUs if every share packed perfectly."""
        return math.ceil(self.demand)

    @property
    def best(self) -> Estimate:
        return next(estimate for estimate in self.candidates if estimate.recommended)

    def as_dict(self) -> dict[str, Any]:
        baseline, today = self.no_sharing.gpus, self.today.gpus
        return {
            "tasks": self.tasks,
            "optedIn": self.opted_in,
            "gpuDemand": round(float(self.demand), 3),
            "perfectPacking": self.ideal,
            "noSharing": self.no_sharing.as_dict(baseline, today),
            "today": self.today.as_dict(baseline, today),
            "candidates": [estimate.as_dict(baseline, today) for estimate in self.candidates],
            "recommended": self.best.name,
            "recommendedPerBackend": {
                backend: {"name": item.name, "settings": item.settings, "gpus": item.gpus}
                for backend, item in self.per_backend.items()
            },
            "extender": dict(zip(("worthDeploying", "why"), self.extender_advice, strict=True)),
        }


def tasks_from_trace(text: str, source: str = "trace") -> list[Task]:
    """The tasks of a task list shaped as openb's: a fraction of one GPU (`num_gpu` 1 and
    `gpu_milli` below 1000) opts in; whole GPUs and CPU-only tasks do not."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [column for column in TRACE_COLUMNS if column not in (reader.fieldnames or ())]
    if missing:
        raise WorkloadError(f"{source}: no {' or '.join(missing)} column in its header")
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
        if count == 1 and 0 < milli < MILLI:
            tasks.append(Task(Fraction(milli, MILLI), True, name))
        else:
            tasks.append(
                Task(Fraction(count * milli, MILLI) if milli else Fraction(0), False, name)
            )
    return tasks


def tasks_from_pod(pod: Mapping[str, Any], config: Config) -> list[Task]:
    """A Pod as CastSlice left it: one task per GPU container it rewrote (its share is the
    decision record's slices of today's slices per GPU), or one task with the GPUs the Pod
    asks for when it was left alone."""
    metadata = pod.get("metadata") or {}
    name = f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '?'}"
    record = DecisionRecord.parse((metadata.get("annotations") or {}).get(APPLIED) or "")
    if record is not None:
        share = Fraction(record.slices, config.slices_per_gpu)
        return [Task(share, True, f"{name} {container}") for container in record.original]
    spec = pod.get("spec") or {}
    asked = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        quantity = (resources.get("limits") or {}).get(config.gpu_resource) or (
            resources.get("requests") or {}
        ).get(config.gpu_resource)
        if quantity is not None and str(quantity).isdigit():
            asked += int(str(quantity))
    return [Task(Fraction(asked), False, name)]


NodeKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Group:
    """Tasks that land on the same kind of node: their shares, whole GPUs and degree."""

    shares: Fraction = Fraction(0)
    whole: int = 0
    tasks: int = 0
    has_shares: bool = False
    degree: int | None = None


def estimate(config: Config, tasks: Sequence[Task], name: str) -> Estimate:
    """GPUs `config` needs for `tasks`: each opted-in share rounded up to slices and placed by
    the backend; Pods that ask for the same resource with the same node labels share a
    group of nodes, whose shares pack onto whole GPUs beside its whole-GPU Pods. Whole GPUs
    go where a Pod left alone goes (the GPU resource, no labels)."""
    backend = backend_for(config)
    per_gpu = config.slices_per_gpu
    pools = pooled(config)
    whole_key: NodeKey = (config.gpu_resource, ())
    groups: dict[NodeKey, _Group] = {}
    rounded, rounded_by, multi_gpu, finer = 0, Fraction(0), 0, 0
    placements: dict[int, Placement] = {}
    # Tasks asking alike are counted once: a trace has thousands, of a few hundred kinds
    # (counted by integers: hashing a Fraction costs twenty times as much).
    kinds = Counter((task.opted_in, task.gpus.numerator, task.gpus.denominator) for task in tasks)
    for (opted_in, numerator, denominator), count in kinds.items():
        gpus = Fraction(numerator, denominator)
        if not opted_in:
            if gpus:
                group = groups.setdefault(whole_key, _Group())
                group.whole += math.ceil(gpus) * count
                group.tasks += count
            continue
        slices = max(1, math.ceil(gpus * per_gpu))
        if slices not in placements:
            placements[slices] = backend.place(slices)
        placement = placements[slices]
        given = placement.gpus
        if gpus > 1:
            multi_gpu += count
        if given > gpus:
            rounded += count
            rounded_by += (given - gpus) * count
            if pools and given < 1 and gpus < Fraction(1, max(config.sharing_degrees)):
                finer += count
        if given.denominator == 1:
            group = groups.setdefault(whole_key, _Group())
            group.whole += int(given) * count
        else:
            key = (placement.resource, tuple(sorted(placement.node_selector.items())))
            group = groups.setdefault(key, _Group())
            group.shares += given * count
            group.has_shares = True
            group.degree = sharing_degree(config, slices) if pools else None
        group.tasks += count
    found = [_pool(group, per_gpu) for group in groups.values()]
    found.sort(key=lambda pool: (pool.label == "whole GPUs", pool.degree or 0))
    warnings = []
    if multi_gpu:
        warnings.append(
            f"{multi_gpu} opted-in task(s) ask for more than one GPU: they get whole GPUs, "
            "and a share of several GPUs is not what sharing offers"
        )
    if finer:
        warnings.append(
            f"{finer} task(s) need less than 1/{max(config.sharing_degrees)} of a GPU, the "
            "finest share the sharing nodes offer: they get more than they need"
        )
    total = sum(pool.gpus for pool in found)
    return Estimate(
        name, settings_of(config), total, tuple(found), rounded, rounded_by, tuple(warnings)
    )


def _pool(group: _Group, per_gpu: int) -> Pool:
    if group.degree:
        label = f"{group.degree} per GPU"
    elif not group.has_shares:
        label = "whole GPUs"
    elif group.whole:
        label = f"shares of {per_gpu} and whole GPUs"
    else:
        label = f"shares of {per_gpu}"
    gpus = math.ceil(group.shares) + group.whole
    return Pool(label, gpus, group.tasks, group.degree)


def no_sharing(tasks: Sequence[Task]) -> Estimate:
    """Every GPU task on whole GPUs: what the cluster needs without CastSlice."""
    gpu_tasks = [task for task in tasks if task.gpus]
    gpus = sum(math.ceil(task.gpus) for task in gpu_tasks)
    fractional = [task for task in gpu_tasks if task.gpus.denominator != 1]
    by = sum((math.ceil(task.gpus) - task.gpus for task in fractional), Fraction(0))
    pools = (Pool("whole GPUs", gpus, len(gpu_tasks)),) if gpu_tasks else ()
    return Estimate("no sharing", {}, gpus, pools, len(fractional), by)


def pooled(config: Config) -> bool:
    """Whether the backend places shares by sharing degree (node pools): probed with two
    degree sets on one GPU of four slices."""
    probe = replace(config, slices_per_gpu=4)
    pairs = (
        backend_for(replace(probe, sharing_degrees=(2,))),
        backend_for(replace(probe, sharing_degrees=(4,))),
    )
    return pairs[0].place(1) != pairs[1].place(1)


def settings_of(config: Config) -> dict[str, Any]:
    settings: dict[str, Any] = {"backend": config.backend, "slicesPerGpu": config.slices_per_gpu}
    if pooled(config):
        settings["sharingDegrees"] = list(config.sharing_degrees)
    return settings


def environment_of(settings: Mapping[str, Any]) -> dict[str, str]:
    """The CASTSLICE_* variables that make a candidate's configuration."""
    environment = {
        "CASTSLICE_BACKEND": str(settings["backend"]),
        "CASTSLICE_SLICES_PER_GPU": str(settings["slicesPerGpu"]),
    }
    if "sharingDegrees" in settings:
        environment["CASTSLICE_SHARING_DEGREES"] = ",".join(map(str, settings["sharingDegrees"]))
    return environment


def candidate_configs(config: Config) -> Iterable[tuple[str, Config]]:
    """Each backend with each setting worth trying, named as the table shows it."""
    for backend in BACKENDS:
        base = replace(config, backend=backend, shared_resource="")
        if not pooled(base):
            for per_gpu in SLICE_CANDIDATES:
                yield f"{backend} S={per_gpu}", replace(base, slices_per_gpu=per_gpu)
            continue
        for size in range(1, MAX_POOLS + 1):
            for degrees in itertools.combinations(DEGREE_CANDIDATES, size):
                # S the least common multiple: each share then gets the smallest degree's
                # pool it fits, with no loss to rounding (sharing_degree's floor(S/s)).
                per_gpu = math.lcm(*degrees)
                name = f"{backend} pools {','.join(map(str, degrees))}"
                yield name, replace(base, slices_per_gpu=per_gpu, sharing_degrees=degrees)


def plan(config: Config, tasks: Sequence[Task]) -> Plan:
    """Every candidate's estimate, today's and no sharing; per backend the recommended one is
    the coarsest setting within WORTH_IT of that backend's fewest GPUs, and the plan's
    recommendation the backend whose recommended setting needs the fewest."""
    candidates = dict(candidate_configs(config))
    estimates = [estimate(candidate, tasks, name) for name, candidate in candidates.items()]
    chosen = _per_backend(estimates)
    best = min(chosen.values(), key=lambda item: (item.gpus, _coarseness(item)))
    claims_devices = backend_for(candidates[best.name]).claim_templates() is not None
    marked = [replace(item, recommended=item.name == best.name) for item in estimates]
    kept = [item for item in marked if item.recommended or _shown(item, chosen)]
    today = estimate(config, tasks, "today")
    opted = [task for task in tasks if task.opted_in]
    return Plan(
        len(tasks),
        len(opted),
        sum((task.gpus for task in tasks), Fraction(0)),
        no_sharing(tasks),
        today,
        kept,
        chosen,
        claims_devices,
        sum((task.gpus for task in opted if task.gpus.denominator != 1), Fraction(0)),
    )


def _per_backend(estimates: Sequence[Estimate]) -> dict[str, Estimate]:
    chosen: dict[str, Estimate] = {}
    backends = dict.fromkeys(item.settings["backend"] for item in estimates)
    for backend in backends:
        mine = [item for item in estimates if item.settings["backend"] == backend]
        fewest = min(item.gpus for item in mine)
        good = [item for item in mine if item.gpus <= fewest * (1 + WORTH_IT)]
        chosen[backend] = min(good, key=lambda item: (_coarseness(item), item.gpus))
    return chosen


def _coarseness(item: Estimate) -> tuple[int, int, int]:
    """Fewer groups of nodes (each node serves one, so each is a split of the cluster a
    scheduler cannot pack across), then fewer slices per GPU, then smaller degrees."""
    degrees = item.settings.get("sharingDegrees") or []
    return (len(item.pools), item.settings["slicesPerGpu"], sum(degrees))


def _shown(item: Estimate, chosen: Mapping[str, Estimate]) -> bool:
    """The table shows each backend's slice settings, its default pool and its best pools."""
    degrees = item.settings.get("sharingDegrees")
    if degrees is None:
        return True
    return item.name == chosen[item.settings["backend"]].name or degrees == [4]
