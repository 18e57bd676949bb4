"""NVIDIA MIG: a share of a GPU becomes the smallest MIG instance that holds it.

A MIG instance is hardware-isolated (its own memory, cache and compute slices), so one
Pod's memory hog or fault never reaches its neighbours; the price is that instances come
in NVIDIA's fixed sizes (profiles.py), so a Pod gets the instance that holds its share,
whose real compute and memory the decision record and the warnings state.

How a Pod asks for an instance depends on the cluster's stack (CASTSLICE_MIG_STACK),
an object chosen once from the settings (stacks.py). The tools' answers are in tools.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from castslice.backends.mig import choice, devices
from castslice.backends.mig.choice import Instance
from castslice.backends.mig.profiles import MODELS, PROFILE_NAMES, fraction_text
from castslice.backends.mig.stacks import (
    GKE_CLIENTS,
    GKE_SHARING,
    PARTITION,
    PRODUCT,
    stack_for,
)
from castslice.backends.placer import (
    LeftAlone,
    Placement,
    Placer,
    claim_operations,
    claims_left_alone,
    label_count,
    whole_gpus,
)
from castslice.contract.kube import PodSpec
from castslice.contract.patch import GpuContainer, PatchOperation
from castslice.settings.config import Config

# The choices of settings that name the profile table's entries.
SETTING_CHOICES: Mapping[str, tuple[str, ...]] = {
    "CASTSLICE_MIG_GPU_MODELS": tuple(MODELS),
    "CASTSLICE_MIG_PROFILES": PROFILE_NAMES,
    "CASTSLICE_MIG_PRODUCT_NAMES": tuple(MODELS),
}


def foreign_profiles(config: Config) -> str | None:
    """The refusal of CASTSLICE_MIG_PROFILES naming a profile no model of
    CASTSLICE_MIG_GPU_MODELS has (every Pod would get a whole GPU), or None."""
    if config.mig_profiles is None:
        return None
    offered = {p.name for name in config.mig_gpu_models for p in MODELS[name].profiles}
    foreign = [name for name in config.mig_profiles if name not in offered]
    if not foreign:
        return None
    return (
        f"CASTSLICE_MIG_PROFILES: {', '.join(foreign)} "
        f"{'is a profile' if len(foreign) == 1 else 'are profiles'} of no model in "
        f"CASTSLICE_MIG_GPU_MODELS ({', '.join(config.mig_gpu_models)}); their profiles are "
        f"{', '.join(name for name in PROFILE_NAMES if name in offered)}"
    )


class MigPlacer(Placer):
    name = "mig"
    placement_keys = (PRODUCT, PARTITION, GKE_SHARING, GKE_CLIENTS)
    policy_mode_refusal = (
        "the mig backend chooses a MIG profile per GPU model, which policy mode does not "
        "render yet; use the webhook (castslice webhook) with CASTSLICE_BACKEND=mig"
    )

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.stack = stack_for(config)

    def place(self, slices: int) -> Placement:
        placement = self._place(slices)
        template = self.stack.claim_template(slices)
        return placement if template is None else placement._replace(claim_template=template)

    def _choice(self, slices: int) -> tuple[list[Instance], int, tuple[str, ...]]:
        """The instances (one per model that has one) a Pod of `slices` gets, or none and the
        whole GPUs it gets; with what the Pod is warned of."""
        config = self.config
        models = choice.models(config)
        if slices >= config.slices_per_gpu:
            gpus = whole_gpus(config, slices)
            if config.mig_whole_gpu != "7g" or gpus != 1:
                return [], gpus, ()
            offered = [m for m in models if m.full() in choice.offered(config, m)]
            return [Instance(m, m.full()) for m in offered], 1, ()
        share = Fraction(slices, config.slices_per_gpu)
        caveats = []
        chosen = []
        for model in models:
            profile = choice.choose(config, model, share)
            missing = choice.left_out(config, model, share)
            if missing is not None:
                caveats.append(
                    f"{model.name}'s {missing.name} would hold {fraction_text(share)} but "
                    "CASTSLICE_MIG_PROFILES leaves it out"
                )
            if profile is not None:
                chosen.append(Instance(model, profile))
        if not chosen:
            caveats.append(
                f"no MIG instance the settings offer holds {fraction_text(share)} of a GPU "
                f"({self._rule()}); the Pod gets a whole GPU"
            )
        return chosen, 1, tuple(caveats)

    def _place(self, slices: int) -> Placement:
        chosen, gpus, caveats = self._choice(slices)
        if not chosen:
            whole = self._whole(gpus)
            return whole._replace(caveats=tuple(f"mig: {c}" for c in caveats))
        share = min(Fraction(slices, self.config.slices_per_gpu), Fraction(1))
        return self._instances(chosen, share, caveats)

    def _rule(self) -> str:
        return "memory-first" if self.config.mig_fit == "memory" else "memory and compute"

    def _instances(
        self, chosen: list[Instance], share: Fraction, caveats: tuple[str, ...]
    ) -> Placement:
        placement, used, dropped = self.stack.asked(chosen, share, self._time_shared_clients)
        caveats += dropped
        instance = _instances_text(used)
        if self.stack.claims:
            fallbacks = self._ranks(used, share)[1:]
            if fallbacks:
                names = ", ".join(
                    "/".join(dict.fromkeys(i.profile.name for i in rank)) for rank in fallbacks
                )
                instance += f"; if none is free, the first free of {names}"
        clients = label_count(placement.node_selector.get(GKE_CLIENTS))
        if clients is not None:
            instance += f", time-shared by up to {clients} clients without isolation"
        gets = min(i.model.memory(i.profile) for i in used)
        return placement._replace(
            gpus=gets if share < 1 else Fraction(1),
            instance=instance,
            caveats=tuple(f"mig: {c}" for c in caveats),
        )

    def _time_shared_clients(self, used: list[Instance], share: Fraction) -> int | None:
        """The clients per partition of the time-shared pool a Pod of `share` goes to, or None:
        it gets a partition of its own (no time-shared pools, or a client's part of the
        smallest partition would not hold its share)."""
        clients = self.config.mig_time_shared_clients
        if clients is None or not all(
            choice.time_shares(self.config, i, share, clients) for i in used
        ):
            return None
        return clients

    def instance_intro(self, placement: Placement) -> str:
        if GKE_CLIENTS in placement.node_selector:
            return "the Pod shares"
        return "the Pod gets a MIG instance,"

    def _whole(self, gpus: int) -> Placement:
        # A MIG instance must never be taken for a whole GPU: under the single strategy a
        # MIG node advertises its instances as the GPU resource, on GKE a partition node.
        gpu = self.config.gpu_resource
        return Placement(gpu, gpus, {}, Fraction(gpus), self.stack.whole_absent)

    def pod_operations(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        if placement.claim_template is None:
            return super().pod_operations(spec, containers, placement)
        gpu = self.config.gpu_resource
        return claim_operations(spec, containers, gpu, placement.claim_template)

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        if self.stack.claims:
            return claims_left_alone(spec)
        return super().left_alone(spec)

    def _ranks(self, chosen: list[Instance], share: Fraction) -> list[list[Instance]]:
        """The instances a claim may get, rank by rank: `chosen` first, then each model's next
        larger instance that holds the share, and so on (at most the subrequests a claim may
        list). A whole GPU's `7g` instance has no larger one."""
        if share >= 1:
            return [chosen]
        larger = [
            [Instance(i.model, p) for p in choice.holding(self.config, i.model, share)[1:]]
            for i in chosen
        ]
        ranks = [chosen]
        for k in range(max(len(more) for more in larger)):
            ranks.append([more[k] for more in larger if k < len(more)])
        return ranks[: devices.MAX_SUBREQUESTS]


def _instances_text(used: list[Instance]) -> str:
    """What the Pod gets: the instance once where every model's is the same, else each
    model's (A100-80GB's and H100-80GB's 1g.10gb differ in MiB and SMs)."""
    if all(i.text() == used[0].text() for i in used):
        return used[0].text()
    return "; ".join(f"{i.model.name} {i.text()}" for i in used)
