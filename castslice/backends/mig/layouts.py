"""How MIG instances lay out on a GPU, for counting the GPUs a workload needs.

A GPU's instances must form a layout NVIDIA allows: each instance sits at one of its
profile's placements (a start and a size in memory slices), no two overlap, and their
compute slices add up to at most the GPU's. The placements are NVML's
(`GpuInstancePlacements`), as go-nvml's A100 and A30 models at 2f9e261 give them
(`pkg/nvml/mock/gpus/{a100,a30}.go`, tests/test_mig_layouts.py checks them against the
verbatim copies); the H100s, H200 and B200 have the A100's (NVIDIA's MIG User
Guide, "Supported MIG Profiles"; the H200 capture's and the H100 NVL's `-lgipp` say so too), a
placement being keyed by the profile's compute and memory slices.

`all-balanced` is mig-parted v0.15.0's layout of that name (`config-default.yaml`), per
model.

Counting packs instances first-fit decreasing (largest memory, then compute, first; each
into the fullest GPU whose free placements take it): a packing NVIDIA allows, which may
use a GPU more than the best one could.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from castslice.backends.mig import choice
from castslice.backends.mig.profiles import PROFILE_NAMES, GpuModel, Profile
from castslice.backends.mig.stacks import stack_for
from castslice.backends.roles import LaidOut
from castslice.settings.config import Config

# The instance (its profile's name) a Pod of a slice count gets under a configuration, as
# the backend places it; None: whole GPUs.
Chooser = Callable[[Config, int], str | None]

# The memory slices an instance may start at, by its (compute slices, memory slices), per
# GPU geometry (compute slices, memory slices of the whole GPU).
STARTS: Mapping[tuple[int, int], Mapping[tuple[int, int], tuple[int, ...]]] = {
    (7, 8): {
        (1, 1): (0, 1, 2, 3, 4, 5, 6),
        (1, 2): (0, 2, 4, 6),
        (2, 2): (0, 2, 4),
        (3, 4): (0, 4),
        (4, 4): (0,),
        (7, 8): (0,),
    },
    (4, 4): {
        (1, 1): (0, 1, 2, 3),
        (2, 2): (0, 2),
        (4, 4): (0,),
    },
}

# mig-parted v0.15.0's `all-balanced`, per model: instances per GPU.
BALANCED: Mapping[str, Mapping[str, int]] = {
    "A100-40GB": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    "A100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-NVL": {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
    "H100-96GB": {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1},
    "H200": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    "B200": {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
    "A30": {"1g.6gb": 2, "2g.12gb": 1},
}


class GpuState(NamedTuple):
    """One GPU's instances so far: the memory slices taken (a bit each), the compute slices
    used, and the instances, largest first."""

    taken: int = 0
    compute: int = 0
    instances: tuple[str, ...] = ()


def starts(model: GpuModel, profile: Profile) -> tuple[int, ...]:
    geometry = STARTS[(model.compute_total, model.memory_total)]
    return geometry[(profile.compute_slices, profile.memory_slices)]


def put(model: GpuModel, state: GpuState, profile: Profile, start: int) -> GpuState | None:
    """`state` with one more `profile` instance at the placement starting at `start`, or
    None: that placement is taken, or the GPU's compute slices are."""
    bits = ((1 << profile.memory_slices) - 1) << start
    if state.taken & bits or state.compute + profile.compute_slices > model.compute_total:
        return None
    return GpuState(
        state.taken | bits,
        state.compute + profile.compute_slices,
        (*state.instances, profile.name),
    )


def remove(state: GpuState, profile: Profile, start: int) -> GpuState:
    """`state` without the `profile` instance at the placement starting at `start`, as
    before `put` placed it there: its memory and compute slices free again."""
    bits = ((1 << profile.memory_slices) - 1) << start
    if state.taken & bits != bits or profile.name not in state.instances:
        raise ValueError(f"no {profile.name} instance at slice {start} to remove")
    instances = list(state.instances)
    instances.remove(profile.name)
    return GpuState(state.taken & ~bits, state.compute - profile.compute_slices, tuple(instances))


def add(model: GpuModel, state: GpuState, profile: Profile) -> GpuState | None:
    """`state` with one more `profile` instance at its first free placement, or None."""
    for start in starts(model, profile):
        if (after := put(model, state, profile, start)) is not None:
            return after
    return None


def allowed(model: GpuModel, instances: Mapping[str, int]) -> bool:
    """Whether one GPU of `model` can hold these instances together (every order of
    placements tried: the layouts are a handful of instances)."""
    wanted = [model.profile(name) for name, count in instances.items() for _ in range(count)]
    if any(profile is None for profile in wanted):
        return False
    profiles = sorted((p for p in wanted if p is not None), key=_largest_first)

    def place(index: int, taken: int, compute: int) -> bool:
        if index == len(profiles):
            return True
        profile = profiles[index]
        if compute + profile.compute_slices > model.compute_total:
            return False
        for start in starts(model, profile):
            bits = ((1 << profile.memory_slices) - 1) << start
            if not taken & bits and place(
                index + 1, taken | bits, compute + profile.compute_slices
            ):
                return True
        return False

    return place(0, 0, 0)


def _largest_first(profile: Profile) -> tuple[int, int]:
    return (-profile.memory_slices, -profile.compute_slices)


def pack(model: GpuModel, instances: Mapping[str, int]) -> Counter[tuple[str, ...]]:
    """GPUs holding `instances` (by profile name), first-fit decreasing: how many GPUs get
    each layout (its instances, largest first)."""
    gpus: Counter[GpuState] = Counter()
    profiles = sorted((p for p in model.profiles if instances.get(p.name)), key=_largest_first)
    for profile in profiles:
        left = instances[profile.name]
        while left:
            # The fullest GPU that takes one more; GPUs alike take as many as they are.
            fitting = [
                (state, after)
                for state in gpus
                if (after := add(model, state, profile)) is not None
            ]
            if fitting:
                state, after = max(fitting, key=lambda pair: (pair[0].compute, pair[0].taken))
                moved = min(left, gpus[state])
                gpus[state] -= moved
                if not gpus[state]:
                    del gpus[state]
                gpus[after] += moved
                left -= moved
                continue
            # New GPUs, each filled with as many as one takes, the last with what is left.
            full, alone = GpuState(), 0
            while (more := add(model, full, profile)) is not None and alone < left:
                full, alone = more, alone + 1
            if not alone:
                raise ValueError(f"{model.name} has no placement for {profile.name}")
            gpus[full] += left // alone
            rest = GpuState()
            for _ in range(left % alone):
                rest = add(model, rest, profile) or rest
            if left % alone:
                gpus[rest] += 1
            left = 0
    return Counter({state.instances: count for state, count in gpus.items()})


def layout_text(instances: tuple[str, ...]) -> str:
    """One GPU's layout, e.g. `3g.40gb, 2g.20gb, 1g.10gb x2`."""
    counts = Counter(instances)
    return ", ".join(name + (f" x{count}" if count > 1 else "") for name, count in counts.items())


class MigLayout:
    """One way `castslice plan` cuts the GPUs of the first model the settings name:
    `all-balanced`, `all-<profile>`, or `mix` (each Pod's instance, packed as above).

    A layout of one kind offers only its profiles (CASTSLICE_MIG_PROFILES), so each Pod gets
    the smallest of those that holds it, or a whole GPU where none does. Under the device
    plugin's `single` strategy a node offers one profile (GPU Feature Discovery labels a
    node of several `-MIG-INVALID`), and a GKE node pool one partition size: there every GPU
    of the mix holds one profile, and there is no `all-balanced`.
    """

    def __init__(
        self, config: Config, name: str, chooser: Chooser, spell_profiles: bool = False
    ) -> None:
        self.model = choice.models(config)[0]
        self.name = name
        self.chooser = chooser
        # Say "every profile" as the list of them: today's settings restrict them.
        self.spell_profiles = spell_profiles
        self.stack = stack_for(config)
        self.one_profile = self.stack.one_profile
        self.per_gpu: Mapping[str, int] | None = None
        if name == "all-balanced":
            self.per_gpu = BALANCED[self.model.name]
        elif name.startswith("all-"):
            profile = self.model.profile(name.removeprefix("all-"))
            if profile is None:
                raise ValueError(f"{self.model.name} has no MIG profile {name}")
            self.per_gpu = {profile.name: profile.per_gpu}
        profiles = config.mig_profiles if self.per_gpu is None else tuple(self.per_gpu)
        # The settings keep every model the nodes have: the Pods' instances are named for
        # the first (choice.py), on whose GPUs plan counts them.
        self.config = replace(config, mig_profiles=profiles)

    def environment(self) -> dict[str, str]:
        config = self.config
        environment = {
            "CASTSLICE_MIG_GPU_MODELS": ",".join(config.mig_gpu_models),
            "CASTSLICE_MIG_STACK": config.mig_stack,
            "CASTSLICE_MIG_FIT": config.mig_fit,
            "CASTSLICE_MIG_WHOLE_GPU": config.mig_whole_gpu,
        }
        if config.mig_profiles is not None:
            environment["CASTSLICE_MIG_PROFILES"] = ",".join(config.mig_profiles)
        elif self.spell_profiles:
            offered = {p.name for model in choice.models(config) for p in model.profiles}
            every = [name for name in PROFILE_NAMES if name in offered]
            environment["CASTSLICE_MIG_PROFILES"] = ",".join(every)
        return environment

    def pack(self, pods: Mapping[int, int]) -> list[LaidOut]:
        instances: Counter[str] = Counter()
        for slices, count in pods.items():
            name = self.chooser(self.config, slices)
            if name is not None:
                instances[name] += count
        if not instances:
            return []
        pods_total = sum(instances.values())
        if self.per_gpu is None and self.one_profile:
            # GPUs cut all-<profile>, as many of each as its Pods need.
            laid = []
            for profile in self.model.profiles:
                count = instances.get(profile.name, 0)
                if count:
                    gpus = math.ceil(count / profile.per_gpu)
                    held = ((profile.name, profile.per_gpu),)
                    laid.append(LaidOut(f"all-{profile.name}", gpus, count, held))
            return laid
        if self.per_gpu is None:
            found = pack(self.model, instances)
            laid = [
                LaidOut(layout_text(layout), gpus, len(layout) * gpus, _count(layout))
                for layout, gpus in found.items()
            ]
            return sorted(laid, key=lambda item: (-item.gpus, item.layout))
        per_gpu = self.per_gpu
        gpus = max(math.ceil(instances[name] / per_gpu[name]) for name in instances)
        layout = tuple(name for name, count in per_gpu.items() for _ in range(count))
        return [LaidOut(self.name, gpus, pods_total, _count(layout))]

    def node_pool(self, slices: int) -> tuple[str, int] | None:
        name = self.chooser(self.config, slices)
        profile = None if name is None else self.model.profile(name)
        return None if profile is None else (profile.name, profile.per_gpu)

    def notes(self, laid_out: Sequence[LaidOut]) -> tuple[str, ...]:
        gpus = sum(laid.gpus for laid in laid_out)
        if not gpus:
            return ()
        model = self.model.name
        pools = self.stack.node_pools(
            model, [(laid.gpus, laid.instances[0][0]) for laid in laid_out]
        )
        if pools is not None:
            return (pools,)
        if self.per_gpu is not None:
            return (
                f"label the nodes of the {gpus} MIG {_gpus(gpus)} ({model}) "
                f"nvidia.com/mig.config={self.name} for the GPU Operator's mig-manager",
            )
        if self.one_profile:
            labels = "; ".join(
                f"{laid.gpus} {_gpus(laid.gpus)} nvidia.com/mig.config={laid.layout}"
                for laid in laid_out
            )
            return (
                f"label the nodes of the {gpus} MIG {_gpus(gpus)} ({model}), one profile a "
                f"node: {labels}",
            )
        cut = "; ".join(f"{laid.gpus} x ({laid.layout})" for laid in laid_out)
        return (
            f"cut the {gpus} MIG {_gpus(gpus)} ({model}) as {cut}: a mig-parted config of "
            "your own where a layout is not all-balanced or all-<profile>, set by "
            "nvidia.com/mig.config on each node",
        )


def _gpus(count: int) -> str:
    return "GPU" if count == 1 else "GPUs"


def _count(layout: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    return tuple(Counter(layout).items())


def layouts(config: Config, chooser: Chooser) -> list[MigLayout]:
    """The mix of the profiles the settings offer first (how a configuration's own nodes are
    counted), then every way of cutting the model's GPUs, whatever today's settings offer:
    the mix of every profile, all-balanced, and all-<profile> for each of its profiles."""
    model = choice.models(config)[0]
    balanced = [] if stack_for(config).one_profile else ["all-balanced"]
    restricted = config.mig_profiles is not None
    every = replace(config, mig_profiles=None)
    names = ["mix", *balanced] + [f"all-{p.name}" for p in model.profiles]
    found = [MigLayout(every, name, chooser, spell_profiles=restricted) for name in names]
    if restricted:
        today = f"mix of {','.join(config.mig_profiles or ())}"
        found.insert(0, MigLayout(config, today, chooser))
    return found
