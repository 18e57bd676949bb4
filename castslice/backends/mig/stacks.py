"""How a Pod asks for a MIG instance on each stack (CASTSLICE_MIG_STACK): one class per stack,
chosen once from the settings (`stack_for`) and asked, as GPU Feature Discovery chooses one
labeler per MIG strategy once and asks it (NVIDIA/k8s-device-plugin v0.20.0,
internal/lm/mig-strategy.go: newMigLabeler -> newMigStrategySingleLabeler /
newMigStrategyMixedLabeler).

- `mixed`: the NVIDIA device plugin's mixed strategy advertises `nvidia.com/mig-<profile>`
  per profile (and no `nvidia.com/gpu` for a MIG-enabled GPU);
- `single`: every MIG device is one `nvidia.com/gpu`, and GPU Feature Discovery labels the
  node `nvidia.com/gpu.product=<product>-MIG-<profile>`;
- `gke`: GKE's GPU partitions are `nvidia.com/gpu` on nodes labelled
  `cloud.google.com/gke-gpu-partition-size=<profile>`; a pool time-shared on top also
  carries `cloud.google.com/gke-gpu-sharing-strategy=time-sharing` and
  `cloud.google.com/gke-max-shared-clients-per-gpu=<n>` (CASTSLICE_MIG_TIME_SHARED_CLIENTS);
- `dra`: the NVIDIA DRA driver publishes each MIG device with its `profile` attribute
  (devices.py), and a Pod claims one through a template CastSlice ships.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import ClassVar, NamedTuple

from castslice.backends.mig import choice, devices
from castslice.backends.mig.choice import Instance
from castslice.backends.mig.profiles import GpuModel, fraction_text
from castslice.backends.placer import Placement
from castslice.settings.config import Config, MigStack

# NVIDIA GPU Feature Discovery v0.20.0 (internal/lm/resource.go, mig-strategy.go).
PRODUCT = "nvidia.com/gpu.product"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Labelled on a single-strategy MIG node's `nvidia.com/gpu` alone (the MIG device's
# attributes), never on a whole GPU's: whole-GPU Pods keep off nodes that carry it.
SINGLE_MIG_ATTRIBUTE = "nvidia.com/gpu.slices.gi"
# GKE's node labels.
PARTITION = "cloud.google.com/gke-gpu-partition-size"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
# GKE's value of GKE_SHARING on a time-shared pool: the only strategy on top of partitions
# CastSlice places on.
GKE_TIME_SHARING = "time-sharing"

# The clients per partition of the time-shared pool a Pod of a share goes to, or None
# (MigPlacer._time_shared_clients).
TimeShared = Callable[[list[Instance], Fraction], "int | None"]


class Asked(NamedTuple):
    """What a Pod asks for on the stack, and the instances that request reaches."""

    placement: Placement
    used: list[Instance]
    caveats: tuple[str, ...] = ()


class Stack:
    """A stack's answers: how a Pod asks for the instances chosen for it, and for whole GPUs."""

    name: ClassVar[MigStack]
    # Pods claim devices through ResourceClaimTemplates rather than asking for a resource.
    claims: ClassVar[bool] = False
    # Every GPU of a node offers one profile: no node is cut all-balanced.
    one_profile: ClassVar[bool] = False
    # Node labels a whole-GPU Pod's node must not carry: those of nodes whose GPU resource
    # is a MIG instance.
    whole_absent: ClassVar[tuple[str, ...]] = ()
    # How the nodes offer MIG devices, in the words of a setup hint.
    offered_by: ClassVar[str] = ""

    def __init__(self, config: Config) -> None:
        self.config = config

    def asked(self, chosen: list[Instance], share: Fraction, time_shared: TimeShared) -> Asked:
        raise NotImplementedError

    def claim_template(self, slices: int) -> str | None:
        """The template a Pod of `slices` claims from, or None: it claims none."""
        return None

    def setup_hint(self, layouts: str) -> str:
        """How to make nodes offer the instances Pods ask for (`layouts`: the mig-manager's)."""
        return (
            f"label the MIG nodes nvidia.com/mig.config=all-balanced (or one of {layouts}) "
            f"for the GPU Operator's mig-manager, with {self.offered_by}; or set "
            "CASTSLICE_MIG_PROFILES and CASTSLICE_MIG_GPU_MODELS to what the nodes offer"
        )

    def node_pools(self, model: str, pools: Sequence[tuple[int, str]]) -> str | None:
        """What to create for GPUs cut as `pools` ((GPUs, profile) each) where the platform
        makes node pools of one partition size; None where nodes are labelled instead."""
        return None

    def _one_name(
        self, chosen: list[Instance], share: Fraction
    ) -> tuple[Instance, list[Instance], tuple[str, ...]]:
        """Where a Pod names one resource or one partition label: the first model's instance,
        on the models where that name gives the same shares; the others are not used."""
        first = chosen[0]
        used = [i for i in chosen if choice.same_meaning(i, first)]
        caveats = tuple(
            f"the {self.name} stack names one instance per Pod, so {i.model.name} nodes "
            f"(where {fraction_text(share)} takes {i.profile.name}) are not used"
            for i in chosen
            if i not in used
        )
        return first, used, caveats

    def _models(self) -> tuple[GpuModel, ...]:
        return choice.models(self.config)


class Mixed(Stack):
    name = "mixed"
    offered_by = "the device plugin with mig.strategy=mixed"

    def asked(self, chosen: list[Instance], share: Fraction, time_shared: TimeShared) -> Asked:
        first, used, caveats = self._one_name(chosen, share)
        labels_in: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if choice.ambiguous(first, self._models()):
            labels_in = ((PRODUCT, tuple(p for i in used for p in i.model.products)),)
        resource = MIG_RESOURCE_PREFIX + first.profile.name
        return Asked(Placement(resource, 1, {}, share, labels_in=labels_in), used, caveats)


class Single(Stack):
    name = "single"
    one_profile = True
    whole_absent = (SINGLE_MIG_ATTRIBUTE,)
    offered_by = "the device plugin with mig.strategy=single"

    def asked(self, chosen: list[Instance], share: Fraction, time_shared: TimeShared) -> Asked:
        products = tuple(
            f"{product}-MIG-{i.profile.name}" for i in chosen for product in i.model.products
        )
        gpu = self.config.gpu_resource
        return Asked(Placement(gpu, 1, {}, share, labels_in=((PRODUCT, products),)), chosen)


class Gke(Stack):
    name = "gke"
    one_profile = True
    whole_absent = (GKE_SHARING, PARTITION)

    def asked(self, chosen: list[Instance], share: Fraction, time_shared: TimeShared) -> Asked:
        first, used, caveats = self._one_name(chosen, share)
        labels_in: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if choice.ambiguous(first, self._models()):
            accelerators = tuple(i.model.gke_accelerator for i in used if i.model.gke_accelerator)
            labels_in = ((GKE_ACCELERATOR, accelerators),)
        clients = time_shared(used, share)
        selector = {PARTITION: first.profile.name}
        # A partition of its own never comes from a time-shared pool.
        absent: tuple[str, ...] = (GKE_SHARING,)
        if clients is not None:
            selector |= {GKE_SHARING: GKE_TIME_SHARING, GKE_CLIENTS: str(clients)}
            absent = ()
        gpu = self.config.gpu_resource
        placement = Placement(gpu, 1, selector, share, absent, labels_in=labels_in)
        return Asked(placement, used, caveats)

    def setup_hint(self, layouts: str) -> str:
        clients = self.config.mig_time_shared_clients
        shared = (
            ""
            if clients is None
            else " (and for the smallest, one more with gpu-sharing-strategy=time-sharing,"
            f"max-shared-clients-per-gpu={clients})"
        )
        return (
            "create GKE node pools with --accelerator=type=TYPE,count=N,"
            f"gpu-partition-size=PROFILE for the profiles Pods ask for{shared}, or set "
            "CASTSLICE_MIG_PROFILES to the partition sizes your pools have"
        )

    def node_pools(self, model: str, pools: Sequence[tuple[int, str]]) -> str | None:
        listed = "; ".join(
            f"{gpus} {'GPU' if gpus == 1 else 'GPUs'} with gpu-partition-size={profile}"
            for gpus, profile in pools
        )
        return f"create GKE node pools of {model} GPUs: {listed}"


class Dra(Stack):
    name = "dra"
    claims = True
    offered_by = "the NVIDIA DRA driver's MIG devices"

    def asked(self, chosen: list[Instance], share: Fraction, time_shared: TimeShared) -> Asked:
        # A claim's CEL names each model's instance, as single's product labels do.
        return Asked(Placement(self.config.gpu_resource, 1, {}, share), chosen)

    def claim_template(self, slices: int) -> str | None:
        return devices.template_name(self.config, slices)


STACKS: dict[MigStack, type[Stack]] = {stack.name: stack for stack in (Mixed, Single, Gke, Dra)}


def stack_for(config: Config) -> Stack:
    return STACKS[config.mig_stack](config)
