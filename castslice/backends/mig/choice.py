"""Which MIG instance holds a share of a GPU, on each GPU model of the cluster.

"Holds s/S" is a setting: memory-first (the instance's MiB are at least s/S of what MIG
makes usable on the GPU, GpuModel.usable_mib: memory is what kills a neighbour, compute
only slows) or strict (its SMs too are at least s/S of GpuModel.usable_sms). A share is of
what MIG makes usable, not of the board: MIG keeps part of every memory slice, so no
instance has its slices' share of the board's memory (docs/backends.md). Of the instances
that hold the share, the smallest: the fewest memory slices, then the fewest compute slices.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

from castslice.backends.mig.profiles import MODELS, GpuModel, Profile, describe
from castslice.settings.config import Config


class Instance(NamedTuple):
    model: GpuModel
    profile: Profile

    def text(self) -> str:
        return describe(self.model, self.profile)


def models(config: Config) -> tuple[GpuModel, ...]:
    """The configured models, each recognised by the product names the settings add."""
    return tuple(
        MODELS[name].with_names(tuple(config.mig_product_names.get(name, ())))
        for name in config.mig_gpu_models
    )


def offered(config: Config, model: GpuModel) -> tuple[Profile, ...]:
    """The model's profiles the cluster offers: NVIDIA's, restricted by CASTSLICE_MIG_PROFILES."""
    if config.mig_profiles is None:
        return model.profiles
    return tuple(p for p in model.profiles if p.name in config.mig_profiles)


def holds(config: Config, model: GpuModel, profile: Profile, share: Fraction) -> bool:
    if model.memory_share(profile) < share:
        return False
    return config.mig_fit == "memory" or model.compute_share(profile) >= share


def smallest(
    profiles: tuple[Profile, ...], config: Config, model: GpuModel, share: Fraction
) -> Profile | None:
    fitting = [p for p in profiles if holds(config, model, p, share)]
    return min(fitting, key=lambda p: (p.memory_slices, p.compute_slices), default=None)


def holding(config: Config, model: GpuModel, share: Fraction) -> list[Profile]:
    """Every offered instance of `model` that holds `share`, smallest first."""
    fitting = [p for p in offered(config, model) if holds(config, model, p, share)]
    return sorted(fitting, key=lambda p: (p.memory_slices, p.compute_slices))


def choose(config: Config, model: GpuModel, share: Fraction) -> Profile | None:
    """The smallest offered instance of `model` that holds `share`, or None: none does."""
    return smallest(offered(config, model), config, model, share)


def left_out(config: Config, model: GpuModel, share: Fraction) -> Profile | None:
    """NVIDIA's smallest instance holding `share` when the settings leave it out, else None."""
    best = smallest(model.profiles, config, model, share)
    if best is None or best in offered(config, model):
        return None
    return best


def time_shares(config: Config, instance: Instance, share: Fraction, clients: int) -> bool:
    """Whether a Pod of `share` may share `instance` with up to `clients` - 1 others: it is the
    model's smallest offered one, and a client's part of it (1/clients, by the fit rule)
    still holds the share, so a Pod never gets less than its share."""
    model = instance.model
    least = smallest_offered(config, model)
    if least != instance.profile or model.memory_share(least) < share * clients:
        return False
    return config.mig_fit == "memory" or model.compute_share(least) >= share * clients


def smallest_offered(config: Config, model: GpuModel) -> Profile | None:
    return min(
        offered(config, model), key=lambda p: (p.memory_slices, p.compute_slices), default=None
    )


def same_meaning(a: Instance, b: Instance) -> bool:
    """Two models' instances of one name that give the same shares of their GPU."""
    return (
        a.profile.name == b.profile.name
        and a.model.compute(a.profile) == b.model.compute(b.profile)
        and a.model.memory(a.profile) == b.model.memory(b.profile)
    )


def ambiguous(instance: Instance, models: tuple[GpuModel, ...]) -> bool:
    """Whether another of `models` has a profile of this name that gives other shares
    (A100-40GB's 1g.10gb is a quarter of the memory, A100-80GB's an eighth)."""
    for model in models:
        other = model.profile(instance.profile.name)
        if other is not None and not same_meaning(instance, Instance(model, other)):
            return True
    return False
