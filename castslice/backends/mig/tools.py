"""What the tools ask of the mig backend (castslice/backends/roles.py): its doctor checks and
hints, its layouts for `castslice plan`, its claim templates on the `dra` stack, and the
instances a report counts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from castslice.backends.answers import NodeGpuView, Tools
from castslice.backends.mig import (
    MigPlacer,
    choice,
    devices,
    devices_check,
    layouts,
    product_names,
)
from castslice.backends.mig.choice import Instance
from castslice.backends.mig.gpu_view import MigGpuView
from castslice.backends.mig.profiles import MODELS
from castslice.backends.mig.stacks import MIG_RESOURCE_PREFIX, PARTITION, PRODUCT
from castslice.backends.roles import ClaimTemplates, GpuView, NodeCheck
from castslice.contract import Manifest
from castslice.contract.cluster import Cluster
from castslice.settings.config import Config

# The GPU Operator's mig-manager: the layout asked for, and how applying it went.
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"


class MigTools(MigPlacer, Tools):
    whole_gpu_nodes_fix = (
        "keep GPU nodes with MIG disabled (nvidia.com/mig.config=all-disabled; on GKE a "
        "node pool without gpu-partition-size), or set CASTSLICE_MIG_WHOLE_GPU=7g"
    )

    def gpu_layouts(self) -> Sequence[layouts.MigLayout]:
        return layouts.layouts(self.config, _chosen_instance)

    def claim_templates(self) -> ClaimTemplates | None:
        if not self.stack.claims:
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

    def node_checks(self) -> Sequence[NodeCheck] | None:
        # Device-plugin stacks: the common checks of node resources and labels suffice.
        if not self.stack.claims:
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
        return self.stack.setup_hint(", ".join(f"all-{name}" for name in emitted))

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
                continue
            product, profiles = _mig_product(labels)
            unknown = product_names.unrecognised(self.config, product, profiles, exact=False)
            if unknown is not None:
                problems.append(f"node {metadata.get('name')}: {unknown}")
        return problems

    def describe(self) -> str:
        config = self.config
        return (
            f"backend {self.name}, stack {self.stack.name}, GPU models "
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
        if self.stack.claims:
            return super().gpu_view(cluster, nodes)
        return MigGpuView(NodeGpuView(self, nodes), nodes, self._instance_of)

    def _models_of(self, labels: Mapping[str, str]) -> list[Any]:
        product = str(labels.get(PRODUCT, "")).split("-MIG-", 1)[0]
        known = choice.models(self.config) + tuple(MODELS.values())
        mine = [m for m in known if product in m.products]
        return mine or list(choice.models(self.config))

    def quota_resource(self) -> str | None:
        # The resource differs per profile (mixed) or stays the GPU's (single, gke).
        return None


def _mig_product(labels: Mapping[str, str]) -> tuple[str, list[str]]:
    """The product GPU Feature Discovery labels a MIG node's GPUs with, and the profiles of
    their MIG devices (`<product>-MIG-<profile>` under single, `nvidia.com/mig-<profile>.*`
    labels under mixed); ("", []) for a node without MIG devices."""
    product = str(labels.get(PRODUCT, ""))
    if "-MIG-" in product:
        base, profile = product.rsplit("-MIG-", 1)
        return base, [profile]
    profiles = [
        key.removeprefix(MIG_RESOURCE_PREFIX).removesuffix(".count")
        for key in labels
        if key.startswith(MIG_RESOURCE_PREFIX) and key.endswith(".count")
    ]
    return (product, profiles) if profiles else ("", [])


# Each model's profile names, for what other languages state of them (the chart, Terraform).
MODEL_PROFILES: Mapping[str, tuple[str, ...]] = {
    name: tuple(p.name for p in model.profiles) for name, model in MODELS.items()
}


def foreign_profiles_chart_check(value: str, models_value: str) -> list[str]:
    """mig.foreign_profiles as a Go template over the chart's values `value` (the profiles)
    and `models_value` (the models), with the profile table in it."""
    table = " ".join(
        f"{json.dumps(name)} (list {' '.join(json.dumps(p) for p in profiles)})"
        for name, profiles in MODEL_PROFILES.items()
    )
    ref = f"$.Values.{value}"
    models = f"$.Values.{models_value}"
    return [
        f"{{{{- $migProfiles := dict {table} }}}}",
        "{{- $offered := list }}",
        f"{{{{- range {models} }}}}{{{{ $offered = concat $offered (get $migProfiles .) }}}}"
        "{{ end }}",
        f"{{{{- range {ref} }}}}{{{{ if not (has . $offered) }}}}",
        f'{{{{- fail (printf "{value}: %s is a profile of no model in {models_value} (%s) '
        f'(CASTSLICE_MIG_PROFILES)" . (join ", " {models})) }}}}',
        "{{- end }}{{ end }}",
    ]


def _chosen_instance(config: Config, slices: int) -> str | None:
    """The profile a Pod of `slices` gets on the first model the settings name, or None."""
    chosen, _, _ = MigPlacer(config)._choice(slices)
    first = choice.models(config)[0]
    return next((i.profile.name for i in chosen if i.model == first), None)


def _needs_product(chosen: list[Instance], models: tuple[Any, ...]) -> bool:
    """Whether a profile name alone may select another model's instance of other shares."""
    return any(choice.ambiguous(instance, models) for instance in chosen)
