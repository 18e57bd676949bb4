"""The `dra` stack: a claim on a MIG device the NVIDIA DRA driver publishes.

The driver publishes each MIG device with `type: mig`, its `profile` and its parent's
`productName` as attributes, and ships the DeviceClass `mig.nvidia.com` selecting
`type == 'mig'` (NVIDIA/k8s-dra-driver-gpu v25.12.0,
deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-mig.yaml and
cmd/gpu-kubelet-plugin/deviceinfo.go; copies in tests/upstream/). A claim selects the
instance CastSlice chose by CEL on those attributes; whole GPUs are claimed from the
driver's `gpu.nvidia.com` class. The templates are shipped (`castslice claim-templates`),
one per slice count, as for the `dra` backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from castslice.backends.mig.choice import Instance
from castslice.backends.templates import (
    TemplateCounts,
    configured_counts,
    enrolled_namespaces,
    resource_claim_template,
    template_slices,
)
from castslice.contract import Manifest
from castslice.settings.config import Config

API_VERSION = "resource.k8s.io/v1"
MIG_CLASS = "mig.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
DRIVER = "gpu.nvidia.com"
_ATTRIBUTES = f"device.attributes['{DRIVER}']"
TEMPLATE_PREFIX = "castslice-mig-"


def template_name(config: Config, slices: int) -> str:
    return f"{TEMPLATE_PREFIX}{template_slices(config, slices)}-of-{config.slices_per_gpu}"


def selector(instances: Sequence[Instance], with_product: bool) -> str:
    """CEL that holds for a MIG device of one of `instances` (and of its model, when a
    profile name alone does not say which)."""
    clauses = []
    for instance in instances:
        clause = f"{_ATTRIBUTES}.profile == '{instance.profile.name}'"
        if with_product:
            names = ", ".join(f"'{name}'" for name in instance.model.nvml_names)
            clause = f"({clause} && {_ATTRIBUTES}.productName in [{names}])"
        clauses.append(clause)
    # Models that share a profile name and its shares need it once.
    return " || ".join(dict.fromkeys(clauses))


def request(ranks: Sequence[Sequence[Instance]] | None, gpus: int, with_product: bool) -> Manifest:
    """The claim's one request (its name and kind left to the template): a MIG device of the
    first rank of `ranks` (each model's instance), or `gpus` whole GPUs.

    With more ranks (the larger instances that also hold the share, smallest first), the
    request is `firstAvailable` (DRAPrioritizedList, GA in Kubernetes 1.36): one subrequest
    per rank, which the allocator tries in order, so a Pod gets the next larger instance
    when every smaller one is taken.
    """
    if ranks is None:
        return {
            "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": gpus}
        }
    alternatives = [_one_device(rank, with_product) for rank in ranks]
    if len(alternatives) == 1:
        return {"exactly": alternatives[0]}
    named: list[Manifest] = []
    for rank, alternative in zip(ranks, alternatives, strict=True):
        name = subrequest_name(rank)
        taken = {item["name"] for item in named}
        if name in taken:
            name = f"{name}-{len(named)}"
        named.append({"name": name, **alternative})
    return {"firstAvailable": named[:MAX_SUBREQUESTS]}


# resource.k8s.io/v1: at most this many subrequests in `firstAvailable`
# (FirstAvailableDeviceRequestMaxSize).
MAX_SUBREQUESTS = 8


def subrequest_name(rank: Sequence[Instance]) -> str:
    """A DNS label naming a rank by its first instance's profile (`1g.10gb` -> `1g-10gb`);
    the allocation's `request` reads `gpu/1g-10gb`."""
    return rank[0].profile.name.replace(".", "-")


def _one_device(instances: Sequence[Instance], with_product: bool) -> Manifest:
    return {
        "deviceClassName": MIG_CLASS,
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": selector(instances, with_product)}}],
    }


class MigClaimTemplates:
    """`castslice claim-templates` for the `dra` stack: one template per slice count a Pod
    can get from the presets, the default, the policy and every share of one GPU."""

    def __init__(self, config: Config, request: Callable[[int], Manifest]) -> None:
        self.config = config
        # Slice count -> the request its template makes (the backend's choice).
        self.request = request

    def default_counts(self) -> TemplateCounts:
        config = self.config
        shares = {template_slices(config, count) for count in range(1, config.slices_per_gpu + 1)}
        chosen = tuple(sorted(configured_counts(config) | shares))
        note = (
            "rendered the templates of the presets, the default, the policy and every share "
            "of one GPU; a Pod whose slice-ratio asks for more whole GPUs needs --slices"
        )
        return TemplateCounts(chosen, note if config.max_slice_ratio > chosen[-1] else None)

    def chosen_counts(self, asked: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({template_slices(self.config, count) for count in asked}))

    def manifests(self, namespaces: Sequence[str | None], counts: Sequence[int]) -> list[Manifest]:
        return [
            resource_claim_template(template_name(self.config, count), self.spec(count), namespace)
            for namespace in namespaces
            for count in counts
        ]

    def spec(self, slices: int) -> Manifest:
        """The template's `spec`: one request, the backend's choice for `slices`."""
        request = {"name": "gpu", **self.request(slices)}
        return {"spec": {"devices": {"requests": [request]}}}

    def enrolled_namespaces(self) -> tuple[str, ...]:
        return enrolled_namespaces(self.config)
