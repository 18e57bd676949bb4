"""NVIDIA MIG: a share of a GPU becomes the smallest MIG instance that holds it.

A MIG instance is hardware-isolated (its own memory, cache and compute slices), so one
Pod's memory hog or fault never reaches its neighbours; the price is that instances come
in NVIDIA's fixed sizes (profiles.py), so a Pod gets the instance that holds its share,
whose real compute and memory the decision record and the warnings state.

How a Pod asks for an instance depends on the cluster's stack (CASTSLICE_MIG_STACK):

- `mixed`: the NVIDIA device plugin's mixed strategy advertises `nvidia.com/mig-<profile>`
  per profile (and no `nvidia.com/gpu` for a MIG-enabled GPU);
- `single`: every MIG device is one `nvidia.com/gpu`, and GPU Feature Discovery labels the
  node `nvidia.com/gpu.product=<product>-MIG-<profile>`;
- `gke`: GKE's GPU partitions are `nvidia.com/gpu` on nodes labelled
  `cloud.google.com/gke-gpu-partition-size=<profile>`; a pool time-shared on top also
  carries `cloud.google.com/gke-gpu-sharing-strategy=time-sharing` and
  `cloud.google.com/gke-max-shared-clients-per-gpu=<n>` (CASTSLICE_MIG_TIME_SHARED_CLIENTS);
- `dra`: the NVIDIA DRA driver publishes each MIG device with its `profile` attribute
  (devices.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from castslice.backends.base import (
    Backend,
    ClaimTemplates,
    GpuView,
    LeftAlone,
    Manifest,
    NodeCheck,
    NodeGpuView,
    Placement,
    claim_operations,
    claims_left_alone,
    label_count,
    whole_gpus,
)
from castslice.backends.mig import choice, devices, devices_check, layouts
from castslice.backends.mig.choice import Instance
from castslice.backends.mig.gpu_view import MigGpuView
from castslice.backends.mig.profiles import MODELS, PROFILE_NAMES, fraction_text
from castslice.contract.cluster import Cluster
from castslice.contract.kube import PodSpec
from castslice.contract.patch import GpuContainer, PatchOperation
from castslice.settings.config import Config

# NVIDIA GPU Feature Discovery v0.20.0 (internal/lm/resource.go, mig-strategy.go).
PRODUCT = "nvidia.com/gpu.product"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Labelled on a single-strategy MIG node's `nvidia.com/gpu` alone (the MIG device's
# attributes), never on a whole GPU's: whole-GPU Pods keep off nodes that carry it.
SINGLE_MIG_ATTRIBUTE = "nvidia.com/gpu.slices.gi"
# The GPU Operator's mig-manager: the layout asked for, and how applying it went.
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
# GKE's node labels.
PARTITION = "cloud.google.com/gke-gpu-partition-size"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's value of GKE_SHARING on a time-shared pool: the only strategy on top of partitions
# CastSlice places on.
GKE_TIME_SHARING = "time-sharing"

# The choices of settings that name the profile table's entries.
SETTING_CHOICES: Mapping[str, tuple[str, ...]] = {
    "CASTSLICE_MIG_GPU_MODELS": tuple(MODELS),
    "CASTSLICE_MIG_PROFILES": PROFILE_NAMES,
}


class MigBackend(Backend):
    name = "mig"
    placement_keys = (PRODUCT, PARTITION, GKE_SHARING, GKE_CLIENTS)
    policy_mode_refusal = (
        "the mig backend chooses a MIG profile per GPU model, which policy mode does not "
        "render yet; use the webhook (castslice webhook) with CASTSLICE_BACKEND=mig"
    )
    whole_gpu_nodes_fix = (
        "keep GPU nodes with MIG disabled (nvidia.com/mig.config=all-disabled; on GKE a "
        "node pool without gpu-partition-size), or set CASTSLICE_MIG_WHOLE_GPU=7g"
    )

    def place(self, slices: int) -> Placement:
        placement = self._place(slices)
        if self.config.mig_stack == "dra":
            template = devices.template_name(self.config, slices)
            return placement._replace(claim_template=template)
        return placement

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
        stack = self.config.mig_stack
        models = choice.models(self.config)
        gpu = self.config.gpu_resource
        if stack == "dra":
            # A claim's CEL names each model's instance, as single's product labels do.
            used = chosen
            placement = Placement(gpu, 1, {}, share)
        elif stack == "single":
            products = tuple(
                f"{product}-MIG-{i.profile.name}" for i in chosen for product in i.model.products
            )
            used = chosen
            placement = Placement(gpu, 1, {}, share, labels_in=((PRODUCT, products),))
        else:
            # One resource or one partition label: the first model's instance, on the
            # models where that name gives the same shares.
            first = chosen[0]
            used = [i for i in chosen if choice.same_meaning(i, first)]
            labels_in: tuple[tuple[str, tuple[str, ...]], ...] = ()
            if stack == "gke":
                if choice.ambiguous(first, models):
                    accelerators = tuple(
                        i.model.gke_accelerator for i in used if i.model.gke_accelerator
                    )
                    labels_in = ((GKE_ACCELERATOR, accelerators),)
                clients = self._time_shared_clients(used, share)
                selector = {PARTITION: first.profile.name}
                # A partition of its own never comes from a time-shared pool.
                absent: tuple[str, ...] = (GKE_SHARING,)
                if clients is not None:
                    selector |= {GKE_SHARING: GKE_TIME_SHARING, GKE_CLIENTS: str(clients)}
                    absent = ()
                placement = Placement(gpu, 1, selector, share, absent, labels_in=labels_in)
            else:
                if choice.ambiguous(first, models):
                    labels_in = ((PRODUCT, tuple(p for i in used for p in i.model.products)),)
                resource = MIG_RESOURCE_PREFIX + first.profile.name
                placement = Placement(resource, 1, {}, share, labels_in=labels_in)
            dropped = [i for i in chosen if i not in used]
            caveats += tuple(
                f"the {stack} stack names one instance per Pod, so {i.model.name} nodes "
                f"(where {fraction_text(share)} takes {i.profile.name}) are not used"
                for i in dropped
            )
        instance = _instances_text(used)
        if stack == "dra":
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
        it gets a partition of its own (no time-shared pools, or it is not smaller than the
        smallest partition)."""
        clients = self.config.mig_time_shared_clients
        if clients is None or not all(choice.below_smallest(self.config, i, share) for i in used):
            return None
        return clients

    def instance_intro(self, placement: Placement) -> str:
        if GKE_CLIENTS in placement.node_selector:
            return "the Pod shares"
        return "the Pod gets a MIG instance,"

    def _whole(self, gpus: int) -> Placement:
        gpu = self.config.gpu_resource
        stack = self.config.mig_stack
        # A MIG instance must never be taken for a whole GPU: under the single strategy a
        # MIG node advertises its instances as the GPU resource, on GKE a partition node.
        absent = {"single": (SINGLE_MIG_ATTRIBUTE,), "gke": (GKE_SHARING, PARTITION)}
        return Placement(gpu, gpus, {}, Fraction(gpus), absent.get(stack, ()))

    def gpu_layouts(self) -> Sequence[layouts.MigLayout]:
        return layouts.layouts(self.config, _chosen_instance)

    def pod_operations(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        if placement.claim_template is None:
            return super().pod_operations(spec, containers, placement)
        gpu = self.config.gpu_resource
        return claim_operations(spec, containers, gpu, placement.claim_template)

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        if self.config.mig_stack != "dra":
            return super().left_alone(spec)
        return claims_left_alone(spec)

    def claim_templates(self) -> ClaimTemplates | None:
        if self.config.mig_stack != "dra":
            return None
        return devices.MigClaimTemplates(self.config, self._claim_request)

    def _claim_request(self, slices: int) -> Manifest:
        """What the template for `slices` asks for: the chosen MIG instances, then the larger
        ones that hold the share too, or whole GPUs."""
        chosen, gpus, _ = self._choice(slices)
        if not chosen:
            return devices.request(None, gpus, False)
        share = min(Fraction(slices, self.config.slices_per_gpu), Fraction(1))
        ranks = self._ranks(chosen, share)
        used = [i for rank in ranks for i in rank]
        return devices.request(ranks, 1, _needs_product(used, choice.models(self.config)))

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

    def node_checks(self) -> Sequence[NodeCheck] | None:
        # Device-plugin stacks: the common checks of node resources and labels suffice.
        if self.config.mig_stack != "dra":
            return None
        run = devices_check.check(self.needed_instances, self.setup_hint())
        return (NodeCheck(devices_check.CHECK, devices_check.RIGHTS, run),)

    def needed_instances(self) -> list[tuple[list[Instance], list[int]]]:
        """The instances Pods of each slice count get, with the counts that get them."""
        found: dict[tuple[Instance, ...], list[int]] = {}
        for slices in range(1, self.config.slices_per_gpu + 1):
            chosen, _, _ = self._choice(slices)
            if chosen:
                # A claim takes any instance it lists (firstAvailable): one of them will do.
                share = min(Fraction(slices, self.config.slices_per_gpu), Fraction(1))
                listed = [i for rank in self._ranks(chosen, share) for i in rank]
                found.setdefault(tuple(listed), []).append(slices)
        return [(list(instances), counts) for instances, counts in found.items()]

    def setup_hint(self) -> str:
        config = self.config
        emitted = sorted({p.name for m in choice.models(config) for p in choice.offered(config, m)})
        layouts = ", ".join(f"all-{name}" for name in emitted)
        if config.mig_stack == "gke":
            shared = (
                ""
                if config.mig_time_shared_clients is None
                else " (and for the smallest, one more with gpu-sharing-strategy=time-sharing,"
                f"max-shared-clients-per-gpu={config.mig_time_shared_clients})"
            )
            return (
                "create GKE node pools with --accelerator=type=TYPE,count=N,"
                f"gpu-partition-size=PROFILE for the profiles Pods ask for{shared}, or set "
                "CASTSLICE_MIG_PROFILES to the partition sizes your pools have"
            )
        strategy = (
            "the NVIDIA DRA driver's MIG devices"
            if config.mig_stack == "dra"
            else f"the device plugin with mig.strategy={config.mig_stack}"
        )
        return (
            f"label the MIG nodes nvidia.com/mig.config=all-balanced (or one of {layouts}) "
            f"for the GPU Operator's mig-manager, with {strategy}; or set "
            "CASTSLICE_MIG_PROFILES and CASTSLICE_MIG_GPU_MODELS to what the nodes offer"
        )

    def node_problems(self, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
        problems = []
        for node in nodes:
            metadata = node.get("metadata") or {}
            labels = metadata.get("labels") or {}
            state = labels.get(MIG_CONFIG_STATE)
            if state in ("pending", "failed"):
                problems.append(
                    f"node {metadata.get('name')}: {MIG_CONFIG_STATE}={state} "
                    f"({MIG_CONFIG}={labels.get(MIG_CONFIG, '(none)')}): its MIG layout is "
                    "not applied; see the nvidia-mig-manager Pod's log on it"
                )
            if str(labels.get(PRODUCT, "")).endswith("-MIG-INVALID"):
                problems.append(
                    f"node {metadata.get('name')}: {PRODUCT}={labels[PRODUCT]}: the single "
                    "strategy needs one profile on every GPU of a node"
                )
        return problems

    def describe(self) -> str:
        config = self.config
        return (
            f"backend {self.name}, stack {config.mig_stack}, GPU models "
            f"{', '.join(config.mig_gpu_models)}, instances holding a share by "
            f"{self._rule()}"
        )

    def gpu_units(self, resource: str, labels: Mapping[str, str]) -> int | None:
        """One instance is 1/per_gpu of a GPU, per_gpu as NVIDIA's table gives it."""
        instance = self._instance_of(resource, labels)
        if instance is not None:
            return instance.profile.per_gpu
        if resource == self.config.gpu_resource:
            return 1
        return None

    def _instance_of(self, resource: str, labels: Mapping[str, str]) -> Instance | None:
        """The MIG instance a unit of `resource` is on a node with `labels`, if it is one."""
        name = None
        if resource.startswith(MIG_RESOURCE_PREFIX):
            name = resource.removeprefix(MIG_RESOURCE_PREFIX)
        elif resource == self.config.gpu_resource:
            product = str(labels.get(PRODUCT, ""))
            name = labels.get(PARTITION) or (
                product.rsplit("-MIG-", 1)[1] if "-MIG-" in product else None
            )
        if name is None:
            return None
        for model in self._models_of(labels):
            profile = model.profile(name)
            if profile is not None:
                return Instance(model, profile)
        return None

    def gpu_view(self, cluster: Cluster, nodes: Sequence[Manifest]) -> GpuView:
        if self.config.mig_stack == "dra":
            return super().gpu_view(cluster, nodes)
        return MigGpuView(NodeGpuView(self, nodes), nodes, self._instance_of)

    def _models_of(self, labels: Mapping[str, str]) -> list[Any]:
        product = str(labels.get(PRODUCT, "")).split("-MIG-", 1)[0]
        mine = [m for m in MODELS.values() if product in m.products]
        return mine or list(choice.models(self.config))

    def quota_resource(self) -> str | None:
        # The resource differs per profile (mixed) or stays the GPU's (single, gke).
        return None


def _chosen_instance(config: Config, slices: int) -> str | None:
    """The profile a Pod of `slices` gets on the first model the settings name, or None."""
    chosen, _, _ = MigBackend(config)._choice(slices)
    first = choice.models(config)[0]
    return next((i.profile.name for i in chosen if i.model == first), None)


def _needs_product(chosen: list[Instance], models: tuple[Any, ...]) -> bool:
    """Whether a profile name alone may select another model's instance of other shares."""
    return any(choice.ambiguous(instance, models) for instance in chosen)


def _instances_text(used: list[Instance]) -> str:
    """What the Pod gets: the instance once where every model's is the same, else each
    model's (A100-80GB and H100-80GB share their profiles)."""
    if all(choice.same_meaning(i, used[0]) for i in used):
        return used[0].text()
    return "; ".join(f"{i.model.name} {i.text()}" for i in used)
