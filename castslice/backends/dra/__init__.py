"""Dynamic Resource Allocation with consumable capacity (`resource.k8s.io/v1`).

Kubernetes 1.37+ (1.36 with the DRADeviceTaintRules gate): the DeviceTaintRule each
installation needs is GA there.

A DRA driver publishes each GPU as one device that several claims may share
(`allowMultipleAllocations`) with a capacity counting shares: the NVIDIA DRA
driver's `--consumable-shares=S` gives `shares: S`. Each GPU container loses the
GPU resource and claims, through a ResourceClaimTemplate CastSlice ships (the
webhook creates nothing), `s` of those shares of one device, or whole devices.
The scheduler's own bookkeeping then packs the claims onto devices.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction

from castslice.backends.dra.claim_templates import claim_shape, default_counts, template_name
from castslice.backends.placer import (
    LeftAlone,
    Placement,
    Placer,
    claim_operations,
    claims_left_alone,
    node_expressions,
)
from castslice.contract.kube import PodSpec
from castslice.contract.patch import (
    GpuContainer,
    PatchOperation,
    required_expressions_operations,
)


class DraPlacer(Placer):
    """Claims of `s` shares of one device, or of whole devices; no node labels."""

    name = "dra"
    policy_mode_refusal = (
        "the dra backend adds resource claims to Pods, and policy mode does not render "
        "them yet; use the webhook (castslice webhook) with CASTSLICE_BACKEND=dra"
    )
    # The shipped DeviceTaintRule keeps every claim off the shared devices but those of
    # CastSlice's templates, which only Pods CastSlice rewrote (and sent to that
    # scheduler) hold: no other scheduler allocates them.
    scheduler_name_refusal = None

    def place(self, slices: int) -> Placement:
        shape = claim_shape(self.config, slices)
        per_gpu = self.config.slices_per_gpu
        share = Fraction(shape.devices) if slices >= per_gpu else Fraction(slices, per_gpu)
        # The resource and count say what the claim replaces: the GPUs, as devices.
        placement = Placement(
            self.config.gpu_resource,
            shape.devices,
            {},
            share,
            claim_template=template_name(self.config, slices),
        )
        # The claim's consumed capacity, s of S shares of one device, is its share.
        return self.with_memory(placement, share) if slices < per_gpu else placement

    def left_alone(self, spec: PodSpec) -> LeftAlone | None:
        return claims_left_alone(spec)

    def pod_operations(
        self, spec: PodSpec, containers: Sequence[GpuContainer], placement: Placement
    ) -> list[PatchOperation]:
        assert placement.claim_template is not None
        operations = claim_operations(
            spec, containers, self.config.gpu_resource, placement.claim_template
        )
        return operations + required_expressions_operations(spec, node_expressions(placement))

    @functools.cached_property
    def _rendered_templates(self) -> frozenset[str]:
        """The templates `castslice claim-templates` and the chart make for these settings."""
        return frozenset(
            template_name(self.config, count) for count in default_counts(self.config).counts
        )

    def notes(self, placement: Placement) -> tuple[str, ...]:
        notes = []
        if placement.claim_template not in self._rendered_templates:
            notes.append(
                f"dra: {placement.claim_template} is not among the claim templates made for "
                "these settings (every share of a GPU and the counts of the presets, the "
                "default and the policy), so the Pod stays Pending unless its namespace has "
                "it: apply it with castslice claim-templates --slices, or lower "
                "castops.io/slice-ratio"
            )
        if placement.gpus < 1:
            share = f"{placement.gpus.numerator}/{placement.gpus.denominator}"
            # With GPU memory limits the driver keeps its memory; its compute stays shared.
            isolation = "compute" if placement.memory_share is not None else "memory"
            notes.append(
                f"dra: the {share} GPU share is scheduler bookkeeping; sharing processes get "
                f"no {isolation} isolation from time-slicing"
            )
        return tuple(notes)
